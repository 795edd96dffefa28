#pragma once
// Writing multipart/form-data (RFC 7578) as the relay sends it to the inference server: the
// file part's head, then its bytes streamed by the caller, then form fields and the closing
// delimiter. Quotes, CR and LF in names are escaped as browsers do (%22, %0D, %0A), and a
// backslash as in a quoted-string (\\), so that Parser (parser.hpp) reads back what was written.

#include <string>

namespace relay::multipart {

// A fresh boundary: "relay-" and 32 random hex digits (never in a body by chance).
std::string new_boundary();
// "--B", the file part's headers and the blank line; the file's bytes follow.
std::string file_head(const std::string& boundary, const std::string& filename,
                      const std::string& content_type);
// A form field after the file (or another field).
std::string field(const std::string& boundary, const std::string& name, const std::string& value);
// The closing delimiter.
std::string tail(const std::string& boundary);

}  // namespace relay::multipart
