#include "gateway/multipart.hpp"

#include <algorithm>
#include <cctype>

namespace relay::gateway {
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
      if (v >= header.size())
        throw MultipartError("unterminated quoted string in '" + header + "'");
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

std::optional<std::string> multipart_boundary(const std::string& content_type) {
  auto semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data") return std::nullopt;
  std::optional<std::string> b;
  try {
    b = header_param(content_type, "boundary");
  } catch (const MultipartError&) {
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

MultipartReader::MultipartReader(ByteSource& body, std::string boundary)
    : body_(body), delim_("\r\n--" + std::move(boundary)) {
  // The first delimiter may come without the CRLF before it: pretend it was there.
  buf_ = "\r\n";
}

bool MultipartReader::fill(size_t want) {
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  char chunk[64 * 1024];
  while (buf_.size() - pos_ < want) {
    size_t n = body_.read(std::span<char>(chunk, sizeof chunk));
    if (n == 0) return false;
    buf_.append(chunk, n);
  }
  return true;
}

bool MultipartReader::next(PartInfo& info) {
  if (state_ == State::done) return false;
  if (state_ == State::in_part) {
    char sink[16 * 1024];
    while (read(std::span<char>(sink, sizeof sink)) > 0) {
    }
  }
  if (state_ == State::start) {
    // Skip a preamble up to the first delimiter.
    size_t skipped = 0;
    for (;;) {
      auto at = buf_.find(delim_, pos_);
      if (at != std::string::npos) {
        pos_ = at + delim_.size();
        break;
      }
      if (buf_.size() - pos_ > delim_.size()) {
        skipped += buf_.size() - delim_.size() - pos_;
        pos_ = buf_.size() - delim_.size();
      }
      if (skipped > kMaxHeaderBytes)
        throw MultipartError("no multipart boundary near the start of the body");
      if (!fill(buf_.size() - pos_ + 1)) throw MultipartError("no multipart boundary in the body");
    }
    state_ = State::between;
  }
  // After a delimiter: "--" ends the body; otherwise optional whitespace, CRLF, headers.
  if (!fill(2)) throw MultipartError("body ends right after a boundary");
  if (buf_.compare(pos_, 2, "--") == 0) {
    state_ = State::done;
    return false;  // the epilogue, if any, is ignored
  }
  while (buf_.size() - pos_ >= 1 && (buf_[pos_] == ' ' || buf_[pos_] == '\t')) {
    ++pos_;
    if (!fill(2)) throw MultipartError("body ends inside a boundary line");
  }
  if (buf_.compare(pos_, 2, "\r\n") != 0) throw MultipartError("malformed boundary line");
  pos_ += 2;
  std::string headers;
  if (!fill(2)) throw MultipartError("body ends inside part headers");
  if (buf_.compare(pos_, 2, "\r\n") == 0) {
    pos_ += 2;  // no headers at all (rejected below: a form part needs Content-Disposition)
  } else {
    for (;;) {
      auto end = buf_.find("\r\n\r\n", pos_);
      if (end != std::string::npos) {
        headers = buf_.substr(pos_, end - pos_);
        pos_ = end + 4;
        break;
      }
      if (buf_.size() - pos_ > kMaxHeaderBytes) throw MultipartError("part headers too long");
      if (!fill(buf_.size() - pos_ + 1)) throw MultipartError("body ends inside part headers");
    }
  }
  if (++parts_ > kMaxParts) throw MultipartError("too many parts");
  info = PartInfo{};
  parse_headers(headers, info);
  state_ = State::in_part;
  return true;
}

void MultipartReader::parse_headers(const std::string& headers, PartInfo& info) {
  bool has_disposition = false;
  size_t start = 0;
  while (start < headers.size()) {
    size_t eol = headers.find("\r\n", start);
    std::string line =
        headers.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
    start = eol == std::string::npos ? headers.size() : eol + 2;
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0)
      throw MultipartError("malformed part header '" + line.substr(0, 80) + "'");
    std::string name = lower(trim(line.substr(0, colon)));
    std::string value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      auto semi = value.find(';');
      if (lower(trim(value.substr(0, semi))) != "form-data")
        throw MultipartError("part is not form-data");
      auto n = header_param(value, "name");
      if (!n) throw MultipartError("part without a name");
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
  if (!has_disposition) throw MultipartError("part without Content-Disposition");
}

size_t MultipartReader::read(std::span<char> out) {
  if (state_ != State::in_part || out.empty()) return 0;
  for (;;) {
    auto at = buf_.find(delim_, pos_);
    if (at != std::string::npos) {
      size_t n = std::min(out.size(), at - pos_);
      std::copy_n(buf_.data() + pos_, n, out.data());
      pos_ += n;
      if (pos_ == at) {
        if (n > 0) return n;  // deliver first; the delimiter is consumed on the next call
        pos_ += delim_.size();
        state_ = State::between;
        return 0;
      }
      return n;
    }
    // Everything but a possible delimiter prefix at the end is content.
    size_t safe = buf_.size() - pos_ > delim_.size() ? buf_.size() - pos_ - delim_.size() : 0;
    if (safe > 0) {
      size_t n = std::min(out.size(), safe);
      std::copy_n(buf_.data() + pos_, n, out.data());
      pos_ += n;
      return n;
    }
    if (!fill(buf_.size() - pos_ + 1))
      throw MultipartError("body ends inside a part (no closing boundary)");
  }
}

std::string MultipartReader::read_all(size_t max) {
  std::string out;
  char chunk[4096];
  while (size_t n = read(std::span<char>(chunk, sizeof chunk))) {
    out.append(chunk, n);
    if (out.size() > max) throw MultipartError("form field too large");
  }
  return out;
}

}  // namespace relay::gateway
