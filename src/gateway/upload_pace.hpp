#pragma once
// Whether an upload arrives fast enough (server.min_upload_rate). What is measured is the
// client: the time the server spent waiting in reads for the body and the bytes those reads
// brought, over a sliding window. Time the server spends storing what it received does not
// count (the client is then held back by TCP, not slow). Pure: the server feeds it each read.

#include <chrono>
#include <cstdint>
#include <deque>

namespace relay::gateway {

class UploadPace {
 public:
  using Duration = std::chrono::steady_clock::duration;

  // min_rate: bytes/s (0 = no floor), judged once a whole window of waiting was seen.
  UploadPace(Duration window, std::int64_t min_rate) : window_(window), min_rate_(min_rate) {}

  // One read: the server waited `waited` and got `bytes`. False once the client has been
  // slower than min_rate over the last window.
  bool record(Duration waited, std::uint64_t bytes) {
    waited_ += waited;
    bytes_ += bytes;
    samples_.push_back({waited_, bytes_});
    // Keep one sample at least a window old: the rate is then over a whole window.
    while (samples_.size() > 1 && waited_ - samples_[1].waited >= window_) samples_.pop_front();
    if (min_rate_ <= 0 || waited_ - samples_.front().waited < window_) return true;
    return rate() >= static_cast<double>(min_rate_);
  }

  // Bytes/s over the current window (0 before any waiting).
  double rate() const {
    if (samples_.empty()) return 0;
    const double s = std::chrono::duration<double>(waited_ - samples_.front().waited).count();
    return s > 0 ? static_cast<double>(bytes_ - samples_.front().bytes) / s : 0;
  }
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Sample {
    Duration waited;
    std::uint64_t bytes;
  };
  Duration window_;
  std::int64_t min_rate_;
  Duration waited_{};
  std::uint64_t bytes_ = 0;
  std::deque<Sample> samples_{{Duration{}, 0}};
};

}  // namespace relay::gateway
