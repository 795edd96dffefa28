#pragma once
// Reads the start of a stream before anyone asks: with a DecryptingSource underneath, a wrong
// key, a wrong binding or a damaged first segment fails here — before an HTTP request or response
// has begun — instead of in the middle of one.

#include <optional>

#include "common/byte_stream.hpp"

namespace relay::crypto {

class PrimedSource final : public ByteSource {
 public:
  // size: what the stream is known to hold (e.g. the plaintext size in the job record).
  PrimedSource(ByteSource& inner, std::optional<std::uint64_t> size, size_t prime = 64 * 1024)
      : inner_(inner), size_(size), head_(prime, '\0') {
    size_t got = 0;
    while (got < prime) {
      size_t n = inner_.read(std::span<char>(head_.data() + got, prime - got));
      if (n == 0) break;
      got += n;
    }
    head_.resize(got);
  }
  size_t read(std::span<char> out) override {
    if (pos_ < head_.size()) {
      size_t n = std::min(out.size(), head_.size() - pos_);
      std::copy_n(head_.data() + pos_, n, out.data());
      pos_ += n;
      return n;
    }
    return inner_.read(out);
  }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  ByteSource& inner_;
  std::optional<std::uint64_t> size_;
  std::string head_;
  size_t pos_ = 0;
};

}  // namespace relay::crypto
