#include "kernels/cuda/torch_glue.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/kernels.h"

namespace ropeserve::cuda {

namespace {

DType KernelDType(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf,
              "kernels/cuda take bfloat16 or float16, got ", t.scalar_type());
  return t.scalar_type() == at::kBFloat16 ? DType::kBF16 : DType::kF16;
}

Stream CurrentStream() { return c10::cuda::getCurrentCUDAStream().stream(); }

void Check(int status, const char* what) { TORCH_CHECK(status == 0, what, ": CUDA error ", status); }

void CheckCuda(const at::Tensor& t, const char* name) { TORCH_CHECK(t.is_cuda(), name, " must be on a CUDA device"); }

// The checks the RoPE and cache-write entries share: [T, H, D] rows
// contiguous inside (a view of a projection may have any row stride), the
// paged caches, the float32 RoPE table and the per-token int64 vectors.
void CheckRowsInside(std::initializer_list<const at::Tensor*> ts, const char* names) {
  for (const at::Tensor* t : ts)
    TORCH_CHECK(t->stride(2) == 1 && t->stride(1) == t->size(2), names, " rows must be contiguous inside");
}
void CheckCaches(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& k) {
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.dim() == 4 && k_cache.size(2) == k.size(1) && k_cache.size(3) == k.size(2),
              "caches must be contiguous [blocks, block_size, Hkv, D]");
}
void CheckCosSin(const at::Tensor& cos_sin) {
  TORCH_CHECK(cos_sin.scalar_type() == at::kFloat && cos_sin.is_contiguous() && cos_sin.dim() == 2,
              "cos_sin: float32 [max_pos, rotary_dim]");
}
void CheckPerToken(const at::Tensor& t, std::int64_t tokens, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.numel() == tokens, what, ": int64 [T]");
}

}  // namespace

void ReshapeAndCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                     const at::Tensor& slot_mapping) {
  CheckCuda(k, "k");
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes(), "k and v must be [T, Hkv, D]");
  CheckRowsInside({&k, &v}, "k and v");
  CheckCaches(k_cache, v_cache, k);
  CheckPerToken(slot_mapping, k.size(0), "slot_mapping");
  Check(ropeserve::cuda::ReshapeAndCache(k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                                         slot_mapping.data_ptr<std::int64_t>(), k.size(0), k.size(1), k.size(2),
                                         k.stride(0), v.stride(0), KernelDType(k), CurrentStream()),
        "ReshapeAndCache");
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  CheckCuda(x, "x");
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const std::int64_t hidden = xc.size(-1);
  TORCH_CHECK(weight.numel() == hidden && weight.scalar_type() == x.scalar_type(), "weight: [hidden], x's dtype");
  Check(ropeserve::cuda::RmsNorm(out.data_ptr(), xc.data_ptr(), weight.contiguous().data_ptr(), xc.numel() / hidden,
                                 hidden, static_cast<float>(eps), KernelDType(x), CurrentStream()),
        "RmsNorm");
  return out;
}

void FusedAddRmsNorm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  CheckCuda(x, "x");
  TORCH_CHECK(x.is_contiguous() && residual.is_contiguous() && x.sizes() == residual.sizes(),
              "x and residual: contiguous, same shape");
  const std::int64_t hidden = x.size(-1);
  TORCH_CHECK(weight.numel() == hidden && weight.scalar_type() == x.scalar_type(), "weight: [hidden], x's dtype");
  Check(ropeserve::cuda::FusedAddRmsNorm(x.data_ptr(), residual.data_ptr(), weight.contiguous().data_ptr(),
                                         x.numel() / hidden, hidden, static_cast<float>(eps), KernelDType(x),
                                         CurrentStream()),
        "FusedAddRmsNorm");
}

at::Tensor SiluAndMul(const at::Tensor& gate_up) {
  CheckCuda(gate_up, "gate_up");
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "gate_up: [T, 2 I]");
  const at::Tensor g = gate_up.contiguous();
  const std::int64_t T = g.size(0), I = g.size(1) / 2;
  at::Tensor out = at::empty({T, I}, g.options());
  Check(ropeserve::cuda::SiluAndMul(out.data_ptr(), g.data_ptr(), T, I, KernelDType(g), CurrentStream()), "SiluAndMul");
  return out;
}

void RotaryEmbedding(const at::Tensor& positions, at::Tensor& q, at::Tensor& k, const at::Tensor& cos_sin) {
  CheckCuda(q, "q");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) && q.size(2) == k.size(2), "q, k: [T, H, D]");
  CheckRowsInside({&q, &k}, "q and k");
  CheckCosSin(cos_sin);
  CheckPerToken(positions, q.size(0), "positions");
  Check(ropeserve::cuda::RotaryEmbedding(positions.data_ptr<std::int64_t>(), q.data_ptr(), k.data_ptr(),
                                         cos_sin.data_ptr<float>(), q.size(0), q.size(1), k.size(1), q.size(2),
                                         cos_sin.size(1), q.stride(0), k.stride(0), KernelDType(q), CurrentStream()),
        "RotaryEmbedding");
}

