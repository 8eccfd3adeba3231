#include "kernels/cpu/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ropeserve::cpu {

namespace {

// Query rows per work item: a long prefill chunk is cut into blocks of
// rows that the threads share (each row's result does not depend on the
// block it is computed in).
constexpr std::int64_t kRowBlock = 16;

template <typename Scalar>
void Kernel(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& block_tables,
            const at::Tensor& query_start, const at::Tensor& context_lens, double scale, at::Tensor& out) {
  const std::int64_t Hq = q.size(1), D = q.size(2);
  const std::int64_t block_size = k_cache.size(1), Hkv = k_cache.size(2);
  const std::int64_t group = Hq / Hkv;
  const std::int64_t S = context_lens.size(0), max_blocks = block_tables.size(1);
  const Scalar* qp = q.data_ptr<Scalar>();
  const Scalar* kp = k_cache.data_ptr<Scalar>();
  const Scalar* vp = v_cache.data_ptr<Scalar>();
  Scalar* op = out.data_ptr<Scalar>();
  const std::int32_t* tables = block_tables.data_ptr<std::int32_t>();
  const std::int64_t* qstart = query_start.data_ptr<std::int64_t>();
  const std::int64_t* ctx = context_lens.data_ptr<std::int64_t>();

  const std::int64_t token_stride_kv = Hkv * D;  // between slots inside a block
  const std::int64_t block_stride = block_size * token_stride_kv;
  // Work items are (sequence, kv head, block of query rows): each serves
  // its rows and the query heads that share the kv head (GQA), reading keys
  // and values straight from their blocks, in the active ISA's variant
  // (paged_attention_core.h), or the generic one for shapes it does not
  // take. Prefill chunks and decode rows take the same path, so a position
  // gets the same bits whether it was computed in a prompt, in a decode
  // step or when a preempted request is recomputed.
  struct Item {
    std::int64_t s, kvh, r0, rows;
  };
  std::vector<Item> items;
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t kvh = 0; kvh < Hkv; ++kvh)
      for (std::int64_t r0 = 0; r0 < qstart[s + 1] - qstart[s]; r0 += kRowBlock)
        items.push_back({s, kvh, r0, std::min(kRowBlock, qstart[s + 1] - qstart[s] - r0)});
  const auto attend = ActiveKernels().attend_item;
  ParallelFor(0, static_cast<std::int64_t>(items.size()), 1, [&](std::int64_t begin, std::int64_t end) {
    // Each thread's, kept across calls: a chunk of work (often one item)
    // then neither allocates nor clears its scores (megabytes at long
    // contexts) again.
    thread_local std::vector<float> scratch;
    for (std::int64_t i = begin; i < end; ++i) {
      const Item& item = items[static_cast<std::size_t>(i)];
      const std::int64_t q0 = qstart[item.s], query_len = qstart[item.s + 1] - q0;
      // The block's rows are the last `rows` positions of this context.
      const std::int64_t L = ctx[item.s] - (query_len - item.r0 - item.rows);
      const auto floats = static_cast<std::size_t>(AttentionScratchFloats(group, D, L));
      if (scratch.size() < floats) scratch.resize(floats);
      const std::int64_t first = ((q0 + item.r0) * Hq + item.kvh * group) * D;
      const AttentionItem it{qp + first,
                             op + first,
                             Hq * D,
                             item.rows,
                             group,
                             D,
                             L,
                             kp + item.kvh * D,
                             vp + item.kvh * D,
                             tables + item.s * max_blocks,
                             block_size,
                             block_stride,
                             token_stride_kv,
                             static_cast<float>(scale),
                             std::is_same_v<Scalar, at::BFloat16>,
                             scratch.data()};
      if (!attend(it)) generic::AttendItem(it);
    }
  });
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
