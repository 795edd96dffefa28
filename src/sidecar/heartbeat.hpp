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
// One thread for the relay's life, watching each job in hand (several with relay.concurrency)
// from watch() to unwatch().

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "sidecar/job_control.hpp"
#include "sidecar/progress_endpoint.hpp"

namespace relay::sidecar {

struct HeartbeatParams {
  // Used only by the heartbeat thread; its endpoint's read_timeout should be beat_wait().
  redis::LazyConnection* conn;
  redis::Keys keys;
  std::string model;
  std::chrono::milliseconds lease_ttl;
  std::chrono::milliseconds progress_interval{1000};
  // With webhook_events "progress": at most one progress webhook per this interval.
  std::chrono::milliseconds progress_webhook_interval{10'000};
};

class Heartbeat {
 public:
  // How long a beat waits for each reply: a sixth of the lease, at least kLeastReadWait and at
  // most kReadTimeout. A master that stops answering without closing the connection (a node gone
  // without a word, a partition) is then given up on while the lease has most of its life left,
  // and a failed beat is tried again within kRetryAfter on a new connection — after a failover,
  // on the new master. (With the default 30 s a beat on a silent master outlived a 60 s lease's
  // last renewal, and every job in hand lost its lease to the failover and ran again.)
  static std::chrono::milliseconds beat_wait(std::chrono::milliseconds lease_ttl) {
    return std::clamp<std::chrono::milliseconds>(lease_ttl / 6, redis::kLeastReadWait,
                                                 redis::kReadTimeout);
  }
  static constexpr std::chrono::milliseconds kRetryAfter{1'000};

  explicit Heartbeat(HeartbeatParams p) : p_(std::move(p)) {}
  // Beats for this job from lease_ttl/3 after now on — or after leased_at, when its lease was
  // set earlier (a job taken ahead; at once if that beat is due). progress_webhooks: the job
  // wants webhooks for its progress.
  void watch(std::string job_id, std::string token, JobControl* job, bool progress_webhooks = false,
             std::chrono::steady_clock::time_point leased_at = {});
  // A progress report for a job watched (ignored when it is not); from any thread.
  void report(const std::string& job_id, ProgressReport r);
  // After it returns, no beat for the job is in flight or will start.
  void unwatch(const std::string& job_id);
  // Runs until stop is requested.
  void run(std::stop_token stop);

 private:
  using Clock = std::chrono::steady_clock;
  struct Watched {
    std::string token;
    JobControl* job = nullptr;
    Clock::time_point next, last_ok;
    std::optional<ProgressReport> progress;  // received, not yet written
    Clock::time_point next_progress{}, next_progress_webhook{};
    bool progress_webhooks = false;
  };
  enum class Beat { held, lost, failed };  // lost: the job is stopped; failed: Redis is not there
  // Both with mu_ held.
  Beat beat(const std::string& id, Watched& w);
  void write_progress(const std::string& id, Watched& w);
  bool work_due(Clock::time_point now) const;  // a beat or a progress write

  HeartbeatParams p_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, Watched> jobs_;  // by job id
};

}  // namespace relay::sidecar
