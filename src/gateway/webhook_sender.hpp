#pragma once
// The webhook sender (SPEC §8): delivers scheduled webhooks, signed as Standard Webhooks, with
// exponential backoff and jitter (honouring Retry-After) for webhooks.max_age. Deliveries live
// in Redis (a sorted set by due time and a hash each), so they survive gateway restarts; a
// delivery is claimed before it is sent, so one replica sends it at a time; each attempt's
// outcome is written on the job.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

#include "http/resolver.hpp"
#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "redis/schedules.hpp"

namespace relay::gateway {

struct WebhookSenderParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  std::string key;  // the decoded webhooks.secret
  bool allow_private = false;
  std::chrono::milliseconds timeout, max_age, initial_backoff;
  std::int64_t concurrency = 16;  // deliveries in flight at once
  std::int64_t per_host = 2;      // ... to one destination (host:port), to begin with
  std::int64_t per_host_max = 8;  // ... at most, for a receiver that keeps up (AIMD below)
  std::chrono::milliseconds poll_interval{200};
  // The callback hosts' lookups (a deadline, a cache): a name server that does not answer costs
  // a worker its timeout, not the system resolver's retries. Null: getaddrinfo on the worker.
  http::Resolver* resolver = nullptr;
};

// Deliveries are claimed by one dispatcher thread and attempted by `concurrency` workers, at
// most `per_host` at a time per destination: a slow or hanging receiver holds only its own
// share of the workers, and its other deliveries wait their turn while other receivers' go
// ahead. As many more as `per_host` wait in memory, each taken by the worker that finishes one
// for its destination, at once: a busy receiver's deliveries go out back to back, not one
// dispatcher round (a Redis claim) per delivery. Beyond that they are re-scheduled a moment
// later in Redis (no attempt counted), and the next claims ask only for as many as deliveries
// ended meanwhile: one busy receiver does not have its backlog claimed and put back round after
// round (issue 14's benchmark with a callback per job: ~2,700 webhooks/s to one receiver, the
// jobs at ~6,000/s; a claim of 16 put back 14).
//
// A destination's share is learned, as TCP learns a window: it starts at `per_host`, grows by
// one for each delivery it answers 2xx while more of its deliveries wait, up to `per_host_max`,
// and halves (never below `per_host`) at each attempt it fails — an error status, a timeout, a
// connection refused. A far receiver that keeps up is not held to `per_host` / its round trip
// (2 at 100 ms: 20 webhooks a second, however many jobs end), and one that struggles or hangs
// gets no more than before. What it learned is kept while it has deliveries, and for a minute
// after its last.
class WebhookSender {
 public:
  explicit WebhookSender(WebhookSenderParams p);
  ~WebhookSender();
  void run(std::stop_token stop);

 private:
  struct Task {
    redis::Delivery delivery;
    std::string destination;
  };
  static constexpr long long kDeferMs = 500;
  struct Host {
    std::int64_t in_flight = 0;  // queued for a worker or being attempted
    std::deque<Task> waiting;    // claimed, for the next worker free for this destination
    std::int64_t share = 0;      // in flight at most (learned; 0: not yet, per_host)
    std::chrono::steady_clock::time_point last_end{};
  };
  // How an attempt ended, for its destination's share.
  enum class Ending { answered, failed, other };
  static constexpr std::chrono::minutes kShareKept{1};
  struct Round {
    int claimed = 0, deferred = 0;
  };
  Round dispatch(int limit);  // claims at most limit; throws redis errors
  bool place(Task task);      // (mu_ held) queued or waiting; false: its host has its share
  // Deliveries claimed and not ended, at most: as many waiting (for a worker, or for their
  // receiver's turn) as attempted, so that receivers waiting their turn never keep workers idle
  // while other receivers' deliveries are due.
  std::int64_t in_hand_limit() const { return 2 * p_.concurrency; }
  void work(std::stop_token stop);
  // An attempt's outcome, written to Redis with those of the attempts that ended meanwhile: the
  // worker that finds none being written writes them all (one round trip for all that came
  // while the last was under way) and goes on while more come; the others go on to their next
  // delivery. A write that fails leaves those deliveries claimed: retried when the claim lapses.
  void record(redis::Connection::Call outcome, redis::LazyConnection& conn);
  Ending attempt(const redis::Delivery& d, redis::LazyConnection& conn, std::mt19937_64& rng,
                 std::stop_token stop);
  // (mu_ held) An attempt to host ended: its share learns from it, and its waiting deliveries
  // take the places free.
  std::int64_t ended(Host& host, Ending how);  // how many were put in queue_
  void forget_idle_hosts();                    // (mu_ held) shares not used for kShareKept

  WebhookSenderParams p_;
  redis::LazyConnection conn_;  // the dispatcher's
  std::mutex mu_;
  // work_cv_ a plain condition variable, woken at a stop by the workers' stop callbacks:
  // condition_variable_any's wait with a stop_token goes through a mutex of its own, which all
  // sixteen workers contended for at every wait and wake.
  std::condition_variable work_cv_;
  std::condition_variable_any idle_cv_;
  std::deque<Task> queue_;
  std::map<std::string, Host> hosts_;
  std::int64_t in_flight_ = 0;       // (all hosts') queued or being attempted
  std::int64_t waiting_ = 0;         // (all hosts') waiting
  std::uint64_t ended_ = 0;          // attempts ended, ever
  bool dispatcher_listens_ = false;  // waiting for an attempt's end (idle_cv_)
  // record(): outcomes not yet written, and whether a worker is writing.
  std::mutex outcomes_mu_;
  std::vector<redis::Connection::Call> outcomes_;
  bool writing_ = false;
};

// "host:port" of a callback URL, the unit of webhooks.per_host_concurrency.
std::string webhook_destination(const std::string& url);

// Delay before attempt n+1 after n failed attempts: initial * 2^(n-1), at most an hour, with
// "equal jitter" (uniformly in [d/2, d]), and never sooner than Retry-After.
std::chrono::milliseconds webhook_backoff(int failed_attempts, std::chrono::milliseconds initial,
                                          std::chrono::milliseconds retry_after,
                                          std::mt19937_64& rng);

}  // namespace relay::gateway
