// vLLM's and llm-d's block hashes (vLLM --prefix-caching-hash-algo
// sha256_cbor; llm-d's kvblock.ChunkedTokenDatabase): a router that hashes a
// prompt's token ids itself finds the blocks our KV cache events name.
//
//   root  = low64(SHA-256(CBOR(seed)))                 seed: a text string
//   block = low64(SHA-256(CBOR([parent, [t0, .., tB-1], extra])))
//
// CBOR in its canonical (shortest) form: `parent` an unsigned integer (the
// previous block's hash, `root` for a prompt's first block), the token ids
// unsigned integers, `extra` null (or, for a request with a cache salt, the
// salt: such blocks are private to that salt, and a router's hashes never
// name them). low64 is the digest's last 8 bytes read big-endian. `seed` is
// what vLLM takes from PYTHONHASHSEED and llm-d's indexer from its
// HashSeed; replicas and the router must share it.
#pragma once

#include <cstdint>
#include <string>

#include "server/engine/block_pool.h"

namespace ropeserve::kv_events {

// The root every prompt's chain starts from.
std::uint64_t VllmRootHash(const std::string& seed);

// A BlockPool hasher computing the hashes above.
BlockHasher VllmBlockHasher(const std::string& seed);

}  // namespace ropeserve::kv_events
