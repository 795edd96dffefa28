#pragma once
// A subscriber: one connection in pub/sub mode on one channel or pattern. Pub/sub reaches every
// node of a Redis Cluster (PUBLISH is broadcast over the cluster bus), so in cluster mode the
// subscription may sit on any master. Sentinel mode: after a failover PUBLISH goes to the new
// master, so subscribers drop theirs on MasterChangeHook and open a new one.
//
// A subscriber hears nothing while nothing is published, so it cannot tell a quiet channel from
// a server gone without a word (a crashed node, a partition: no FIN, no RST, and TCP keepalive
// takes hours by default): after kQuiet of silence it PINGs, and when kQuiet passes again
// without the pong, next() throws TimedOut — the subscription is made again, on a server that
// answers. (Before 2026-12-06 it waited for ever: a gateway's job notices, and with them event
// streams and long-polls, stopped until the connection's keepalive gave up, ~2 h.)

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
  // Waits for the next message, as long as the server answers; throws IoError when the
  // connection fails, the server fell silent (TimedOut), or another thread called interrupt().
  Message next();
  void interrupt() noexcept { conn_.interrupt(); }

  static constexpr std::chrono::milliseconds kQuiet{5000};

 private:
  explicit Subscription(Connection conn) : conn_(std::move(conn)) {}
  Connection conn_;
  bool pinged_ = false;  // a PING is out, its pong not seen
};

}  // namespace relay::redis
