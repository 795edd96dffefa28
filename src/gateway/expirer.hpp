#pragma once
// The expiry sweep (queue deadlines): jobs whose ttl passed while they waited in pending fail
// `expired` and leave the pending list, so that they cost no model time and the scaler does not
// start pods for them. Safe with several gateway replicas: each job's expiry is one Lua step
// (lua/expire.lua). A relay that takes a job before the sweep does checks the deadline itself.

#include <chrono>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"

namespace relay::gateway {

struct ExpirerParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  std::chrono::milliseconds interval;
};

class Expirer {
 public:
  explicit Expirer(ExpirerParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // One pass over every model now; returns how many jobs expired. Throws redis::IoError.
  int pass();
  // A pass every interval until stop; errors are logged and retried next tick.
  void run(std::stop_token stop);

 private:
  ExpirerParams p_;
  redis::LazyConnection conn_;
};

}  // namespace relay::gateway
