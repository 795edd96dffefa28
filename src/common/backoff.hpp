#pragma once
// Retry pacing shared by every loop that waits for a dependency to come back: exponential
// backoff with jitter, and a sleep that shutdown interrupts.
//
// Jitter matters: after a Redis restart every relay and gateway thread retries; with a fixed
// schedule they all land in the same instant (they were seen to exit together inside Redis's
// loading window). Each delay is drawn from [d/2, d] ("equal jitter": spread out, never zero).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>

namespace relay {

// The generator is made on the first delay: most Backoffs (one per Redis step, in with_retry)
// never need one, and a std::random_device plus a seeded mt19937_64 per step was 5% of the
// gateway's CPU under load.
class Backoff {
 public:
  using ms = std::chrono::milliseconds;
  explicit Backoff(ms initial = ms(100), ms max = ms(5000),
                   std::optional<std::uint64_t> seed = std::nullopt)
      : initial_(initial), max_(max), next_(initial), seed_(seed) {}

  // The delay before the next attempt; each call doubles the ceiling up to max.
  ms next() {
    if (!rng_) rng_.emplace(seed_ ? *seed_ : std::random_device{}());
    ms ceiling = next_;
    next_ = std::min(next_ * 2, max_);
    return ms(
        std::uniform_int_distribution<long long>(ceiling.count() / 2, ceiling.count())(*rng_));
  }
  // After a success: the next failure starts from the initial delay again.
  void reset() { next_ = initial_; }

 private:
  ms initial_, max_, next_;
  std::optional<std::uint64_t> seed_;
  std::optional<std::mt19937_64> rng_;
};

// Sleeps d unless stop is requested first; false when it was.
inline bool sleep_unless_stopped(std::chrono::milliseconds d, std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace relay
