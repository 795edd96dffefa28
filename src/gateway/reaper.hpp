#pragma once
// The reaper (seed, "Crash recovery"; SPEC §4.6): finds jobs whose relay died — in processing,
// lease gone — and requeues them at the front of pending, or dead-letters them after
// gc.max_reap_attempts crashed runs. Safe with several gateway replicas: every decision is one
// Lua step, and the "seen lease-less twice, a grace apart" marks live in Redis.

#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"

namespace relay::gateway {

struct ReaperParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  std::chrono::milliseconds interval, grace;
  std::int64_t max_attempts;
  // Quota admissions a crashed gateway left (max_pending): swept per tenant once this old.
  std::vector<std::string> tenants;
  std::chrono::milliseconds admission_grace{};
};

struct ReapStats {
  int requeued = 0, deadlettered = 0;
};

class Reaper {
 public:
  explicit Reaper(ReaperParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // One pass over every model now (tests call it directly). Throws redis::IoError.
  ReapStats pass();
  // A pass every interval until stop; errors are logged and retried next tick.
  void run(std::stop_token stop);

 private:
  ReaperParams p_;
  redis::LazyConnection conn_;
};

}  // namespace relay::gateway
