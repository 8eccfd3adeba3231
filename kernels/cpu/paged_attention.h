// CPU paged attention for a packed batch of prefill chunks and decode
// tokens: each query attends to its sequence's cached prefix and causally
// within its chunk. Work items of (sequence, kv head, up to 16 query rows)
// run the active ISA's kernel (paged_attention_core.h; the vector ones
// blocked over (row, head) pairs, paged_attention_blocked.h) on the
// kernels' thread pool, for decode rows and prefill chunks alike: a row's
// result is the same bits whatever chunk, batch or step computes it.
// float32 accumulation for float32 and bfloat16 inputs. Oracle:
// reference::PagedAttention (kernels/reference).
#pragma once

#include <ATen/core/Tensor.h>

namespace ropeserve::cpu {

// q:            [T, Hq, D] float32 or bfloat16, contiguous
// k_cache:      [num_blocks, block_size, Hkv, D] same dtype, contiguous
// v_cache:      [num_blocks, block_size, Hkv, D]
// block_tables: [S, max_blocks_per_seq] int32
// query_start:  [S + 1] int64: sequence s owns query rows [query_start[s], query_start[s+1])
// context_lens: [S] int64: keys of sequence s, including its queries (the
//               queries are the last rows of its context)
// returns       [T, Hq, D] in q's dtype
at::Tensor PagedAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_tables, const at::Tensor& query_start, const at::Tensor& context_lens,
                          double scale);

// Stores the step's keys and values in their cache slots: row i of k and v
// goes to slot slot_mapping[i] (= block * block_size + offset) of k_cache
// and v_cache. A row copy per token, parallel over tokens; every slot is
// checked to lie inside the cache, but for -1 (a padding row: not written). Oracle: reference::WriteKvCache.
// k, v: [T, Hkv, D]; caches as above; slot_mapping: [T] int64.
void WriteKvCache(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_cache, at::Tensor& v_cache,
                  const at::Tensor& slot_mapping);

}  // namespace ropeserve::cpu
