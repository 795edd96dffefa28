#pragma once
// Jobs finished per window for the dashboard, from the newest entries of a model's completion
// stream (its entry ids are Redis times, ms). Counting a window by reading every entry in it
// read up to 10,000 entries per window and model at each refresh (~4 ms of Redis each) and
// stopped at 10,000: a model finishing 6,000 jobs/s showed "10000" for its last minute. So a
// sample of the newest entries is read, one call per model: a window it reaches back past is
// counted exactly; a longer one is the sample's rate times the window, marked estimated.

#include <cstdint>
#include <span>

namespace relay::gateway {

struct Finished {
  std::int64_t count = 0;
  bool estimated = false;
};

// times_ms: the sample's entry times, newest first; full: the sample is as large as asked
// (older entries exist beyond it).
inline Finished finished_within(std::span<const std::int64_t> times_ms, bool full,
                                std::int64_t now_ms, std::int64_t window_ms) {
  const std::int64_t since = now_ms - window_ms;
  Finished out;
  for (auto t : times_ms) {
    if (t < since) return out;  // the sample reaches back past the window: exact
    ++out.count;
  }
  if (!full || times_ms.empty()) return out;  // the whole stream is in the window
  // Every sampled entry is within the window, and older ones exist: extrapolate.
  const std::int64_t span = now_ms - times_ms.back();
  if (span <= 0) return out;
  out.count = static_cast<std::int64_t>(static_cast<double>(out.count) *
                                        static_cast<double>(window_ms) / static_cast<double>(span));
  out.estimated = true;
  return out;
}

}  // namespace relay::gateway