void RopeAndCache(const at::Tensor& positions, at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& slot_mapping, const at::Tensor& cos_sin) {
  CheckCuda(q, "q");
  TORCH_CHECK(
      q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2),
      "q: [T, Hq, D], k and v: [T, Hkv, D]");
  CheckRowsInside({&q, &k, &v}, "q, k and v");
  CheckCaches(k_cache, v_cache, k);
  CheckCosSin(cos_sin);
  CheckPerToken(positions, q.size(0), "positions");
  CheckPerToken(slot_mapping, k.size(0), "slot_mapping");
  Check(ropeserve::cuda::RopeAndCache(positions.data_ptr<std::int64_t>(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                      k_cache.data_ptr(), v_cache.data_ptr(), slot_mapping.data_ptr<std::int64_t>(),
                                      cos_sin.data_ptr<float>(), q.size(0), q.size(1), k.size(1), q.size(2),
                                      cos_sin.size(1), q.stride(0), k.stride(0), v.stride(0), KernelDType(q),
                                      CurrentStream()),
        "RopeAndCache");
}

std::int64_t PartitionSizeForRows(std::int64_t rows) {
  std::int64_t size = 64;
  while (size < kPartitionSize && size < 8 * rows) size *= 2;
  return size;
}

std::int64_t PartitionedAttentionWorkspaceBytes(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                                std::int64_t max_context) {
  // Past the rows where the partition reaches kPartitionSize the need only
  // grows with rows: the fewer rows to look at stop there.
  std::int64_t bytes = PagedAttentionWorkspaceBytes(rows, heads, head_dim, max_context, PartitionSizeForRows(rows));
  for (std::int64_t r = 1; r < rows && PartitionSizeForRows(r) < kPartitionSize; ++r)
    bytes = std::max(bytes, PagedAttentionWorkspaceBytes(r, heads, head_dim, max_context, PartitionSizeForRows(r)));
  return bytes;
}

namespace {

// `bytes` of float32 workspace whose last rows x heads elements (the
// attention's int32 counters) are zero.
at::Tensor WorkspaceOfBytes(std::int64_t bytes, std::int64_t rows, std::int64_t heads,
                            const at::TensorOptions& options) {
  at::Tensor ws = at::empty({std::max<std::int64_t>(1, bytes / 4)}, options.dtype(at::kFloat));
  // The attention's counters (int32, an element each) are the last rows x
  // heads elements, zero; each launch leaves them zero. A launch of fewer
  // rows counts in the tail of that zeroed tail, and its partials (in front)
  // stay clear of the counters of any launch this workspace was sized for.
  // Only they are cleared: one small memset, also where a CUDA graph
  // allocates its workspace.
  const std::int64_t counters = rows * heads;
  if (counters > 0) ws.narrow(0, ws.numel() - counters, counters).zero_();
  return ws;
}

}  // namespace

at::Tensor PagedAttentionWorkspace(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                   std::int64_t max_context, const at::TensorOptions& options,
                                   std::int64_t partition_size) {
  return WorkspaceOfBytes(PagedAttentionWorkspaceBytes(rows, heads, head_dim, max_context, partition_size), rows, heads,
                          options);
}

at::Tensor PartitionedAttentionWorkspace(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                                         std::int64_t max_context, const at::TensorOptions& options) {
  return WorkspaceOfBytes(PartitionedAttentionWorkspaceBytes(rows, heads, head_dim, max_context), rows, heads, options);
}

