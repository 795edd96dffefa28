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
  std::int64_t per_host = 2;      // ... to one destination (host:port)
  std::chrono::milliseconds poll_interval{200};
  // The callback hosts' lookups (a deadline, a cache): a name server that does not answer costs
  // a worker its timeout, not the system resolver's retries. Null: getaddrinfo on the worker.
  http::Resolver* resolver = nullptr;
};

// Deliveries are claimed by one dispatcher thread and attempted by `concurrency` workers, at
// most `per_host` at a time per destination: a slow or hanging receiver holds only its own
// share of the workers, and its other deliveries wait their turn (re-scheduled a moment later,
// no attempt counted) while other receivers' go ahead.
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
  int dispatch();  // claims what free workers can take; throws redis errors
  void work(std::stop_token stop);
  void attempt(const redis::Delivery& d, redis::LazyConnection& conn, std::mt19937_64& rng,
               std::stop_token stop);

  WebhookSenderParams p_;
  redis::LazyConnection conn_;  // the dispatcher's
  std::mutex mu_;
  std::condition_variable_any work_cv_, idle_cv_;
  std::deque<Task> queue_;
  std::map<std::string, std::int64_t> per_host_;
  std::int64_t in_flight_ = 0;
};

// "host:port" of a callback URL, the unit of webhooks.per_host_concurrency.
std::string webhook_destination(const std::string& url);

// Delay before attempt n+1 after n failed attempts: initial * 2^(n-1), at most an hour, with
// "equal jitter" (uniformly in [d/2, d]), and never sooner than Retry-After.
std::chrono::milliseconds webhook_backoff(int failed_attempts, std::chrono::milliseconds initial,
                                          std::chrono::milliseconds retry_after,
                                          std::mt19937_64& rng);

}  // namespace relay::gateway
