#pragma once
// The due sweep: what is due by time. Jobs whose ttl passed while they waited in pending fail
// `expired` and leave the pending list (lua/expire.lua), so that they cost no model time and the
// scaler does not start pods for them (a relay that takes one first checks the deadline
// itself); failed jobs whose retry is due go back to pending (lua/requeue_retry.lua). Safe with
// several gateway replicas: each job's move is one Lua step.

#include <chrono>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"

namespace relay::gateway {

struct DueSweepParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  std::chrono::milliseconds interval;
};

class DueSweep {
 public:
  explicit DueSweep(DueSweepParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // One pass over every model now; returns how many jobs it moved. Throws redis::IoError.
  int pass();
  // A pass every interval until stop; errors are logged and retried next tick.
  void run(std::stop_token stop);

 private:
  DueSweepParams p_;
  redis::LazyConnection conn_;
};

}  // namespace relay::gateway
