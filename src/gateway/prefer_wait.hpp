#pragma once
// `Prefer: wait=N` on a submission (RFC 7240 §4.3): the client would rather have the answer
// held until its job ends, up to N seconds, than be answered at once and poll — what hosted
// inference offers as a synchronous mode (Replicate's `Prefer: wait`, RunPod's /runsync). A
// preference, not a demand: one the gateway cannot read is ignored, a wait longer than
// server.max_wait is cut to it, and bare `wait` (Replicate's form; RFC 7240 wants a value)
// means server.max_wait. Pure: the API asks before the body is read.
//
//   Prefer     = 1#preference
//   preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace relay::gateway {

namespace prefer_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  return true;
}

// The next comma-separated element of a list, commas inside a quoted string kept.
inline std::string_view next_element(std::string_view& list) {
  bool quoted = false;
  std::size_t i = 0;
  for (; i < list.size(); ++i) {
    if (list[i] == '\\' && quoted) {
      ++i;
    } else if (list[i] == '"') {
      quoted = !quoted;
    } else if (list[i] == ',' && !quoted) {
      break;
    }
  }
  std::string_view element = list.substr(0, i);
  list.remove_prefix(i < list.size() ? i + 1 : list.size());
  return element;
}

}  // namespace prefer_detail

// The wait a Prefer header asks for, within max; nullopt when it asks for none (no `wait`
// preference, or one whose value is not delta-seconds: ignored). The first `wait` counts.
inline std::optional<std::chrono::milliseconds> preferred_wait(std::string_view header,
                                                               std::chrono::milliseconds max) {
  using namespace prefer_detail;
  while (!header.empty()) {
    std::string_view pref = next_element(header);
    pref = trim(pref.substr(0, pref.find(';')));  // (its parameters mean nothing to wait)
    const auto eq = pref.find('=');
    if (!iequals(trim(pref.substr(0, eq)), "wait")) continue;
    if (eq == std::string_view::npos) return max;
    std::string_view value = trim(pref.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    std::uint64_t seconds = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (value.empty() || ec == std::errc::invalid_argument || end != value.data() + value.size())
      return std::nullopt;  // not delta-seconds
    if (ec == std::errc::result_out_of_range ||
        seconds >= static_cast<std::uint64_t>(
                       std::chrono::duration_cast<std::chrono::seconds>(max).count()) +
                       1)
      return max;
    return std::min<std::chrono::milliseconds>(std::chrono::seconds(seconds), max);
  }
  return std::nullopt;
}

}  // namespace relay::gateway
