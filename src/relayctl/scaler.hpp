#pragma once
// The local scaler: what KEDA does in a cluster, on one machine (issue 5). For each model it
// watches relay:<model>:pending and starts one-shot relays (exactly as a ScaledJob would) while
// jobs wait, up to a per-model maximum — and none while the queue is empty. A relay that exits 0
// is simply gone; one that exits non-zero is logged and its model backs off before the next
// start.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "relayctl/child.hpp"

namespace relay::ctl {

struct ScaledModel {
  std::string model;
  int max_relays = 4;
  std::map<std::string, std::string> relay_env;  // RELAY_* for this model's relays
};

struct ScalerParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::string relay_binary;
  std::vector<ScaledModel> models;
  std::chrono::milliseconds interval{200};
};

class Scaler {
 public:
  explicit Scaler(ScalerParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // One pass: reap exited relays, start relays for waiting jobs. Throws redis::IoError.
  void pass();
  void run(std::stop_token stop);
  // SIGTERM to every running relay (they give their jobs back), then wait for them.
  void stop_all(std::chrono::milliseconds grace);
  int running(const std::string& model) const;

 private:
  struct State {
    std::vector<std::unique_ptr<Child>> relays;
    int failures = 0;
    std::chrono::steady_clock::time_point next_start{};
    int started = 0;
  };
  ScalerParams p_;
  redis::LazyConnection conn_;
  std::map<std::string, State> state_;
};

}  // namespace relay::ctl
