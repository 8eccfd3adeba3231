#include "kernels/cpu/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_avx512.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_utils.h"

namespace ropeserve::cpu {

namespace {

// Loads D elements as float32 into `out` (bfloat16 widens exactly).
inline void LoadRow(const float* src, float* out, std::int64_t D) { std::memcpy(out, src, D * sizeof(float)); }
inline void LoadRow(const at::BFloat16* src, float* out, std::int64_t D) {
  for (std::int64_t i = 0; i < D; ++i) out[i] = static_cast<float>(src[i]);
}

// acc += w * x
inline void Axpy(float w, const float* x, float* acc, std::int64_t D) {
  const Vec wv(w);
  std::int64_t i = 0;
  for (; i + Vec::size() <= D; i += Vec::size())
    at::vec::fmadd(wv, Vec::loadu(x + i), Vec::loadu(acc + i)).store(acc + i);
  for (; i < D; ++i) acc[i] += w * x[i];
}

// Sequences with at least this many query rows (prefill chunks) take the
// GEMM path; the rest (decodes, short chunks) the per-row kernel.
constexpr std::int64_t kGemmMinQueries = 16;
// Query rows per GEMM tile: bounds the score matrix to
// Hq x kQueryTile x context floats.
constexpr std::int64_t kQueryTile = 256;

// Prefill chunk of sequence s by GEMMs: its keys and values gathered from
// the blocks and widened to float32 once, then per tile of query rows
// scores = Q K^T (float32 GEMMs through the BLAS), causal mask, softmax,
// P V. Per-row dot products cost O(L^2 D) vector ops with a horizontal sum
// per key, ~4 GFLOP/s here; the GEMMs run at the BLAS rate.
void GemmSequence(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const std::int32_t* table,
                  std::int64_t q0, std::int64_t query_len, std::int64_t L, double scale, at::Tensor& out) {
  const std::int64_t Hq = q.size(1), D = q.size(2), block_size = k_cache.size(1), Hkv = k_cache.size(2);
  const std::int64_t G = Hq / Hkv, n_blocks = (L + block_size - 1) / block_size;
  const at::Tensor ids = at::from_blob(const_cast<std::int32_t*>(table), {n_blocks}, at::kInt).to(at::kLong);
  // [Hkv, L, D] float32
  const at::Tensor k =
      k_cache.index_select(0, ids).reshape({-1, Hkv, D}).narrow(0, 0, L).to(at::kFloat).permute({1, 0, 2}).contiguous();
  const at::Tensor v =
      v_cache.index_select(0, ids).reshape({-1, Hkv, D}).narrow(0, 0, L).to(at::kFloat).permute({1, 0, 2}).contiguous();
  for (std::int64_t t0 = 0; t0 < query_len; t0 += kQueryTile) {
    const std::int64_t n = std::min(kQueryTile, query_len - t0);
    const std::int64_t visible = L - query_len + t0 + n;  // keys the tile's last row sees
    // [Hkv, G * n, D]: the G query heads of a kv head stacked.
    const at::Tensor qt =
        q.narrow(0, q0 + t0, n).to(at::kFloat).view({n, Hkv, G, D}).permute({1, 2, 0, 3}).reshape({Hkv, G * n, D});
    at::Tensor scores = at::bmm(qt, k.narrow(1, 0, visible).transpose(1, 2)).mul_(scale).view({Hkv, G, n, visible});
    // Row i of the tile sits at position L - query_len + t0 + i.
    const at::Tensor qpos = at::arange(L - query_len + t0, L - query_len + t0 + n, at::kLong).unsqueeze(1);
    const at::Tensor kpos = at::arange(visible, at::kLong).unsqueeze(0);
    scores.masked_fill_(kpos > qpos, -std::numeric_limits<float>::infinity());
    const at::Tensor probs = at::softmax(scores, -1).view({Hkv, G * n, visible});
    const at::Tensor o = at::bmm(probs, v.narrow(1, 0, visible)).view({Hkv, G, n, D}).permute({2, 0, 1, 3});
    out.narrow(0, q0 + t0, n).copy_(o.reshape({n, Hq, D}));
  }
}

template <typename Scalar>
void Kernel(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& block_tables,
            const at::Tensor& query_start, const at::Tensor& context_lens, double scale, at::Tensor& out) {
  const std::int64_t T = q.size(0), Hq = q.size(1), D = q.size(2);
  const std::int64_t block_size = k_cache.size(1), Hkv = k_cache.size(2);
  const std::int64_t group = Hq / Hkv;
  const std::int64_t S = context_lens.size(0), max_blocks = block_tables.size(1);
  (void)T;
  const Scalar* qp = q.data_ptr<Scalar>();
  const Scalar* kp = k_cache.data_ptr<Scalar>();
  const Scalar* vp = v_cache.data_ptr<Scalar>();
  Scalar* op = out.data_ptr<Scalar>();
  const std::int32_t* tables = block_tables.data_ptr<std::int32_t>();
  const std::int64_t* qstart = query_start.data_ptr<std::int64_t>();
  const std::int64_t* ctx = context_lens.data_ptr<std::int64_t>();

  const std::int64_t token_stride_kv = Hkv * D;  // between slots inside a block
  const std::int64_t block_stride = block_size * token_stride_kv;
  // Work items are (sequence, kv head): each serves all of its queries and
  // the query heads that share the kv head (GQA). On CPUs with AVX-512 the
  // item goes to the vectorized path (paged_attention_avx512.cc, which reads
  // keys and values straight from their blocks); otherwise it widens its
  // keys and values to float32 once and uses at::vec.
  const bool avx512 = CpuHasAvx512Bf16();
  ParallelFor(0, S * Hkv, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> qf(D), acc(D), keys, values, scores;
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t s = item / Hkv, kvh = item % Hkv;
      const std::int64_t L = ctx[s];
      const std::int64_t q0 = qstart[s], query_len = qstart[s + 1] - q0;
      if (query_len >= kGemmMinQueries) continue;  // GemmSequence's
      const std::int32_t* table = tables + s * max_blocks;
      if (avx512) {
        scores.resize(static_cast<size_t>(avx512::AttentionScratchFloats(group, D, L)));
        const std::int64_t first = (q0 * Hq + kvh * group) * D;
        const avx512::AttentionItem it{qp + first,
                                       op + first,
                                       Hq * D,
                                       query_len,
                                       group,
                                       D,
                                       L,
                                       kp + kvh * D,
                                       vp + kvh * D,
                                       table,
                                       block_size,
                                       block_stride,
                                       token_stride_kv,
                                       static_cast<float>(scale),
                                       std::is_same_v<Scalar, at::BFloat16>,
                                       scores.data()};
        if (avx512::AttendItem(it)) continue;
      }
      keys.resize(static_cast<size_t>(L * D));
      values.resize(static_cast<size_t>(L * D));
      for (std::int64_t j = 0; j < L; ++j) {
        const std::int64_t off = table[j / block_size] * block_stride + (j % block_size) * token_stride_kv + kvh * D;
        LoadRow(kp + off, keys.data() + j * D, D);
        LoadRow(vp + off, values.data() + j * D, D);
      }
      scores.resize(static_cast<size_t>(L));
      for (std::int64_t r = 0; r < query_len; ++r) {
        const std::int64_t row = q0 + r;
        const std::int64_t n_keys = L - query_len + r + 1;  // causal
        for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          LoadRow(qp + (row * Hq + h) * D, qf.data(), D);
          float max_score = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < n_keys; ++j) {
            scores[j] = Dot(qf.data(), keys.data() + j * D, D) * static_cast<float>(scale);
            max_score = std::max(max_score, scores[j]);
          }
          std::int64_t j = 0;
          const Vec mv(max_score);
          for (; j + Vec::size() <= n_keys; j += Vec::size())
            (Vec::loadu(scores.data() + j) - mv).exp().store(scores.data() + j);
          for (; j < n_keys; ++j) scores[j] = std::exp(scores[j] - max_score);
          float sum = 0;
          for (std::int64_t i = 0; i < n_keys; ++i) sum += scores[i];
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (std::int64_t i = 0; i < n_keys; ++i) Axpy(scores[i], values.data() + i * D, acc.data(), D);
          Scalar* orow = op + (row * Hq + h) * D;
          const float inv = 1.0f / sum;
          for (std::int64_t d = 0; d < D; ++d) orow[d] = static_cast<Scalar>(acc[d] * inv);
        }
      }
    }
  });
  for (std::int64_t s = 0; s < S; ++s)
    if (qstart[s + 1] - qstart[s] >= kGemmMinQueries)
      GemmSequence(q, k_cache, v_cache, tables + s * max_blocks, qstart[s], qstart[s + 1] - qstart[s], ctx[s], scale,
                   out);
}

}  // namespace

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_tables, const at::Tensor& query_start, const at::Tensor& context_lens,
                          double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(), "paged attention shapes");
  TORCH_CHECK(q.size(2) == k_cache.size(3) && q.size(1) % k_cache.size(2) == 0, "head dims / GQA ratio");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && query_start.scalar_type() == at::kLong &&
                  context_lens.scalar_type() == at::kLong,
              "index dtypes");
  at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty_like(qc);
  if (q.scalar_type() == at::kFloat) {
    Kernel<float>(qc, k_cache, v_cache, block_tables.contiguous(), query_start.contiguous(), context_lens.contiguous(),
                  scale, out);
  } else if (q.scalar_type() == at::kBFloat16) {
    Kernel<at::BFloat16>(qc, k_cache, v_cache, block_tables.contiguous(), query_start.contiguous(),
                         context_lens.contiguous(), scale, out);
  } else {
    TORCH_CHECK(false, "paged attention supports float32 and bfloat16, got ", q.scalar_type());
  }
  return out;
}

