#pragma once
// Streaming multipart/form-data reader (RFC 7578): pulls the body from a ByteSource and hands
// out one part at a time; a part's content is itself read as a stream, so a file part of any
// size passes through in a bounded buffer. Malformed input is a MultipartError (-> 400), never a
// crash or an unbounded buffer.

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "storage/byte_stream.hpp"

namespace relay::gateway {

class MultipartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The boundary from a Content-Type header; nullopt if it is not multipart/form-data with a
// valid boundary (1-70 characters, RFC 2046).
std::optional<std::string> multipart_boundary(const std::string& content_type);

struct PartInfo {
  std::string name;      // form field name
  std::string filename;  // empty when not a file
  bool has_filename = false;
  std::string content_type;  // empty when absent
};

class MultipartReader {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxParts = 64;

  MultipartReader(ByteSource& body, std::string boundary);

  // Moves to the next part (skipping what is left of the current one); false after the closing
  // delimiter. Throws MultipartError for malformed input.
  bool next(PartInfo& info);
  // Reads the current part's content; 0 at its end.
  size_t read(std::span<char> out);
  // Everything of the current part, up to max bytes (MultipartError beyond).
  std::string read_all(size_t max);

 private:
  bool fill(size_t want);  // reads more input until buf_ holds want bytes; false at EOF
  void parse_headers(const std::string& headers, PartInfo& info);

  ByteSource& body_;
  std::string delim_;  // "\r\n--" + boundary
  std::string buf_;
  size_t pos_ = 0;
  enum class State { start, in_part, between, done } state_ = State::start;
  size_t parts_ = 0;
};

// A ByteSource over the current part of a reader (for storage uploads).
class PartSource final : public ByteSource {
 public:
  explicit PartSource(MultipartReader& r) : r_(r) {}
  size_t read(std::span<char> buf) override { return r_.read(buf); }

 private:
  MultipartReader& r_;
};

}  // namespace relay::gateway
