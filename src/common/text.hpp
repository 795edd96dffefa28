#pragma once
// Small text steps that HTTP fields and configuration lists share: optional white space (RFC
// 9110 §5.6.3: spaces and tabs) trimmed, ASCII lowercased, a comma-separated list split.

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace relay {

inline std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The items of "a, b,,c": each trimmed, the empty ones dropped.
inline std::vector<std::string_view> comma_items(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (auto item = trim_ows(text.substr(start, comma - start)); !item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

}  // namespace relay
