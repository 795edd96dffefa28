#pragma once
// Keeps one job's lease alive (SPEC §4.3): every lease_ttl/3 the lease is extended if it still
// holds this relay's token. A lost lease stops the job (fencing: it writes nothing more); a set
// cancel flag cancels it, covering a cancel PUBLISH the listener missed.

#include <chrono>
#include <string>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "relay/job_control.hpp"

namespace relay::sidecar {

struct HeartbeatParams {
  redis::LazyConnection* conn;  // owned by the relay; used only by the heartbeat thread
  redis::Keys keys;
  std::string model, job_id, token;
  std::chrono::milliseconds lease_ttl;
  JobControl* job;
};

class Heartbeat {
 public:
  explicit Heartbeat(HeartbeatParams p) : p_(std::move(p)) {}
  // Returns when stop is requested (the job ended) or the job was stopped for a lost lease.
  void run(std::stop_token stop);

 private:
  HeartbeatParams p_;
};

}  // namespace relay::sidecar
