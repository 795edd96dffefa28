#include "gateway/notifier.hpp"

#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::gateway {

Notifier::Registration::~Registration() {
  std::lock_guard lock(n_.mu_);
  auto [b, e] = n_.waiters_.equal_range(id_);
  for (auto it = b; it != e; ++it)
    if (it->second.token == token_) {
      n_.waiters_.erase(it);
      break;
    }
}

std::unique_ptr<Notifier::Registration> Notifier::watch(const std::string& job_id, Wake wake,
                                                        bool every_change) {
  std::lock_guard lock(mu_);
  auto token = ++next_token_;
  auto it = waiters_.emplace(job_id, Waiter{token, std::move(wake), every_change});
  // It ended since its waiter read it:
  if (auto ended = recent_notices_.find(job_id); ended != recent_notices_.end())
    it->second.wake(ended->second);
  return std::make_unique<Registration>(*this, job_id, token);
}

void Notifier::remember_end(const std::string& job_id, const std::string& notice) {
  const auto now = std::chrono::steady_clock::now();
  while (!recent_.empty() &&
         (recent_.size() >= kRecentMax || recent_bytes_ + notice.size() > kRecentBytes ||
          now - recent_.front().at > kRecentFor)) {
    auto gone = recent_notices_.find(recent_.front().id);
    recent_bytes_ -= gone->second.size();
    recent_notices_.erase(gone);
    recent_.pop_front();
  }
  // (A second notice of one end — the gateway's settle after the relay's finish — adds nothing:
  // the first, with the record, is kept.)
  if (recent_notices_.emplace(job_id, notice).second) {
    recent_.push_back({job_id, now});
    recent_bytes_ += notice.size();
  }
}

void Notifier::wake_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, w] : waiters_) w.wake({});
}

void Notifier::run(std::stop_token stop) {
  auto interrupt = [this] {
    std::lock_guard lock(mu_);
    if (sub_) sub_->interrupt();
  };
  std::stop_callback on_stop(stop, interrupt);
  // Sentinel mode: after a failover the subscription must move to the new master (PUBLISH on
  // it never reaches subscribers of the old one): dropping the connection resubscribes.
  redis::MasterChangeHook on_failover(interrupt);
  // Channel names are "<prefix>job:<id>:done" and "<prefix>job:<id>:changed".
  const std::string head = keys_.job_done_channel("");
  const std::string prefix = head.substr(0, head.size() - std::string(":done").size());
  const std::string pattern = prefix + "*";
  Backoff backoff;
  while (!stop.stop_requested()) {
    try {
      auto sub = redis::Subscription::open(ep_, pattern, true);
      {
        std::lock_guard lock(mu_);
        sub_.emplace(std::move(sub));
      }
      if (stop.stop_requested()) break;
      // Notices sent before this subscription (while disconnected, or before the first one — a
      // gateway serves while its notifier is still connecting) are lost: every waiter reads its
      // job again.
      wake_all();
      // (Also what tests wait for before counting a waiter's reads: one registered before this
      // line is woken by the wake above and reads its job again.)
      log::info("job notices subscribed", {{"pattern", pattern}});
      backoff.reset();
      for (;;) {
        const redis::Message message = sub_->next();
        const std::string& channel = message.channel;
        const auto colon = channel.rfind(':');
        if (colon == std::string::npos || colon <= prefix.size()) continue;
        const bool done = std::string_view(channel).substr(colon) == ":done";
        const std::string id = channel.substr(prefix.size(), colon - prefix.size());
        std::lock_guard lock(mu_);
        auto [b, e] = waiters_.equal_range(id);
        if (done && b == e) remember_end(id, message.payload);
        for (auto it = b; it != e; ++it)
          if (done || it->second.every_change) it->second.wake(message.payload);
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mu_);
        sub_.reset();
      }
      if (stop.stop_requested()) break;
      auto delay = backoff.next();
      log::warn("job notice subscription lost; resubscribing",
                {{"error", e.what()}, {"retry_in_ms", delay.count()}});
      wake_all();
      if (!sleep_unless_stopped(delay, stop)) break;
    }
  }
}

}  // namespace relay::gateway
