// libFuzzer target for the gateway's streaming multipart reader: any body must parse or throw
// MultipartError, in bounded memory, under any chunking (the first byte picks the chunk size).

#include <cstdint>
#include <string>

#include "gateway/multipart.hpp"

using namespace relay;

namespace {
class Chunked final : public ByteSource {
 public:
  Chunked(std::string d, size_t c) : d_(std::move(d)), c_(c) {}
  size_t read(std::span<char> buf) override {
    size_t n = std::min({buf.size(), c_, d_.size() - pos_});
    std::copy_n(d_.data() + pos_, n, buf.data());
    pos_ += n;
    return n;
  }

 private:
  std::string d_;
  size_t c_, pos_ = 0;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Chunked src(std::string(reinterpret_cast<const char*>(data) + 1, size - 1), 1 + data[0] % 16);
  gateway::MultipartReader r(src, "b");
  gateway::PartInfo info;
  try {
    while (r.next(info)) r.read_all(1 << 16);
  } catch (const gateway::MultipartError&) {
  }
  return 0;
}
