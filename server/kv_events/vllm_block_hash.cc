#include "server/kv_events/vllm_block_hash.h"

#include <nlohmann/json.hpp>
#include <openssl/sha.h>

#include <vector>

namespace ropeserve::kv_events {

namespace {

// nlohmann's CBOR writer: integers in their shortest form, definite-length
// arrays, null as simple value 22: the canonical encoding vLLM's cbor2 and
// llm-d's fxamacker/cbor produce for these values.
std::uint64_t Low64OfSha256(const nlohmann::json& value) {
  const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(value);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(cbor.data(), cbor.size(), digest);
  std::uint64_t low = 0;
  for (int i = SHA256_DIGEST_LENGTH - 8; i < SHA256_DIGEST_LENGTH; ++i) low = (low << 8) | digest[i];
  return low;
}

}  // namespace

std::uint64_t VllmRootHash(const std::string& seed) { return Low64OfSha256(nlohmann::json(seed)); }

BlockHasher VllmBlockHasher(const std::string& seed) {
  const std::uint64_t root = VllmRootHash(seed);
  return [root](std::optional<BlockHash> parent, std::span<const TokenId> tokens, std::uint64_t extra) {
    nlohmann::json ids = nlohmann::json::array();
    ids.get_ref<nlohmann::json::array_t&>().reserve(tokens.size());
    for (TokenId t : tokens) ids.push_back(static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)));
    nlohmann::json payload = nlohmann::json::array(
        {parent ? parent->value : root, std::move(ids), extra == 0 ? nlohmann::json(nullptr) : nlohmann::json(extra)});
    return BlockHash{Low64OfSha256(payload)};
  };
}

}  // namespace ropeserve::kv_events
