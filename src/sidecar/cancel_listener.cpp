#include "sidecar/cancel_listener.hpp"

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::sidecar {

void CancelListener::open_and_subscribe() {
  auto sub = redis::Subscription::open(p_.endpoint, p_.channel);
  std::lock_guard lock(mu_);
  sub_.emplace(std::move(sub));
}

void CancelListener::subscribe() {
  open_and_subscribe();
}

void CancelListener::run(std::stop_token stop) {
  // Stopping closes the socket under the blocked read.
  auto interrupt = [this] {
    std::lock_guard lock(mu_);
    if (sub_) sub_->interrupt();
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
        if (!sub_) throw redis::IoError("not subscribed");
      }
      auto msg = sub_->next();
      backoff.reset();
      p_.on_cancel(msg.payload);
    } catch (const redis::IoError& e) {
      if (stop.stop_requested()) break;
      {
        std::lock_guard lock(mu_);
        sub_.reset();
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
