// libFuzzer target for the gateway's streaming multipart reader: any body must parse or throw
// MultipartError, in bounded memory, under any chunking (the first byte picks the chunk size).

#include <cstdint>
#include <string>

#include "gateway/multipart.hpp"

using namespace relay;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  MemorySource src(std::string(reinterpret_cast<const char*>(data) + 1, size - 1),
                   1 + data[0] % 16);
  gateway::MultipartReader r(src, "b");
  gateway::PartInfo info;
  try {
    while (r.next(info)) r.read_all(1 << 16);
  } catch (const gateway::MultipartError&) {
  }
  return 0;
}
