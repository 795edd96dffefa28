#pragma once
// The relay's main loop (seed, "Job lifecycle"): wait for the model, then take jobs until
// max_jobs, a queue timeout or a shutdown — one at a time per slot, relay.concurrency slots.
//
// A slot is a thread with its own Redis connection and its own keep-alive connection to the
// model: what a relay of concurrency 1 does, several times over. They share the heartbeat
// (which keeps every lease in hand alive), the cancel listener (which stops the job it names,
// whichever slot runs it), the progress endpoint (a URL per job) and the max_jobs count.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

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
  // dependency never came up or Redis went away for too long.
  int run();
  // From any thread (the signal thread): finish up. Idle slots' blocked BLMOVEs are released at
  // once; jobs in hand are given back to the front of pending.
  void shutdown();

 private:
  struct Slot;
  enum class Step { next, stop };
  // One slot's loop, until the relay ends (shutdown, max_jobs, idle, Redis gone).
  void work(Slot& slot, Heartbeat& heartbeat);
  // Runs a job whose lease is taken, and writes its outcome; when max_jobs leaves room, the
  // step that writes it also takes the slot's next job if one waits (into slot.next).
  Step process(Slot& slot, const JobRecord& job, const std::string& token, Heartbeat& heartbeat);
  // A place for one more job within max_jobs (always, with max_jobs 0); unclaim() returns one
  // not used.
  bool claim();
  void unclaim();
  // The relay winds down: slots finish the job in hand and take no more.
  void end(int exit_code);
  bool ending() const;
  bool wait_for_inference();
  void unblock_pops();

  Config cfg_;
  std::unique_ptr<storage::Storage> storage_;
  // Job time limits and request timeouts: one thread for the relay's life, not one per job.
  AlarmClock alarms_;
  std::unique_ptr<ProgressEndpoint> progress_;  // null when relay.progress_listen is empty
  crypto::Encryption enc_;                      // read only once running: shared by the slots
  std::stop_source shutdown_;
  std::stop_source ending_;  // idle, or Redis gone: see end()
  std::atomic<int> exit_code_{0};
  std::atomic<std::int64_t> claimed_{0};  // jobs taken or being taken, against max_jobs
  std::atomic<int> busy_{0};              // slots with a job in hand
  std::atomic<std::int64_t> done_{0};     // jobs run (for the exit log line)

  std::mutex mu_;  // guards running_, and every slot's popping and pop_client
  std::unordered_map<std::string, JobControl*> running_;  // the jobs in hand, by id
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace relay::sidecar
