#include "multipart/parser.hpp"

#include <algorithm>
#include <cctype>

namespace relay::multipart {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// key=value or key="quoted \"value\"" from a header's parameters; nullopt when absent.
std::optional<std::string> header_param(const std::string& header, const std::string& key) {
  size_t i = 0;
  while ((i = header.find(';', i)) != std::string::npos) {
    ++i;
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
    size_t eq = header.find('=', i);
    if (eq == std::string::npos) return std::nullopt;
    std::string k = lower(trim(header.substr(i, eq - i)));
    size_t v = eq + 1;
    std::string value;
    if (v < header.size() && header[v] == '"') {
      ++v;
      while (v < header.size() && header[v] != '"') {
        if (header[v] == '\\' && v + 1 < header.size()) ++v;
        value += header[v++];
      }
      if (v >= header.size()) throw Error("unterminated quoted string in '" + header + "'");
      ++v;
    } else {
      size_t end = header.find(';', v);
      value = trim(header.substr(v, end == std::string::npos ? std::string::npos : end - v));
    }
    if (k == key) return value;
    i = v;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> boundary_of(const std::string& content_type) {
  auto semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data") return std::nullopt;
  std::optional<std::string> b;
  try {
    b = header_param(content_type, "boundary");
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!b || b->empty() || b->size() > 70) return std::nullopt;
  for (char c : *b)
    if (!(std::isalnum(static_cast<unsigned char>(c)) ||
          std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos))
      return std::nullopt;
  if (b->back() == ' ') return std::nullopt;
  return b;
}

Parser::Parser(std::string boundary, Handler& handler)
    : handler_(handler), delim_("\r\n--" + std::move(boundary)) {
  // The first delimiter may come without the CRLF before it: pretend it was there.
  buf_ = "\r\n";
}

void Parser::feed(std::string_view in) {
  // Bytes held over from the last piece are parsed with just enough of this one to resolve
  // them; then the parser works on the piece in place (the fast path for content).
  const size_t step = delim_.size() + 4096;
  while (!in.empty() && state_ != State::done) {
    if (buf_.empty()) {
      in.remove_prefix(consume(in));
      if (in.empty() || state_ == State::done) break;
      buf_.assign(in);  // consume() keeps this bounded (it throws beyond its limits)
      break;
    }
    const size_t take = std::min(in.size(), step);
    buf_.append(in.substr(0, take));
    const size_t used = consume(buf_);
    const size_t left = buf_.size() - used;
    if (left <= take) {
      // What is left came from this piece: parse it from there.
      buf_.clear();
      in.remove_prefix(take - left);
    } else {
      buf_.erase(0, used);
      in.remove_prefix(take);
    }
  }
}

size_t Parser::consume(std::string_view a) {
  size_t p = 0;
  for (;;) {
    switch (state_) {
      case State::preamble: {
        auto at = a.find(delim_, p);
        if (at == std::string_view::npos) {
          // Keep what could be the start of a delimiter.
          const size_t keep = std::min(a.size() - p, delim_.size() - 1);
          preamble_ += a.size() - p - keep;
          if (preamble_ > kMaxHeaderBytes)
            throw Error("no multipart boundary near the start of the body");
          return a.size() - keep;
        }
        preamble_ += at - p;
        if (preamble_ > kMaxHeaderBytes)
          throw Error("no multipart boundary near the start of the body");
        p = at + delim_.size();
        state_ = State::after_delimiter;
        break;
      }
      case State::after_delimiter:
        // "--" closes the body; otherwise transport padding, then CRLF and the part's headers.
        if (a.size() - p < 2) return p;
        if (a.substr(p, 2) == "--") {
          state_ = State::done;
          return a.size();  // the epilogue, if any, is ignored
        }
        state_ = State::padding;
        break;
      case State::padding:
        while (p < a.size() && (a[p] == ' ' || a[p] == '\t')) ++p;
        if (a.size() - p < 2) return p;
        if (a.substr(p, 2) != "\r\n") throw Error("malformed boundary line");
        p += 2;
        state_ = State::headers;
        break;
      case State::headers: {
        if (a.size() - p < 2) return p;
        std::string_view headers;
        if (a.substr(p, 2) == "\r\n") {
          p += 2;  // no headers at all (refused below: a form part needs Content-Disposition)
        } else {
          auto end = a.find("\r\n\r\n", p);
          if (end == std::string_view::npos) {
            if (a.size() - p > kMaxHeaderBytes) throw Error("part headers too long");
            return p;
          }
          headers = a.substr(p, end - p);
          p = end + 4;
        }
        if (++parts_ > kMaxParts) throw Error("too many parts");
        PartInfo info;
        parse_headers(headers, info);
        state_ = State::content;
        handler_.on_part(info);
        break;
      }
      case State::content: {
        auto at = a.find(delim_, p);
        if (at == std::string_view::npos) {
          // Everything but a possible delimiter prefix at the end is content.
          const size_t end = a.size() - p >= delim_.size() ? a.size() - (delim_.size() - 1) : p;
          if (end > p) handler_.on_data(a.substr(p, end - p));
          return end;
        }
        if (at > p) handler_.on_data(a.substr(p, at - p));
        p = at + delim_.size();
        state_ = State::after_delimiter;
        break;
      }
      case State::done:
        return a.size();
    }
  }
}

void Parser::finish() const {
  switch (state_) {
    case State::done:
      return;
    case State::preamble:
      throw Error("no multipart boundary in the body");
    case State::after_delimiter:
    case State::padding:
      throw Error("body ends inside a boundary line");
    case State::headers:
      throw Error("body ends inside part headers");
    case State::content:
      throw Error("body ends inside a part (no closing boundary)");
  }
}

void Parser::parse_headers(std::string_view headers, PartInfo& info) const {
  bool has_disposition = false;
  size_t start = 0;
  while (start < headers.size()) {
    size_t eol = headers.find("\r\n", start);
    std::string line(headers.substr(
        start, eol == std::string_view::npos ? std::string_view::npos : eol - start));
    start = eol == std::string_view::npos ? headers.size() : eol + 2;
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0)
      throw Error("malformed part header '" + line.substr(0, 80) + "'");
    std::string name = lower(trim(line.substr(0, colon)));
    std::string value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      auto semi = value.find(';');
      if (lower(trim(value.substr(0, semi))) != "form-data") throw Error("part is not form-data");
      auto n = header_param(value, "name");
      if (!n) throw Error("part without a name");
      info.name = *n;
      if (auto f = header_param(value, "filename")) {
        info.filename = *f;
        info.has_filename = true;
      }
      has_disposition = true;
    } else if (name == "content-type") {
      info.content_type = value;
    }
  }
  if (!has_disposition) throw Error("part without Content-Disposition");
}

}  // namespace relay::multipart
