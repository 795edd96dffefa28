#pragma once
// Which request Transfer-Encoding the gateway takes: "chunked" alone (RFC 9112 §6). Pure: the
// server asks before it reads a body.
//
// A coding list whose last coding is not chunked gives the body no length the server can know.
// Beast then parses the request as bodiless, and the body's bytes as the next request on the
// connection: a proxy in front that framed the body differently would have a request smuggled
// past it. RFC 9112 §6.3 says 400 and close. Codings before chunked (gzip, …) would be stored
// encoded as the job's input: 501, as nginx answers any Transfer-Encoding but chunked.

#include <optional>
#include <string>
#include <string_view>

#include "common/text.hpp"

namespace relay::gateway {

struct TransferCodingRefusal {
  unsigned status;  // 400 or 501
  std::string message;
};

// `value`: the request's Transfer-Encoding field (Beast refuses a repeated one), empty when
// absent. nullopt: acceptable (absent, or chunked alone, in any case, with optional spaces).
inline std::optional<TransferCodingRefusal> refuse_transfer_coding(std::string_view value) {
  auto is_chunked = [](std::string_view s) {
    constexpr std::string_view kChunked = "chunked";
    if (s.size() != kChunked.size()) return false;
    for (size_t i = 0; i < s.size(); ++i)
      if ((s[i] | 0x20) != kChunked[i]) return false;
    return true;
  };
  value = trim_ows(value);
  if (value.empty()) return std::nullopt;
  const auto comma = value.rfind(',');
  const std::string_view last =
      trim_ows(comma == std::string_view::npos ? value : value.substr(comma + 1));
  if (!is_chunked(last))
    return TransferCodingRefusal{400, "the body's length cannot be known: Transfer-Encoding \"" +
                                          std::string(value.substr(0, 100)) +
                                          "\" does not end in chunked"};
  if (comma != std::string_view::npos)
    return TransferCodingRefusal{501, "transfer codings other than chunked are not supported (\"" +
                                          std::string(value.substr(0, 100)) +
                                          "\"): send the body chunked, or with a Content-Length"};
  return std::nullopt;
}

}  // namespace relay::gateway
