#pragma once
// The relay's main loop (seed, "Job lifecycle"): wait for the model, then take jobs until
// max_jobs, a queue timeout or a shutdown — one at a time per slot, relay.concurrency slots.
//
// A slot is a thread with its own Redis connection and its own keep-alive connection to the
// model: what a relay of concurrency 1 does, several times over. They share the heartbeat
// (which keeps every lease in hand alive), the cancel listener (which stops the job it names,
// whichever slot runs it), the progress endpoint (a URL per job) and the max_jobs count.
//
// With relay.take_ahead, a slot whose jobs are short takes its next job while the model runs the
// current one, and sends the current one's last step (with the take of the one after) without
// waiting for its reply, which it reads once the model has answered the next: the model gets the
// next job the moment it answers, not one Redis round trip later. A job taken ahead is the
// slot's from the moment its take is read; a cancel heard before that is kept for it. It waits
// at most take_ahead from its take: a model still working then gets it given back to pending.
// Storage goes the same way: the input of a job taken ahead is read while the model works, and
// when the model answers with a job taken ahead waiting, that job goes to the model first and
// the answer is stored (and its job finished) while the model works on it — the slot's tail.

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/alarm_clock.hpp"
#include "crypto/keyring.hpp"
#include "redis/connection.hpp"
#include "redis/job_record.hpp"
#include "redis/job_store.hpp"
#include "sidecar/config.hpp"
#include "sidecar/job_control.hpp"
#include "sidecar/job_runner.hpp"
#include "storage/storage.hpp"

namespace relay::sidecar {

class InferenceClient;
class Heartbeat;
class ProgressEndpoint;

class Relay {
 public:
  Relay(Config config, std::unique_ptr<storage::Storage> storage, crypto::Encryption encryption);
  ~Relay();
  // How run() ends once its jobs are settled. at_once: the process leaves there (std::_Exit)
  // rather than wind down the heartbeat and cancel-listener threads and then main's — each a
  // wake-up and a join, one after the other: ~0.3 ms of a one-shot relay's ~4 (issue 14's
  // benchmark; the seed's relay runs one job per process). Nothing is lost by it: what the
  // relay owes is in Redis and storage by then, its log lines are written as they come (no
  // buffer), and the kernel closes its connections as a crash would. orderly: every thread
  // joined and every object destroyed, as the sanitizers' leak and race checks want.
  enum class Ending { orderly, at_once };
  // Returns the process exit code: 0 after jobs, on queue timeout and on shutdown; 1 when a
  // dependency never came up or Redis went away for too long.
  int run(Ending ending = Ending::orderly);
  // From any thread (the signal thread): finish up. Idle slots' blocked BLMOVEs are released at
  // once; jobs in hand are given back to the front of pending.
  void shutdown();

