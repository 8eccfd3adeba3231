#include "server/common/random_id.h"

#include <openssl/rand.h>

#include <random>
#include <vector>

namespace ropeserve {

std::string RandomId(const char* prefix, std::size_t bytes) {
  std::vector<unsigned char> random(bytes);
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) {
    // OpenSSL's generator failed (no entropy source): a random_device
    // fallback rather than a predictable id.
    std::random_device rd;
    for (auto& b : random) b = static_cast<unsigned char>(rd());
  }
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (unsigned char b : random) {
    id.push_back(hex[b >> 4]);
    id.push_back(hex[b & 15]);
  }
  return id;
}

}  // namespace ropeserve
