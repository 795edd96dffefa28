#pragma once
// How a running job is told to stop, and why. The first reason wins: a job cancelled and then
// shut down is still a cancelled job.

#include <atomic>
#include <stop_token>
#include <string_view>

namespace relay::sidecar {

enum class StopReason : int { none = 0, cancelled, lease_lost, shutdown, timed_out };

class JobControl {
 public:
  void stop(StopReason r) {
    if (r == StopReason::shutdown && storing_.load()) return;
    int expected = 0;
    reason_.compare_exchange_strong(expected, static_cast<int>(r));
    source_.request_stop();
  }
  StopReason reason() const { return static_cast<StopReason>(reason_.load()); }
  std::stop_token token() const { return source_.get_token(); }
  // The model has answered: a shutdown no longer stops the job, whose result is stored and
  // written (its pod has terminationGracePeriodSeconds for that) rather than the model's work
  // thrown away. A cancel, a lost lease or the time limit still stop it.
  void storing() { storing_ = true; }

 private:
  std::stop_source source_;
  std::atomic<int> reason_{0};
  std::atomic<bool> storing_{false};
};

}  // namespace relay::sidecar
