#pragma once
// Collects a response body of unknown length: in memory while small, then in an unnamed file in
// the spool directory, so that a large inference result does not grow the relay's memory.
//
// The directory is explicit (relay.spool_dir) because std::tmpfile() always uses /tmp, whatever
// TMPDIR says: in a pod with a read-only root filesystem every large result would fail. In the
// Helm chart it is an emptyDir with a sizeLimit.

#include <cstdio>
#include <memory>
#include <string>

#include "common/byte_stream.hpp"

namespace relay::sidecar {

class Spool {
 public:
  static constexpr size_t kMemoryLimit = 1 << 20;

  // dir: where bodies over kMemoryLimit go; empty = $TMPDIR, else /tmp.
  explicit Spool(std::string dir = {}) : dir_(std::move(dir)) {}

  void write(const char* data, size_t n);
  std::uint64_t size() const { return size_; }
  // The first `max` bytes, for error messages.
  std::string head(size_t max) const;
  // A source over everything written; the spool must outlive it.
  std::unique_ptr<ByteSource> reader() const;

  // Throws std::runtime_error naming dir and the cause unless dir (resolved as above) is a
  // directory this process may create files in. Used at start to refuse a spool directory that
  // cannot be written.
  static void check_dir(const std::string& dir);

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::string dir_;
  std::string memory_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::uint64_t size_ = 0;
};

}  // namespace relay::sidecar
