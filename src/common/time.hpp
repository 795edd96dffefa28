#pragma once
// Time helpers shared by every binary: durations as written in config files, and the RFC 3339
// timestamps stored in job records.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace relay {

using Millis = std::chrono::milliseconds;

// Parses "250ms", "60s", "5m", "1h" or a bare number of seconds ("1.5" = 1500 ms).
// Returns nullopt for anything else (negative values included).
std::optional<Millis> parse_duration(std::string_view text);

// 1500 ms -> "1500ms", 60000 -> "1m": the inverse of parse_duration, for docs and logs. Inline:
// it serves code that does not link relay_core too (http/resolver.cpp).
inline std::string format_duration(Millis d) {
  auto ms = d.count();
  if (ms % 3'600'000 == 0 && ms != 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms != 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// RFC 3339, UTC, millisecond precision: "2026-11-30T12:34:56.789Z".
std::string format_rfc3339(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text);

// The clock is injected where loops need it testable; this is the production one.
inline std::chrono::system_clock::time_point wall_now() {
  return std::chrono::system_clock::now();
}

}  // namespace relay
