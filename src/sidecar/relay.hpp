#pragma once
// The relay's main loop (seed, "Job lifecycle"): wait for the model, then take jobs one at a
// time until max_jobs, a queue timeout or a shutdown.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "common/alarm_clock.hpp"
#include "crypto/keyring.hpp"
#include "redis/connection.hpp"
#include "redis/job_record.hpp"
#include "redis/job_store.hpp"
#include "sidecar/config.hpp"
#include "sidecar/job_control.hpp"
#include "storage/storage.hpp"

namespace relay::sidecar {

class InferenceClient;
class Heartbeat;
class ProgressEndpoint;

class Relay {
 public:
  Relay(Config config, std::unique_ptr<storage::Storage> storage, crypto::Encryption encryption);
  ~Relay();
  // Returns the process exit code: 0 after jobs, on queue timeout and on shutdown; 1 when a
  // dependency never came up.
  int run();
  // From any thread (the signal thread): finish up. Idle → the blocked BLMOVE is released at
  // once; mid-job → the job is given back to the front of pending.
  void shutdown();

 private:
  enum class Step { next, stop };
  // Runs a job whose lease is taken, and writes its outcome; with take_next, the step that
  // writes it also takes the next job when one waits (into next_).
  Step process(const JobRecord& job, const std::string& token, redis::LazyConnection& conn,
               Heartbeat& heartbeat, bool take_next);
  bool wait_for_inference();
  void unblock_pop();

  Config cfg_;
  std::unique_ptr<storage::Storage> storage_;
  // Job time limits and request timeouts: one thread for the relay's life, not one per job.
  AlarmClock alarms_;
  std::unique_ptr<InferenceClient> inference_;
  std::unique_ptr<ProgressEndpoint> progress_;  // null when relay.progress_listen is empty
  crypto::Encryption enc_;                      // used by the main thread only
  std::stop_source shutdown_;

  std::mutex mu_;  // guards current_ and popping_
  JobControl* current_ = nullptr;
  std::string current_id_;
  redis::BlockedClient pop_client_;
  // Main thread: the ids last seen at the head of pending (for take), and a job taken by the
  // previous job's finish.
  redis::TakeCandidates candidates_;
  std::optional<redis::Taken> next_;
  bool popping_ = false;
};

}  // namespace relay::sidecar
