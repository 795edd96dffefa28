#include "multipart/writer.hpp"

#include "common/random.hpp"

namespace relay::multipart {
namespace {

std::string escape_quoted(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"')
      out += "%22";
    else if (c == '\\')
      out += "\\\\";  // a trailing backslash would otherwise escape the closing quote
    else if (c == '\r')
      out += "%0D";
    else if (c == '\n')
      out += "%0A";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string new_boundary() {
  return "relay-" + random_hex(16);
}

std::string file_head(const std::string& boundary, const std::string& filename,
                      const std::string& content_type) {
  return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" +
         escape_quoted(filename.empty() ? "input" : filename) + "\"\r\nContent-Type: " +
         escape_quoted(content_type.empty() ? "application/octet-stream" : content_type) +
         "\r\n\r\n";
}

std::string field(const std::string& boundary, const std::string& name, const std::string& value) {
  return "\r\n--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + escape_quoted(name) +
         "\"\r\n\r\n" + value;
}

std::string tail(const std::string& boundary) {
  return "\r\n--" + boundary + "--\r\n";
}

}  // namespace relay::multipart
