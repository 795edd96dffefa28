#pragma once
// The shape of every background loop that polls (reaper, GC, the local scaler): run a pass,
// wait an interval, until stopped. Written once so that each loop stops at once on shutdown
// (the wait is interruptible), reports a failing pass the same way (warn, at most once a
// minute while it keeps failing: an outage is noticed, not flooded) and can drain a backlog.

#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay {

struct PeriodicTask {
  std::string name;                    // in log lines: "<name> pass failed; retrying"
  std::chrono::milliseconds interval;  // between passes
  // One pass; true when it left work behind (a full batch): the next runs at once.
  std::function<bool()> pass;
  // After a pass threw, before the next (e.g. drop a connection that may be broken).
  std::function<void()> on_error = {};
  std::chrono::milliseconds log_every{std::chrono::minutes(1)};
};

// Runs task until stop is requested; returns promptly once it is, even mid-interval.
inline void run_periodically(const PeriodicTask& task, std::stop_token stop) {
  std::optional<std::chrono::steady_clock::time_point> last_log;
  int unreported = 0;  // failures not logged since the last line
  while (!stop.stop_requested()) {
    bool more = false;
    try {
      more = task.pass();
    } catch (const std::exception& e) {
      if (task.on_error) task.on_error();
      const auto now = std::chrono::steady_clock::now();
      if (!last_log || now - *last_log >= task.log_every) {
        log::warn(task.name + " pass failed; retrying",
                  {{"error", e.what()}, {"failures_not_logged", unreported}});
        last_log = now;
        unreported = 0;
      } else {
        ++unreported;
      }
    }
    if (!more) sleep_unless_stopped(task.interval, stop);
  }
}

}  // namespace relay
