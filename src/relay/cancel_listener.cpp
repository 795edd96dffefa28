#include "relay/cancel_listener.hpp"

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::sidecar {

void CancelListener::open_and_subscribe() {
  auto conn = redis::Connection::open(p_.endpoint);
  conn.set_read_timeout(std::chrono::milliseconds(0));  // a subscriber waits for ever
  conn.append({"SUBSCRIBE", p_.channel});
  auto confirm = conn.read_reply();
  if (confirm->type != REDIS_REPLY_ARRAY) throw redis::ReplyError("SUBSCRIBE: unexpected reply");
  std::lock_guard lock(mu_);
  conn_.emplace(std::move(conn));
}

void CancelListener::subscribe() {
  open_and_subscribe();
}

void CancelListener::run(std::stop_token stop) {
  // Stopping closes the socket under the blocked read.
  auto interrupt = [this] {
    std::lock_guard lock(mu_);
    if (conn_) conn_->interrupt();
  };
  std::stop_callback on_stop(stop, interrupt);
  // Sentinel mode: after a failover the subscription must move to the new master (PUBLISH on
  // it never reaches subscribers of the old one): dropping the connection resubscribes.
  redis::MasterChangeHook on_failover(interrupt);
  Backoff backoff;
  while (!stop.stop_requested()) {
    try {
      {
        std::lock_guard lock(mu_);
        if (!conn_) throw redis::IoError("not subscribed");
      }
      auto msg = conn_->read_reply();
      backoff.reset();
      if (msg->type == REDIS_REPLY_ARRAY && msg->elements == 3 &&
          redis::as_string(msg->element[0]) == "message")
        p_.on_cancel(redis::as_string(msg->element[2]));
    } catch (const redis::IoError& e) {
      if (stop.stop_requested()) break;
      {
        std::lock_guard lock(mu_);
        conn_.reset();
      }
      auto delay = backoff.next();
      log::warn("cancel subscription lost, resubscribing",
                {{"error", e.what()}, {"retry_in_ms", delay.count()}});
      if (!sleep_unless_stopped(delay, stop)) break;
      try {
        open_and_subscribe();
      } catch (const std::exception&) {
        // Next loop turn retries; the heartbeat's cancel-flag check covers the gap.
      }
    }
  }
}

}  // namespace relay::sidecar