 private:
  struct Slot;
  struct Finishing;
  struct Inflight;
  struct Tail;
  enum class Step { next, stop };
  // One slot's loop, until the relay ends (shutdown, max_jobs, idle, Redis gone).
  void work(Slot& slot, Heartbeat& heartbeat);
  // Runs a job whose lease is taken, and writes its outcome; when max_jobs leaves room, the
  // step that writes it also takes the slot's next job if one waits (into slot.next). held: the
  // job's control when it was taken ahead (already in running_ and watched).
  Step process(Slot& slot, const JobRecord& job, const std::string& token, Heartbeat& heartbeat,
               std::unique_ptr<JobControl> held);
  // A job's last step for its result: the outcome written (or the job given back, or retried);
  // with next, the finish takes the slot's next job with it (see write_outcome()).
  Step conclude(Slot& slot, Heartbeat& heartbeat, const JobRecord& job, const std::string& token,
                JobResult result, std::optional<redis::Taken>* next);
  // The slot's tail, if any (a job whose model answered while a job taken ahead waited): its
  // result stored and its outcome written, taking the slot's next job with it when the slot has
  // none — while jobs are short and some wait, if ahead (the model is at work on the slot's
  // current job). A job taken so is held like one taken ahead.
  void store_tail(Slot& slot, Heartbeat& heartbeat, bool ahead);
  // Reads the input of the job taken ahead into memory, while the model works (kPrefetchBytes
  // at most; else, or on failure, the job reads it as it runs).
  void prefetch_next(Slot& slot);
  // A job no longer in hand: out of running_ and the heartbeat.
  void release(const std::string& job_id, Heartbeat& heartbeat);
  // A job taken while another is in hand, registered as one in hand: its control, in running_
  // (stopped if a cancel for it was heard) and watched by the heartbeat from its take.
  std::unique_ptr<JobControl> held_control(const redis::Taken& job, Heartbeat& heartbeat,
                                           std::chrono::steady_clock::time_point taken_at);
  // While Redis is out of memory, an outcome's write (the model's finished work) waits for it
  // past the usual retry window: the lease, which Redis still extends then, is kept on conn
  // before each try, at most lease_ttl/3 apart, until the write goes through or the finish finds
  // the lease lost. A SIGTERM meanwhile does not end it (the pod's grace period does).
  // For redis::with_retry's patient.
  std::function<std::optional<std::chrono::milliseconds>(const redis::TransientError&)>
  outcome_patience(redis::LazyConnection& conn, const std::string& job_id,
                   const std::string& token);
  // A finished job's outcome written (completed, failed, cancelled: lua/finish.lua), retried
  // while Redis is away (or out of memory: outcome_patience); with next, the take of the slot's
  // next job rides in the same round trip (when max_jobs leaves room and one waits). again: an
  // earlier try may have run (its reply was lost). The outcome, for the job's log line.
  std::string write_outcome(redis::LazyConnection& conn, redis::TakeCandidates& candidates,
                            const redis::Completion& completion, const std::string& token,
                            std::optional<redis::Taken>* next, bool again = false);
  // relay.take_ahead: whether the slot takes its next job while the model runs this one.
  bool takes_ahead(const Slot& slot) const;
  // Sends a finished job's outcome (when given) and the take of a job ahead (with take, when
  // max_jobs leaves room) on the slot's connection without waiting: settle() reads the replies.
  void send_ahead(Slot& slot, Heartbeat& heartbeat, std::optional<Finishing> finishing, bool take);
  // Reads what send_ahead() sent (lost: its connection failed): logs the finished job (its
  // outcome written the usual way when the reply was lost) and holds the job taken, if any, in
  // slot.next — registered for cancels and the heartbeat.
  // Then stores the slot's tail, if any (store_tail(), ahead as there). Before any other use of
  // the slot's connection.
  void settle(Slot& slot, Heartbeat& heartbeat, bool lost = false, bool ahead = false);
  void settle_sent(Slot& slot, Heartbeat& heartbeat, bool lost = false);
  // Registers a job in hand for cancels (running_), stopping it if it is cancelled (its record, or
  // a cancel heard already) or the relay is shutting down.
  void hold(const JobRecord& job, JobControl& control);
  // A job taken but not run (shutdown, the relay ending, one taken ahead waiting too long) goes
  // back to the front of pending: the slot's next, or the one given. False when it could not
  // (its lease was no longer this relay's, or Redis was away: then the reaper brings it back).
  bool give_back_next(Slot& slot, Heartbeat& heartbeat);
  bool give_back(std::optional<redis::Taken>& job, std::unique_ptr<JobControl>& control, Slot& slot,
                 Heartbeat& heartbeat);
  // A place for one more job within max_jobs (always, with max_jobs 0); unclaim() returns one
  // not used.
  bool claim();
  void unclaim();
  // The relay winds down: slots finish the job in hand and take no more.
  void end(int exit_code);
  bool ending() const;
  // Until the model answers its health check 200 (true), or relay.health_timeout passes or a
  // shutdown comes (false), probing with `client`.
  bool wait_for_inference(InferenceClient& client);
  // After the model was found unreachable (slot.model_lost): what was sent ahead read, a job
  // taken ahead given back, then the model waited for. False: the relay ends (exit 1 if the
  // model never came back).
  bool await_model(Slot& slot, Heartbeat& heartbeat);
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
  // The last cancels heard for jobs not in running_ (see the listener in run()).
  static constexpr std::size_t kCancelsHeard = 4096;
  std::unordered_set<std::string> cancels_heard_;
  std::deque<std::string> cancels_order_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace relay::sidecar
