#pragma once
// The webhook sender (SPEC §8): delivers scheduled webhooks, signed as Standard Webhooks, with
// exponential backoff and jitter (honouring Retry-After) for webhooks.max_age. Deliveries live
// in Redis (a sorted set by due time and a hash each), so they survive gateway restarts; a
// delivery is claimed before it is sent, so one replica sends it at a time; each attempt's
// outcome is written on the job.

#include <chrono>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

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
  std::chrono::milliseconds poll_interval{200};
};

class WebhookSender {
 public:
  explicit WebhookSender(WebhookSenderParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // Sends what is due now; returns how many attempts were made. Throws redis::IoError.
  int pass();
  void run(std::stop_token stop);

 private:
  void deliver(redis::Schedules& schedules, const std::string& model, const std::string& id);

  WebhookSenderParams p_;
  redis::LazyConnection conn_;
  std::mt19937_64 rng_{std::random_device{}()};
};

// Delay before attempt n+1 after n failed attempts: initial * 2^(n-1), at most an hour, with
// "equal jitter" (uniformly in [d/2, d]), and never sooner than Retry-After.
std::chrono::milliseconds webhook_backoff(int failed_attempts, std::chrono::milliseconds initial,
                                          std::chrono::milliseconds retry_after,
                                          std::mt19937_64& rng);

}  // namespace relay::gateway
