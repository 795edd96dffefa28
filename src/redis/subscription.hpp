#pragma once
// A subscriber: one connection in pub/sub mode on one channel or pattern. Pub/sub reaches every
// node of a Redis Cluster (PUBLISH is broadcast over the cluster bus), so in cluster mode the
// subscription may sit on any master. Sentinel mode: after a failover PUBLISH goes to the new
// master, so subscribers drop theirs on MasterChangeHook and open a new one.

#include <string>

#include "redis/connection.hpp"

namespace relay::redis {

struct Message {
  std::string channel, payload;
};

class Subscription {
 public:
  // Connects and subscribes (SUBSCRIBE, or PSUBSCRIBE when pattern), confirmed before it
  // returns. Throws IoError or ReplyError.
  static Subscription open(const Endpoint& ep, const std::string& channel, bool pattern = false);
  // Waits for the next message, for ever; throws IoError when the connection fails or another
  // thread called interrupt().
  Message next();
  void interrupt() noexcept { conn_.interrupt(); }

 private:
  explicit Subscription(Connection conn) : conn_(std::move(conn)) {}
  Connection conn_;
};

}  // namespace relay::redis
