#include "redis/subscription.hpp"

namespace relay::redis {

Subscription Subscription::open(const Endpoint& ep, const std::string& channel, bool pattern) {
  auto conn = Connection::open(ep, {pattern ? "PSUBSCRIBE" : "SUBSCRIBE", channel});
  conn.set_read_timeout(kQuiet);  // then a PING (next())
  auto confirm = conn.read_reply();
  if (confirm->type != REDIS_REPLY_ARRAY) throw ReplyError("redis: SUBSCRIBE: unexpected reply");
  return Subscription(std::move(conn));
}

Message Subscription::next() {
  for (;;) {
    // ["message", channel, payload] or ["pmessage", pattern, channel, payload]; ["pong", ""]
    Reply m;
    try {
      m = conn_.read_reply();
    } catch (const TimedOut&) {
      if (pinged_) throw;  // silent since the PING too: gone
      conn_.append({"PING"});
      pinged_ = true;
      continue;
    }
    pinged_ = false;  // (whatever came, the server is there)
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 3) continue;
    std::string kind = as_string(m->element[0]);
    if (kind == "message" && m->elements == 3)
      return {as_string(m->element[1]), as_string(m->element[2])};
    if (kind == "pmessage" && m->elements == 4)
      return {as_string(m->element[2]), as_string(m->element[3])};
  }
}

}  // namespace relay::redis
