#pragma once
// Byte ranges of a result download (RFC 9110 §14) and the conditions that go with them (§13):
// `Range: bytes=…` read and resolved against the result's size, `If-Range` and `If-None-Match`
// against its entity tag. Pure: the API asks before it opens storage.
//
// One range is served (206). A request for several is served whole (200): a server may ignore
// Range (§14.2), and multipart/byteranges buys a resuming download nothing. A Range that is not
// `bytes` syntax, or an invalid one (last before first), is ignored likewise; a valid range that
// starts past the end is 416 with the size, so the client knows where the end is.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace relay::gateway {

// `first-last`, `first-` (last absent) or `-suffix` (first absent, last = the suffix's length).
struct ByteRangeSpec {
  std::optional<std::uint64_t> first, last;
};

struct ByteSpan {
  std::uint64_t first = 0, length = 0;
};

namespace byte_range_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// 1*DIGIT, whole, no overflow.
inline std::optional<std::uint64_t> digits(std::string_view s) {
  std::uint64_t n = 0;
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return n;
}

// Calls f(element) for each non-empty element of a comma-separated list (RFC 9110 §5.6.1:
// empty elements are allowed and ignored).
template <class F>
void for_each_element(std::string_view list, F f) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto element = trim(list.substr(0, comma));
    if (!element.empty()) f(element);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace byte_range_detail

// The one range a Range field asks for; nullopt when it is to be ignored (absent, another unit,
// bad syntax, an invalid range, or several ranges).
inline std::optional<ByteRangeSpec> parse_range(std::string_view value) {
  using namespace byte_range_detail;
  value = trim(value);
  constexpr std::string_view kUnit = "bytes";
  if (value.size() <= kUnit.size() || value[kUnit.size()] != '=') return std::nullopt;
  for (size_t i = 0; i < kUnit.size(); ++i)
    if ((value[i] | 0x20) != kUnit[i]) return std::nullopt;
  std::optional<ByteRangeSpec> one;
  int count = 0;
  bool bad = false;
  for_each_element(value.substr(kUnit.size() + 1), [&](std::string_view spec) {
    ++count;
    const auto dash = spec.find('-');
    if (dash == std::string_view::npos) {
      bad = true;
      return;
    }
    ByteRangeSpec r;
    const auto a = spec.substr(0, dash), b = spec.substr(dash + 1);
    if (!a.empty() && !(r.first = digits(a))) bad = true;
    if (!b.empty() && !(r.last = digits(b))) bad = true;
    if ((a.empty() && b.empty()) || (r.first && r.last && *r.last < *r.first)) bad = true;
    one = r;
  });
  if (bad || count != 1) return std::nullopt;
  return one;
}

// The bytes a range names in a representation of `size` bytes (size > 0); nullopt when it names
// none (416: a first byte at or past the end, or an empty suffix).
inline std::optional<ByteSpan> resolve_range(const ByteRangeSpec& r, std::uint64_t size) {
  if (!r.first) {  // the last *r.last bytes
    if (*r.last == 0) return std::nullopt;
    const std::uint64_t n = std::min(*r.last, size);
    return ByteSpan{size - n, n};
  }
  if (*r.first >= size) return std::nullopt;
  const std::uint64_t last = r.last ? std::min(*r.last, size - 1) : size - 1;
  return ByteSpan{*r.first, last - *r.first + 1};
}

// If-Range (§13.1.5): the range applies only if the field is the current entity tag, compared
// strongly. A date, a weak tag or another tag: the client's copy is another version (or we
// cannot tell), so it gets the whole of this one. Absent: the range applies.
inline bool if_range_holds(std::string_view if_range, std::string_view etag) {
  if_range = byte_range_detail::trim(if_range);
  return if_range.empty() || if_range == etag;
}

// If-None-Match (§13.1.2): true when it names the current entity tag (compared weakly) or is
// "*": the client has this version already (304 for a GET or HEAD).
inline bool none_match(std::string_view if_none_match, std::string_view etag) {
  bool found = false;
  byte_range_detail::for_each_element(if_none_match, [&](std::string_view tag) {
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) found = true;
  });
  return found;
}

}  // namespace relay::gateway
