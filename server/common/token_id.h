// The one token-id type: the tokenizer's encodings and decodes, QA windows
// and span models, the engine, the runner and the output processor.
// Signed 32 bits: every vocabulary fits, and a negative id (from a client)
// is visibly invalid rather than a huge unsigned number. Only the
// transports' readers hold client ids as int64 first, so that an id past
// this range is reported as such instead of wrapping.
#pragma once

#include <cstdint>

namespace ropeserve {

using TokenId = std::int32_t;

}  // namespace ropeserve
