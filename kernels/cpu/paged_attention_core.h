// The CPU paged attention's kernel (decode rows and prefill chunks,
// kernels/cpu/paged_attention.cc) as one work item a call, with an
// implementation per ISA (paged_attention_{generic,avx2,avx512,neon}.cc),
// chosen through the kernel table (kernel_table.h). No LibTorch header:
// each implementation is compiled with its own ISA flags.
#pragma once

#include <cstdint>

namespace ropeserve::cpu {

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

// (Row, head) pairs a vector variant computes together when the group is
// smaller: a decode row's group, or as many of a chunk's rows as fit.
inline constexpr std::int64_t kAttentionBlockPairs = 32;

// Floats of key or value rows a vector variant widens at a time (16 KB,
// in L1): a multiple of 4 rows, at least 4 (head sizes up to 1024).
inline constexpr std::int64_t kAttentionTileFloats = 4096;

// Scratch every variant fits in: the blocked path's q, scores (rows of the
// context rounded up to 4 keys) and sums for its (row, head) pairs, plus a
// tile; the AVX-512 per-row loops' q and scores for the group padded to
// whole chunks of up to 16 heads (+ 16); the generic one's q, scores, sums.
inline std::int64_t AttentionScratchFloats(std::int64_t group, std::int64_t head_dim, std::int64_t context_len) {
  const std::int64_t pairs = (group > kAttentionBlockPairs ? group : kAttentionBlockPairs) + 16;
  return pairs * (2 * head_dim + context_len + 4) + kAttentionTileFloats;
}

// Arithmetic of every variant: q scaled first (q * scale rounded to
// float32), scores as float32 dot products, softmax with the row's max
// subtracted and exponentials in float32, probabilities times values
// summed in float32, then times 1 / sum. The variants differ in the order
// of their float32 sums (and avx2 / avx512 use their Exp, within 2 ulp).
namespace generic {
// Any head size and group: the reference.
bool AttendItem(const AttentionItem& item);
}  // namespace generic
namespace avx2 {
// False (nothing written) unless the head size is a multiple of 8 up to
// 256 and the group at most 256.
bool AttendItem(const AttentionItem& item);
}  // namespace avx2
namespace avx512 {
// False (nothing written) unless the head size is a multiple of 16 up to
// 256 and the group at most 256.
bool AttendItem(const AttentionItem& item);
}  // namespace avx512
namespace neon {
// False (nothing written) unless the head size is a multiple of 4 up to
// 256 and the group at most 256.
bool AttendItem(const AttentionItem& item);
}  // namespace neon

}  // namespace ropeserve::cpu
