#pragma once
// An object read to its end across broken transfers. When a read fails on what a retry may fix
// (ErrorKind::unavailable: a connection reset, S3 unreachable or answering 5xx), the rest is
// opened again from the byte the read stopped at (Storage::open_range), with backoff, a few
// times in a row at most: one dropped connection no longer fails a long download — an input
// streamed into the model (the model sees nothing of it), a result on its way to a client.
// How long is the caller's (Persistence): the relay reading a job's input waits out a storage
// outage (relay.storage_retry_timeout) rather than fail the job in seconds; the gateway gives up
// on a store gone silent after one wait of storage.s3_timeout, not five.
// Needs the object's size (file storage and S3 give it); without it, the failure is passed on.

#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "common/log.hpp"
#include "storage/resume.hpp"

namespace relay::storage {

class ResumingSource final : public ByteSource {
 public:
  static constexpr int kAttempts = 5;  // reads and reopens failed in a row before giving up

  // The whole object (length nullopt), or bytes [first, first + length) of it. Opening is
  // retried as reading is.
  ResumingSource(Storage& storage, std::string key, std::stop_token stop, std::uint64_t first = 0,
                 std::optional<std::uint64_t> length = std::nullopt,
                 Persistence persist = {.attempts = kAttempts})
      : storage_(storage),
        key_(std::move(key)),
        stop_(std::move(stop)),
        first_(first),
        persist_(persist) {
    retrying([&] {
      if (length) {
        source_ = storage_.open_range(key_, first, *length, stop_);
        length_ = length;
      } else {
        source_ = storage_.open(key_, stop_);
        length_ = source_->size();
      }
      opened_ = true;
      return size_t{0};
    });
  }

  size_t read(std::span<char> buf) override {
    return retrying([&] {
      if (!source_) source_ = storage_.open_range(key_, first_ + done_, *length_ - done_, stop_);
      const size_t n = source_->read(buf);
      done_ += n;
      return n;
    });
  }
  std::optional<std::uint64_t> size() const override { return length_; }

 private:
  // f, again after a failure a retry may fix, as persist_ allows. A read goes on from where the
  // last one stopped, which needs the size (file storage and S3 give it).
  template <class F>
  size_t retrying(F&& f) {
    return resume_after_failures(
        f, persist_, backoff_, stop_, [&] { return !opened_ || length_.has_value(); },
        [&](const StorageError& e, int failures) {
          // Each blip's failures are said; an outage waited out, every tenth.
          if (failures <= kAttempts || failures % 10 == 0)
            log::warn("storage read failed; resuming", {{"key", key_},
                                                        {"at_byte", first_ + done_},
                                                        {"failures_in_a_row", failures},
                                                        {"error", e.what()}});
          source_.reset();
        });
  }

  Storage& storage_;
  std::string key_;
  std::stop_token stop_;
  std::uint64_t first_, done_ = 0;
  bool opened_ = false;
  std::optional<std::uint64_t> length_;
  Persistence persist_;
  std::unique_ptr<ByteSource> source_;
  Backoff backoff_{std::chrono::milliseconds(200), std::chrono::seconds(3)};
};

}  // namespace relay::storage
