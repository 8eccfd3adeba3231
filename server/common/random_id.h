// Ids that cannot be guessed: `prefix` + 2 * `bytes` lowercase hex digits
// from OpenSSL's generator (std::random_device when it fails).
#pragma once

#include <cstddef>
#include <string>

namespace ropeserve {

std::string RandomId(const char* prefix, std::size_t bytes = 24);

}  // namespace ropeserve
