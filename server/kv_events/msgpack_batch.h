// A KV event batch as vLLM's ZmqEventPublisher encodes it (msgspec structs
// with array_like=True and omit_defaults=True, tagged by class name), so
// that llm-d's and vLLM's subscribers decode ours:
//
//   batch            = [ts: float64, [event, ...], data_parallel_rank: int]
//   BlockStored      = ["BlockStored", [hash: uint64, ...], parent: uint64 | nil,
//                       [token_id, ...], block_size, lora_id: nil, medium: str,
//                       lora_name: nil]
//   BlockRemoved     = ["BlockRemoved", [hash: uint64, ...], medium: str]
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// (vLLM omits trailing fields left at their defaults: extra_keys, group_idx
// and the KV cache spec of BlockStored, group_idx of BlockRemoved.)
#pragma once

#include <string>

#include "server/engine/kv_events.h"

namespace ropeserve::kv_events {

struct BatchFormat {
  int block_size = 16;
  std::string medium = "GPU";  // vLLM's names: "GPU" (the device pool), "CPU" (host memory)
  // The host KV tier's events (KvEvent::offloaded): "CPU" beside a GPU
  // pool (as vLLM's offloading); CPU workers' tier, beside their "CPU"
  // pool, is "CPU_TIER".
  std::string offload_medium = "CPU";
  int data_parallel_rank = 0;
};

std::string EncodeBatch(const KvEventBatch& batch, const BatchFormat& format);

}  // namespace ropeserve::kv_events
