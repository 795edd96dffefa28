// libFuzzer target for the gateway's streaming multipart parser: any body must parse or throw
// MultipartError, in bounded memory, under any chunking (the first byte picks the chunk size).

#include <cstdint>
#include <string>

#include "multipart/parser.hpp"

using namespace relay;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  struct Sink final : multipart::Handler {
    size_t bytes = 0;
    void on_part(const multipart::PartInfo&) override {}
    void on_data(std::string_view d) override { bytes += d.size(); }
  } sink;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t chunk = 1 + data[0] % 16;
  multipart::Parser parser("b", sink);
  try {
    for (size_t pos = 0; pos < body.size(); pos += chunk) parser.feed(body.substr(pos, chunk));
    parser.finish();
  } catch (const multipart::Error&) {
  }
  return 0;
}
