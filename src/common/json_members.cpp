#include "common/json_members.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cctype>
#include <stdexcept>

namespace relay {
namespace {

void skip_space(std::string_view s, size_t& i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
}

// s[i] is '"': returns the index just past the closing quote.
size_t string_end(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\')
      ++i;
    else if (s[i] == '"')
      return i + 1;
  }
  throw std::invalid_argument("unterminated JSON string");
}

// The end of the value starting at s[i].
size_t value_end(std::string_view s, size_t i) {
  if (s[i] == '"') return string_end(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < s.size()) {
      char c = s[i];
      if (c == '"') {
        i = string_end(s, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      ++i;
      if (depth == 0) return i;
    }
    throw std::invalid_argument("unbalanced JSON");
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' &&
         !std::isspace(static_cast<unsigned char>(s[i])))
    ++i;
  return i;
}

std::string decode_string(std::string_view token) {
  return std::string(boost::json::parse(token).as_string());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> json_members_as_written(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  skip_space(s, i);
  if (i >= s.size() || s[i] != '{') throw std::invalid_argument("not a JSON object");
  ++i;
  for (;;) {
    skip_space(s, i);
    if (i < s.size() && s[i] == '}') return out;
    if (i >= s.size() || s[i] != '"') throw std::invalid_argument("expected a member name");
    size_t key_end = string_end(s, i);
    std::string key = decode_string(s.substr(i, key_end - i));
    i = key_end;
    skip_space(s, i);
    if (i >= s.size() || s[i] != ':') throw std::invalid_argument("expected ':'");
    ++i;
    skip_space(s, i);
    if (i >= s.size()) throw std::invalid_argument("expected a value");
    size_t end = value_end(s, i);
    std::string_view raw = s.substr(i, end - i);
    out.emplace_back(std::move(key), raw.front() == '"' ? decode_string(raw) : std::string(raw));
    i = end;
    skip_space(s, i);
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') return out;
    throw std::invalid_argument("expected ',' or '}'");
  }
}

}  // namespace relay
