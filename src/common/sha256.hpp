#pragma once
#include <openssl/sha.h>

#include <string>
#include <string_view>

#include "common/hex.hpp"

namespace relay {

// Lowercase hex SHA-256 of s (API keys and Idempotency-Keys are stored as digests).
inline std::string sha256_hex(std::string_view s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return to_hex(d, sizeof d);
}

}  // namespace relay
