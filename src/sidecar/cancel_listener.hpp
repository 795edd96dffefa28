#pragma once
// Subscribes to relay:<model>:cancel for the relay's whole life — from before its first BLMOVE —
// so that a cancel published right after a dequeue is never missed (SPEC §4.7); the record's
// cancel flag, read by the dequeue step and every heartbeat, covers the rest.

#include <functional>
#include <mutex>
#include <stop_token>
#include <string>

#include "redis/connection.hpp"
#include "redis/subscription.hpp"

namespace relay::sidecar {

struct CancelListenerParams {
  redis::Endpoint endpoint;
  std::string channel;
  // Called from the listener thread with each job id published on the channel.
  std::function<void(const std::string& job_id)> on_cancel;
};

class CancelListener {
 public:
  explicit CancelListener(CancelListenerParams p) : p_(std::move(p)) {}
  // Subscribes; returns once the subscription is confirmed (or throws redis::IoError).
  void subscribe();
  // Reads messages until stop is requested; reconnects and resubscribes after errors.
  void run(std::stop_token stop);

 private:
  void open_and_subscribe();

  CancelListenerParams p_;
  std::mutex mu_;  // guards sub_ against interrupt() from the stopping thread
  std::optional<redis::Subscription> sub_;
};

}  // namespace relay::sidecar
