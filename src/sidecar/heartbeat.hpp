#pragma once
// Keeps the current job's lease alive (SPEC §4.3): every lease_ttl/3 the lease is extended if it
// still holds this relay's token. A lost lease stops the job (fencing: it writes nothing more); a
// set cancel flag cancels it, covering a cancel PUBLISH the listener missed.
//
// It also records the model's progress reports (ProgressEndpoint), fenced by the same lease: at
// most one write per progress_interval, the latest report winning, so a model reporting every
// millisecond costs Redis one write a second; a report held back is written when its turn
// comes. Both are the job's bookkeeping while it runs, on one connection.
//
// One thread for the relay's life, pointed at each job in turn with watch()/unwatch().

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "sidecar/job_control.hpp"
#include "sidecar/progress_endpoint.hpp"

namespace relay::sidecar {

struct HeartbeatParams {
  redis::LazyConnection* conn;  // used only by the heartbeat thread
  redis::Keys keys;
  std::string model;
  std::chrono::milliseconds lease_ttl;
  std::chrono::milliseconds progress_interval{1000};
  // With webhook_events "progress": at most one progress webhook per this interval.
  std::chrono::milliseconds progress_webhook_interval{10'000};
};

class Heartbeat {
 public:
  explicit Heartbeat(HeartbeatParams p) : p_(std::move(p)) {}
  // Beats for this job from lease_ttl/3 after now on. progress_webhooks: the job wants webhooks
  // for its progress.
  void watch(std::string job_id, std::string token, JobControl* job,
             bool progress_webhooks = false);
  // A progress report for the job watched (ignored when none is); from any thread.
  void report(ProgressReport r);
  // After it returns, no beat for the previous job is in flight or will start.
  void unwatch();
  // Runs until stop is requested.
  void run(std::stop_token stop);

 private:
  void beat();            // with mu_ held
  void write_progress();  // with mu_ held

  HeartbeatParams p_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  JobControl* job_ = nullptr;
  std::string job_id_, token_;
  std::chrono::steady_clock::time_point next_{}, last_ok_{};
  std::optional<ProgressReport> progress_;  // received, not yet written
  std::chrono::steady_clock::time_point next_progress_{}, next_progress_webhook_{};
  bool progress_webhooks_ = false;
};

}  // namespace relay::sidecar
