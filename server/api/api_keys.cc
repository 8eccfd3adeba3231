#include "server/api/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>

namespace ropeserve::api {

ApiKeys::Digest ApiKeys::Hash(std::string_view s) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

StatusOr<ApiKeys> ApiKeys::Load(const std::vector<std::string>& keys, const std::string& file) {
  std::vector<std::string> all = keys;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return InvalidArgument("--api-key-file: cannot read " + file);
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      std::size_t b = line.find_first_not_of(" \t");
      if (b == std::string::npos || line[b] == '#') continue;
      all.push_back(line.substr(b));
    }
    if (all.size() == keys.size()) return InvalidArgument("--api-key-file " + file + " holds no key");
  }
  ApiKeys k;
  for (const auto& key : all) {
    if (key.empty()) return InvalidArgument("API keys must not be empty");
    for (unsigned char c : key)
      if (c <= 0x20 || c >= 0x7f) return InvalidArgument("API keys must be printable ASCII without spaces");
    k.digests_.push_back(Hash(key));
  }
  return k;
}

Status ApiKeys::Check(std::string_view authorization) const {
  if (!enabled()) return Status::Ok();
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.empty()) return Unauthenticated("missing API key: send 'Authorization: Bearer <key>'");
  if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer) {
    return Unauthenticated("the Authorization header must be 'Bearer <key>'");
  }
  const Digest presented = Hash(authorization.substr(kBearer.size()));
  bool match = false;
  for (const auto& d : digests_) match |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0;
  if (!match) return Unauthenticated("invalid API key");
  return Status::Ok();
}

std::string ApiKeys::Owner(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (!enabled() || authorization.size() <= kBearer.size()) return "";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : Hash(authorization.substr(kBearer.size()))) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

}  // namespace ropeserve::api
