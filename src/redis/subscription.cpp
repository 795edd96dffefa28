#include "redis/subscription.hpp"

namespace relay::redis {

Subscription Subscription::open(const Endpoint& ep, const std::string& channel, bool pattern) {
  auto conn = Connection::open(ep);
  conn.set_read_timeout(std::chrono::milliseconds(0));  // a subscriber waits for ever
  conn.append({pattern ? "PSUBSCRIBE" : "SUBSCRIBE", channel});
  auto confirm = conn.read_reply();
  if (confirm->type != REDIS_REPLY_ARRAY) throw ReplyError("redis: SUBSCRIBE: unexpected reply");
  return Subscription(std::move(conn));
}

Message Subscription::next() {
  for (;;) {
    // ["message", channel, payload] or ["pmessage", pattern, channel, payload]
    auto m = conn_.read_reply();
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 3) continue;
    std::string kind = as_string(m->element[0]);
    if (kind == "message" && m->elements == 3)
      return {as_string(m->element[1]), as_string(m->element[2])};
    if (kind == "pmessage" && m->elements == 4)
      return {as_string(m->element[2]), as_string(m->element[3])};
  }
}

}  // namespace relay::redis