void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                  const at::Tensor& slot_mapping) {
  TORCH_CHECK(
      k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes(),
      "WriteKvCache: caches [num_blocks, block_size, Hkv, D], contiguous");
  const std::int64_t T = slot_mapping.size(0), slots = k_cache.size(0) * k_cache.size(1);
  const std::int64_t row = k_cache.size(2) * k_cache.size(3);
  TORCH_CHECK(k.numel() == T * row && v.numel() == T * row, "WriteKvCache: k, v must be [T, Hkv, D]");
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() && v.scalar_type() == v_cache.scalar_type(),
              "WriteKvCache: k, v in the caches' dtype");
  const at::Tensor kc = k.contiguous(), vc = v.contiguous(), slot = slot_mapping.to(at::kLong).contiguous();
  const std::int64_t* s = slot.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < T; ++i)
    TORCH_CHECK(s[i] == -1 || (s[i] >= 0 && s[i] < slots), "WriteKvCache: slot outside the cache");
  const auto bytes = static_cast<std::size_t>(row * k_cache.element_size());
  const auto* ksrc = static_cast<const char*>(kc.data_ptr());
  const auto* vsrc = static_cast<const char*>(vc.data_ptr());
  auto* kdst = static_cast<char*>(k_cache.data_ptr());
  auto* vdst = static_cast<char*>(v_cache.data_ptr());
  ParallelFor(0, T, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      if (s[i] < 0) continue;  // a padding row
      std::memcpy(kdst + s[i] * bytes, ksrc + i * bytes, bytes);
      std::memcpy(vdst + s[i] * bytes, vsrc + i * bytes, bytes);
    }
  });
}

}  // namespace ropeserve::cpu
