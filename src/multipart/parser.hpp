#pragma once
// Streaming multipart/form-data parser (RFC 7578): the body is pushed in as it arrives and each
// part's headers and content come out through a handler, so a file part of any size passes
// through in a bounded buffer. Malformed input is a Error (-> 400), never a crash or an
// unbounded buffer.

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace relay::multipart {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The boundary from a Content-Type header; nullopt if it is not multipart/form-data with a
// valid boundary (1-70 characters, RFC 2046).
std::optional<std::string> boundary_of(const std::string& content_type);

struct PartInfo {
  std::string name;      // form field name
  std::string filename;  // empty when not a file
  bool has_filename = false;
  std::string content_type;  // empty when absent
};

// Receives what the parser finds, in body order.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void on_part(const PartInfo& info) = 0;      // a part's headers were read
  virtual void on_data(std::string_view content) = 0;  // the current part's content, in pieces
};

// Push parser: the body is fed in pieces of any size as it arrives (the gateway reads uploads
// asynchronously); content passes to the handler without being copied, except for fewer than a
// delimiter's length of bytes held back at a piece's end (they may start a delimiter). Memory
// is bounded: at most kMaxHeaderBytes of part headers or preamble are buffered.
class Parser {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxParts = 64;

  Parser(std::string boundary, Handler& handler);
  // Throws Error for malformed input (and whatever the handler throws).
  void feed(std::string_view data);
  // The body ended: throws Error unless the closing delimiter was seen.
  void finish() const;
  bool done() const { return state_ == State::done; }

 private:
  size_t consume(std::string_view avail);  // parses what it can; returns the bytes used
  void parse_headers(std::string_view headers, PartInfo& info) const;

  Handler& handler_;
  std::string delim_;  // "\r\n--" + boundary
  std::string buf_;    // bytes held over between feeds
  enum class State { preamble, after_delimiter, padding, headers, content, done };
  State state_ = State::preamble;
  size_t preamble_ = 0;  // bytes skipped before the first delimiter
  size_t parts_ = 0;
};

}  // namespace relay::multipart