at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_tables, const at::Tensor& query_start, const at::Tensor& context_lens,
                          std::int64_t max_context, double scale, const at::Tensor& workspace,
                          std::int64_t partition_size, AttentionKernel kernel) {
  CheckCuda(q, "q");
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.is_contiguous(),
              "q: [R, Hq, D]; caches: contiguous [blocks, block_size, Hkv, D]");
  TORCH_CHECK(block_tables.scalar_type() == at::kInt && block_tables.dim() == 2, "block_tables: int32 [S, max_blocks]");
  TORCH_CHECK(query_start.scalar_type() == at::kLong && context_lens.scalar_type() == at::kLong &&
                  query_start.numel() == context_lens.numel() + 1 && block_tables.size(0) >= context_lens.numel(),
              "query_start: int64 [S + 1], context_lens: int64 [S], a block table row per sequence");
  // A view of the qkv projection is read in place: rows apart, heads packed.
  const bool rows_of_packed_heads = q.stride(2) == 1 && q.stride(1) == q.size(2);
  const at::Tensor qc = rows_of_packed_heads ? q : q.contiguous();
  const std::int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  at::Tensor out = at::empty({rows, heads, dim}, q.options());
  const std::int64_t need = PagedAttentionWorkspaceBytes(rows, heads, dim, max_context, partition_size) / 4;
  const at::Tensor ws = workspace.defined()
                            ? workspace
                            : PagedAttentionWorkspace(rows, heads, dim, max_context, q.options(), partition_size);
  TORCH_CHECK(ws.scalar_type() == at::kFloat && ws.is_contiguous() && ws.numel() >= need,
              "PagedAttention: the workspace is too small for these rows and contexts");
  Check(
      ropeserve::cuda::PagedAttention(
          out.data_ptr(), qc.data_ptr(), rows > 1 ? qc.stride(0) : heads * dim, k_cache.data_ptr(), v_cache.data_ptr(),
          block_tables.contiguous().data_ptr<std::int32_t>(), query_start.contiguous().data_ptr<std::int64_t>(),
          context_lens.contiguous().data_ptr<std::int64_t>(), context_lens.numel(), rows, heads, k_cache.size(2), dim,
          k_cache.size(1), block_tables.size(1), max_context, static_cast<float>(scale), partition_size, ws.data_ptr(),
          reinterpret_cast<std::int32_t*>(ws.data_ptr<float>() + ws.numel() - rows * heads), KernelDType(q),
          CurrentStream(), kernel),
      "PagedAttention");
  return out;
}

namespace {

// What both 4-bit entries ask of x, K, the group and the bias (N outputs),
// and x as they read it: contiguous rows starting on 16 bytes (a view
// starting mid-vector is copied first).
at::Tensor Int4Rows16(const at::Tensor& x_in, std::int64_t max_rows, std::int64_t k, std::int64_t group_size,
                      std::int64_t N, const at::Tensor& bias, const char* what) {
  CheckCuda(x_in, "x");
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(1) == k && x_in.size(0) >= 1 && x_in.size(0) <= max_rows, what,
              ": x must be [1..", max_rows, ", K]");
  TORCH_CHECK(k % 32 == 0 && (group_size == 32 || group_size == 64 || group_size == 128) && k % group_size == 0, what,
              ": K a multiple of 32 and of the group size (32, 64 or 128)");
  TORCH_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.numel() == N &&
                                  bias.device() == x_in.device()),
              what, ": bias float32 [N] on x's device");
  at::Tensor x = x_in.contiguous();
  if (reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 != 0) x = x.clone();
  return x;
}

// scale float32 and zero uint8, both of `sizes`, on `device`.
void CheckScalesAndZeros(const at::Tensor& scale, const at::Tensor& zero, at::IntArrayRef sizes,
                         const at::Device& device, const char* what) {
  TORCH_CHECK(scale.defined() && zero.defined() && scale.scalar_type() == at::kFloat && scale.is_contiguous() &&
                  scale.sizes() == sizes && zero.scalar_type() == at::kByte && zero.is_contiguous() &&
                  zero.sizes() == sizes && scale.device() == device && zero.device() == device,
              what, ": scale float32 and zero uint8 ", sizes, " on x's device");
}

}  // namespace

at::Tensor Int4Linear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor& scale, const at::Tensor& zero,
                      std::int64_t k, std::int64_t group_size, const at::Tensor& bias) {
  TORCH_CHECK(packed.defined() && packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.size(1) == (k + 63) / 64 * 32 && packed.device() == x_in.device(),
              "Int4Linear: packed must be uint8 [N, Kp / 2] on x's device");
  const std::int64_t N = packed.size(0);
  const at::Tensor x = Int4Rows16(x_in, kInt4GemvMaxRows, k, group_size, N, bias, "Int4Linear");
  CheckScalesAndZeros(scale, zero, {N, k / group_size}, x.device(), "Int4Linear");
  at::Tensor y = at::empty({x.size(0), N}, x.options());
  Check(ropeserve::cuda::Int4Linear(y.data_ptr(), x.data_ptr(), x.size(0), packed.data_ptr<std::uint8_t>(),
                                    scale.data_ptr<float>(), zero.data_ptr<std::uint8_t>(),
                                    bias.defined() ? bias.data_ptr<float>() : nullptr, N, k, group_size, KernelDType(x),
                                    CurrentStream()),
        "Int4Linear");
  return y;
}

