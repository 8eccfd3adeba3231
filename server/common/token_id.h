// The one token-id type, from the tokenizer to the engine and the API.
// Signed 32 bits: every vocabulary fits, and a negative id (from a client)
// is visibly invalid rather than a huge unsigned number.
#pragma once

#include <cstdint>

namespace ropeserve {

using TokenId = std::int32_t;

}  // namespace ropeserve
