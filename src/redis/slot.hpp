#pragma once
// Redis Cluster's key -> slot function (cluster spec, "Keys distribution model"): CRC16-XMODEM
// of the key, or of the part inside the first non-empty "{...}" (the hash tag), modulo 16384.

#include <array>
#include <cstdint>
#include <string_view>

namespace relay::redis {

inline constexpr int kClusterSlots = 16384;

namespace detail {
constexpr std::array<std::uint16_t, 256> crc16_table() {
  std::array<std::uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b)
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[static_cast<size_t>(i)] = crc;
  }
  return t;
}
inline constexpr auto kCrc16Table = crc16_table();
}  // namespace detail

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0.
constexpr std::uint16_t crc16(std::string_view s) {
  std::uint16_t crc = 0;
  for (char c : s)
    crc = static_cast<std::uint16_t>(
        (crc << 8) ^ detail::kCrc16Table[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  return crc;
}

constexpr int key_slot(std::string_view key) {
  if (auto open = key.find('{'); open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) % kClusterSlots;
}

}  // namespace relay::redis