at::Tensor Int4MmaLinear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor& scale,
                         const at::Tensor& zero, std::int64_t k, std::int64_t group_size, const at::Tensor& bias) {
  TORCH_CHECK(packed.defined() && packed.dim() == 4 && packed.scalar_type() == at::kByte && packed.is_contiguous() &&
                  packed.size(1) == (k + 63) / 64 && packed.size(2) == 32 && packed.size(3) == 16 &&
                  packed.device() == x_in.device(),
              "Int4MmaLinear: packed must be uint8 [N / 16, Kp / 64, 32, 16] on x's device");
  const std::int64_t N = packed.size(0) * 16;
  const at::Tensor x = Int4Rows16(x_in, kInt4MmaMaxRows, k, group_size, N, bias, "Int4MmaLinear");
  CheckScalesAndZeros(scale, zero, {k / group_size, N}, x.device(), "Int4MmaLinear");
  at::Tensor y = at::empty({x.size(0), N}, x.options());
  Check(ropeserve::cuda::Int4MmaLinear(y.data_ptr(), x.data_ptr(), x.size(0), packed.data_ptr<std::uint8_t>(),
                                       scale.data_ptr<float>(), zero.data_ptr<std::uint8_t>(),
                                       bias.defined() ? bias.data_ptr<float>() : nullptr, N, k, group_size,
                                       KernelDType(x), CurrentStream()),
        "Int4MmaLinear");
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> SummarizeRows(const at::Tensor& logits) {
  auto [lse, max, argmax, packed] = SummarizeRowsPacked(logits);
  return {lse, max, argmax};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> SummarizeRowsPacked(const at::Tensor& logits) {
  CheckCuda(logits, "logits");
  const std::int64_t rows = logits.dim() == 2 ? logits.size(0) : 0;
  at::Tensor packed = at::empty({4 * rows}, logits.options().dtype(at::kInt));
  at::Tensor argmax = at::empty({rows}, logits.options().dtype(at::kLong));
  auto [lse, max] = SummarizeRowsPackedInto(logits, packed, argmax);
  return {lse, max, argmax, packed};
}

std::tuple<at::Tensor, at::Tensor> SummarizeRowsPackedInto(const at::Tensor& logits, const at::Tensor& packed,
                                                           const at::Tensor& argmax) {
  CheckCuda(logits, "logits");
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.dim() == 2 && logits.size(1) >= 1,
              "logits: float32 [R, V], V >= 1");
  const at::Tensor l = logits.contiguous();
  const std::int64_t rows = l.size(0);
  TORCH_CHECK(packed.scalar_type() == at::kInt && packed.dim() == 1 && packed.size(0) == 4 * rows &&
                  packed.is_contiguous() && packed.device() == l.device(),
              "packed: int32 [4R] on the logits' device");
  TORCH_CHECK(argmax.scalar_type() == at::kLong && argmax.dim() == 1 && argmax.size(0) == rows &&
                  argmax.is_contiguous() && argmax.device() == l.device(),
              "argmax: int64 [R] on the logits' device");
  const at::Tensor floats = packed.narrow(0, 0, 2 * rows).view(at::kFloat);
  at::Tensor lse = floats.narrow(0, 0, rows), max = floats.narrow(0, rows, rows);
  Check(ropeserve::cuda::SummarizeRows(l.data_ptr<float>(), rows, l.size(1), lse.data_ptr<float>(),
                                       max.data_ptr<float>(), argmax.data_ptr<std::int64_t>(), CurrentStream(),
                                       packed.data_ptr<std::int32_t>() + 2 * rows),
        "SummarizeRows");
  return {lse, max};
}

void CopyToHostAsync(void* dst, const at::Tensor& src) {
  CheckCuda(src, "src");
  TORCH_CHECK(src.is_contiguous(), "CopyToHostAsync: src must be contiguous");
  Check(cudaMemcpyAsync(dst, src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(CurrentStream())),
        "CopyToHostAsync");
}

at::Tensor SampleRows(const at::Tensor& logits, const at::Tensor& temperature, const at::Tensor& top_k,
                      const at::Tensor& top_p, const at::Tensor& min_p, const at::Tensor& seed,
                      const at::Tensor& offset) {
  CheckCuda(logits, "logits");
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.dim() == 2, "logits: float32 [R, V]");
  const at::Tensor l = logits.contiguous();
  at::Tensor out = at::empty({l.size(0)}, l.options().dtype(at::kLong));
  Check(
      ropeserve::cuda::SampleRows(l.data_ptr<float>(), l.size(0), l.size(1), temperature.contiguous().data_ptr<float>(),
                                  top_k.contiguous().data_ptr<std::int32_t>(), top_p.contiguous().data_ptr<float>(),
                                  min_p.contiguous().data_ptr<float>(),
                                  reinterpret_cast<const std::uint64_t*>(seed.contiguous().data_ptr<std::int64_t>()),
                                  reinterpret_cast<const std::uint64_t*>(offset.contiguous().data_ptr<std::int64_t>()),
                                  out.data_ptr<std::int64_t>(), CurrentStream()),
      "SampleRows");
  return out;
}

}  // namespace ropeserve::cuda
