#pragma once
// Collects a response body of unknown length: in memory while small, then in an unnamed
// temporary file, so that a large inference result does not grow the relay's memory.

#include <cstdio>
#include <memory>
#include <string>

#include "storage/byte_stream.hpp"

namespace relay::sidecar {

class Spool {
 public:
  static constexpr size_t kMemoryLimit = 1 << 20;

  void write(const char* data, size_t n);
  std::uint64_t size() const { return size_; }
  // The first `max` bytes, for error messages.
  std::string head(size_t max) const;
  // A source over everything written; the spool must outlive it.
  std::unique_ptr<ByteSource> reader() const;

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::string memory_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::uint64_t size_ = 0;
};

}  // namespace relay::sidecar
