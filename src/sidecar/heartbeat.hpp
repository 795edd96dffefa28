#pragma once
// Keeps the current job's lease alive (SPEC §4.3): every lease_ttl/3 the lease is extended if it
// still holds this relay's token. A lost lease stops the job (fencing: it writes nothing more); a
// set cancel flag cancels it, covering a cancel PUBLISH the listener missed.
//
// One thread for the relay's life, pointed at each job in turn with watch()/unwatch().

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <string>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "sidecar/job_control.hpp"

namespace relay::sidecar {

struct HeartbeatParams {
  redis::LazyConnection* conn;  // used only by the heartbeat thread
  redis::Keys keys;
  std::string model;
  std::chrono::milliseconds lease_ttl;
};

class Heartbeat {
 public:
  explicit Heartbeat(HeartbeatParams p) : p_(std::move(p)) {}
  // Beats for this job from lease_ttl/3 after now on.
  void watch(std::string job_id, std::string token, JobControl* job);
  // After it returns, no beat for the previous job is in flight or will start.
  void unwatch();
  // Runs until stop is requested.
  void run(std::stop_token stop);

 private:
  void beat();  // with mu_ held

  HeartbeatParams p_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  JobControl* job_ = nullptr;
  std::string job_id_, token_;
  std::chrono::steady_clock::time_point next_{}, last_ok_{};
};

}  // namespace relay::sidecar
