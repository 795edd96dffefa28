#pragma once
// A TCP port as written in a URL or an address: decimal digits, whole, in range. Read here, not
// with Boost.URL's port_number(), which in 1.81 wraps a port past 65535 (99999 reads 34463).

#include <charconv>
#include <optional>
#include <string_view>

namespace relay {

// 1-65535; with allow_zero also 0 (a listener's "any free port").
inline std::optional<unsigned short> parse_port(std::string_view digits, bool allow_zero = false) {
  unsigned n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || n > 65535 ||
      (n == 0 && !allow_zero))
    return std::nullopt;
  return static_cast<unsigned short>(n);
}

}  // namespace relay
