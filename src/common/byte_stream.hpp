#pragma once
// Byte streams. Pull (ByteSource): every stage of the relay's pipeline (storage download,
// decryption, the inference upload) pulls from the one before it. Push (ByteSink): the gateway
// hands an upload's bytes on as they arrive. Either way memory stays bounded by the buffers in
// between, whatever the object size.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace relay {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to buf.size() bytes; returns 0 only at the end of the stream. Throws on failure.
  virtual size_t read(std::span<char> buf) = 0;
  // Total size when known up front.
  virtual std::optional<std::uint64_t> size() const { return std::nullopt; }
};

// Push-based counterpart of ByteSource: the gateway receives an upload as the client sends it,
// so each stage after the socket (multipart, encryption, storage) is handed bytes instead of
// pulling them. A stage that cannot take them throws.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(std::span<const char> data) = 0;
};

// A transfer buffer sized for the stream: small objects (the common case) don't fault in and
// zero 256 KiB per job; large ones get 256 KiB. Not zero-initialised.
inline std::unique_ptr<char[]> transfer_buffer(std::optional<std::uint64_t> size,
                                               size_t& capacity) {
  constexpr size_t kMax = 256 * 1024, kMin = 4096;
  capacity = size ? static_cast<size_t>(std::clamp<std::uint64_t>(*size + 1, kMin, kMax)) : kMax;
  return std::unique_ptr<char[]>(new char[capacity]);
}

// A string as a stream; max_chunk limits each read (tests use it to feed parsers byte by byte).
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string data, size_t max_chunk = SIZE_MAX)
      : data_(std::move(data)), max_chunk_(max_chunk) {}
  size_t read(std::span<char> buf) override {
    size_t n = std::min({buf.size(), max_chunk_, data_.size() - pos_});
    std::copy_n(data_.data() + pos_, n, buf.data());
    pos_ += n;
    return n;
  }
  std::optional<std::uint64_t> size() const override { return data_.size(); }

 private:
  std::string data_;
  size_t max_chunk_;
  size_t pos_ = 0;
};

// Bytes [skip, skip + length) of what another stream yields (a byte range of it): the first
// `skip` are read and dropped. A stream that ends before the range does is an error, not a short
// answer (a download would otherwise end early and look whole).
class SliceSource final : public ByteSource {
 public:
  SliceSource(ByteSource& inner, std::uint64_t skip, std::uint64_t length)
      : inner_(inner), skip_(skip), left_(length), length_(length) {}
  size_t read(std::span<char> buf) override {
    if (left_ == 0 || buf.empty()) return 0;
    while (skip_ > 0) {
      const size_t n =
          inner_.read(buf.first(static_cast<size_t>(std::min<std::uint64_t>(buf.size(), skip_))));
      if (n == 0) throw std::runtime_error("the stream ended before the range began");
      skip_ -= n;
    }
    const size_t n =
        inner_.read(buf.first(static_cast<size_t>(std::min<std::uint64_t>(buf.size(), left_))));
    if (n == 0) throw std::runtime_error("the stream ended inside the range");
    left_ -= n;
    return n;
  }
  std::optional<std::uint64_t> size() const override { return length_; }

 private:
  ByteSource& inner_;
  std::uint64_t skip_, left_, length_;
};

// Owns a chain of sources, each reading the one before it (storage object -> decryptor -> ...),
// for a response that outlives the function that built it; reads from the last.
class OwningChain final : public ByteSource {
 public:
  template <class... Parts>
  explicit OwningChain(std::unique_ptr<Parts>... parts) {
    (parts_.push_back(std::move(parts)), ...);
  }
  ~OwningChain() override {
    while (!parts_.empty()) parts_.pop_back();  // the last first: each reads the one before
  }
  size_t read(std::span<char> out) override { return parts_.back()->read(out); }
  std::optional<std::uint64_t> size() const override { return parts_.back()->size(); }

 private:
  std::vector<std::unique_ptr<ByteSource>> parts_;
};

}  // namespace relay
