// API keys for REST (`Authorization: Bearer KEY`) and gRPC (the same as
// `authorization` metadata). Keys are compared as SHA-256 digests with
// OpenSSL's constant-time CRYPTO_memcmp, so neither a key's content nor
// its length leaks through timing; keys are never logged.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace ropeserve::api {

class ApiKeys {
 public:
  ApiKeys() = default;
  // `keys` from flags; `file` (may be empty) holds one key per line (blank
  // lines and lines starting with '#' ignored).
  static StatusOr<ApiKeys> Load(const std::vector<std::string>& keys, const std::string& file);

  bool enabled() const { return !digests_.empty(); }
  // OK when keys are off or `authorization` is "Bearer <a valid key>".
  Status Check(std::string_view authorization) const;
  // Who owns what a request stores (the Responses API's stored responses):
  // the hex SHA-256 digest of the presented key; "" when keys are off.
  std::string Owner(std::string_view authorization) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest Hash(std::string_view s);
  std::vector<Digest> digests_;
};

}  // namespace ropeserve::api
