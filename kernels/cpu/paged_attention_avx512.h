// The AVX-512 per-row path of the CPU paged attention (decode rows and
// short chunks), called from kernels/cpu/paged_attention.cc after a
// run-time CPU check. No LibTorch header: the file is compiled with
// AVX-512 flags of its own.
#pragma once

#include <cstdint>

namespace ropeserve::cpu::avx512 {

// One work item: the query rows of one sequence and the `group` query
// heads that share one kv head.
struct AttentionItem {
  const void* q;              // first row's first head of the group; rows q_row_stride elements apart
  void* out;                  // same layout as q
  std::int64_t q_row_stride;  // Hq * head_dim
  std::int64_t rows, group, head_dim, context_len;  // the rows are the last `rows` positions of the context
  const void* k_cache;                              // already offset to this kv head
  const void* v_cache;
  const std::int32_t* table;                            // the sequence's block table
  std::int64_t block_size, block_stride, token_stride;  // elements
  float scale;
  bool bf16;       // bfloat16 inputs and output, else float32
  float* scratch;  // AttentionScratchFloats(group, head_dim, context_len) floats
};

std::int64_t AttentionScratchFloats(std::int64_t group, std::int64_t head_dim, std::int64_t context_len);

// False (nothing written) when the head size is not 16, 32, 64, 128 or 256
// or the group is larger than 256: the caller's generic path runs.
bool AttendItem(const AttentionItem& item);

}  // namespace ropeserve::cpu::avx512
