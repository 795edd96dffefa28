#pragma once
// Text that ends up in JSON must be valid UTF-8: client-chosen names (a filename with raw bytes,
// a value cut at a byte limit) are made so here.

#include <string>
#include <string_view>

namespace relay {

// s with each invalid UTF-8 sequence replaced by U+FFFD, cut to at most max_bytes on a
// character boundary.
std::string utf8_clean(std::string_view s, std::size_t max_bytes);

}  // namespace relay
