#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace relay {

// Lowercase hex of bytes.
inline std::string to_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}
inline std::string to_hex(const unsigned char* data, size_t n) {
  return to_hex(std::string_view(reinterpret_cast<const char*>(data), n));
}

}  // namespace relay
