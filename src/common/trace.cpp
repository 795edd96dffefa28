#include "common/trace.hpp"

#include "common/random.hpp"

namespace relay {
namespace {

bool lower_hex(std::string_view s, std::size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool all_zero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

}  // namespace

std::optional<TraceParent> parse_traceparent(std::string_view h) {
  while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
  // version(2) - trace-id(32) - parent-id(16) - flags(2): 55 characters; a later version may
  // append fields after another '-'.
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  const auto version = h.substr(0, 2);
  if (!lower_hex(version, 2) || version == "ff") return std::nullopt;
  if (version == "00" && h.size() != 55) return std::nullopt;
  if (h.size() > 55 && h[55] != '-') return std::nullopt;
  TraceParent t{std::string(h.substr(3, 32)), std::string(h.substr(36, 16)),
                std::string(h.substr(53, 2))};
  if (!lower_hex(t.trace_id, 32) || !lower_hex(t.parent_id, 16) || !lower_hex(t.flags, 2))
    return std::nullopt;
  if (all_zero(t.trace_id) || all_zero(t.parent_id)) return std::nullopt;
  return t;
}

TraceParent new_trace() {
  return {random_hex(16), random_hex(8), "00"};
}

TraceParent child_of(const TraceParent& parent) {
  return {parent.trace_id, random_hex(8), parent.flags};
}

std::string clean_tracestate(std::string_view h) {
  if (h.size() > 512) return {};
  for (char c : h)
    if (c < 0x20 || c > 0x7e) return {};
  return std::string(h);
}

}  // namespace relay
