#pragma once
// A bound on the end of a process's shutdown. Once armed, if the process is still running
// `grace` later — a thread stuck on a Redis or storage call that cannot be interrupted, work
// queued behind it — it logs and leaves with _Exit. For processes whose state is all in Redis
// and storage, where leaving mid-step is what a crash does and is recovered from the same way.
// Declare it before the objects whose destruction it bounds: it must outlive them.

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stop_token>
#include <thread>

#include "common/log.hpp"

namespace relay {

class ExitWatchdog {
 public:
  ExitWatchdog() = default;
  ExitWatchdog(const ExitWatchdog&) = delete;
  ExitWatchdog& operator=(const ExitWatchdog&) = delete;
  ~ExitWatchdog() {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
    }
  }

  void arm(std::chrono::milliseconds grace, int exit_code) {
    thread_ = std::jthread([grace, exit_code](std::stop_token stop) {
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      cv.wait_for(lock, stop, grace, [] { return false; });
      if (stop.stop_requested()) return;
      log::warn("shutdown took longer than its grace; exiting with work still running",
                {{"grace_ms", static_cast<std::int64_t>(grace.count())}});
      std::_Exit(exit_code);
    });
  }

 private:
  std::jthread thread_;
};

}  // namespace relay
