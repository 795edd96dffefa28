#include "common/time.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace relay {

std::optional<Millis> parse_duration(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    double ms;
  };
  // Longest suffixes first so that "ms" is not read as "m".
  static constexpr Unit kUnits[] = {
      {"ms", 1.0}, {"s", 1000.0}, {"m", 60'000.0}, {"h", 3'600'000.0}};
  double scale = 1000.0;  // a bare number is seconds
  for (const auto& u : kUnits) {
    if (text.size() > u.suffix.size() && text.ends_with(u.suffix)) {
      text.remove_suffix(u.suffix.size());
      scale = u.ms;
      break;
    }
  }
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  double ms = value * scale;
  if (ms > 1e15) return std::nullopt;
  return Millis(static_cast<long long>(std::llround(ms)));
}

std::string format_duration(Millis d) {
  auto ms = d.count();
  if (ms % 3'600'000 == 0 && ms != 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms != 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_rfc3339(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  if (ms < 0 && ms % 1000 != 0) --secs;
  int frac = static_cast<int>(((ms % 1000) + 1000) % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text) {
  // Accepts exactly what format_rfc3339 writes (with or without milliseconds).
  std::tm tm{};
  int ms = 0;
  std::string s(text);
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  std::string_view rest = std::string_view(s).substr(consumed);
  if (rest.starts_with('.')) {
    if (rest.size() < 5 || std::sscanf(s.c_str() + consumed, ".%3d", &ms) != 1) return std::nullopt;
    rest.remove_prefix(4);
  }
  if (rest != "Z") return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::time_t secs = timegm(&tm);
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

}  // namespace relay
