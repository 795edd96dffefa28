#include "common/alarm_clock.hpp"

#include "common/thread_name.hpp"

namespace relay {

AlarmClock::~AlarmClock() = default;  // (thread_ goes first: stopped and joined)

AlarmClock::Id AlarmClock::arm(Clock::time_point when, std::function<void()> ring) {
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token st) { run(st); });
  const Id id = next_id_++;
  due_.emplace(when, std::make_pair(id, std::move(ring)));
  // Only a deadline before the planned wake-up needs the thread now; it re-plans on waking.
  if (when < wakes_at_) cv_.notify_one();
  return id;
}

bool AlarmClock::disarm(Id id) {
  std::unique_lock lock(mu_);
  for (auto it = due_.begin(); it != due_.end(); ++it)
    if (it->second.first == id) {
      due_.erase(it);  // the thread may still wake at its time: it finds nothing and re-plans
      return true;
    }
  rung_cv_.wait(lock, [&] { return ringing_ != id; });
  return false;
}

void AlarmClock::run(std::stop_token stop) {
  name_this_thread("alarms");
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    const auto now = Clock::now();
    if (!due_.empty() && due_.begin()->first <= now) {
      auto node = due_.extract(due_.begin());
      ringing_ = node.mapped().first;
      lock.unlock();
      node.mapped().second();
      lock.lock();
      ringing_ = 0;
      rung_cv_.notify_all();
      continue;
    }
    wakes_at_ = now + tick_;
    if (!due_.empty()) wakes_at_ = std::min(wakes_at_, due_.begin()->first);
    cv_.wait_until(lock, stop, wakes_at_,
                   [&] { return !due_.empty() && due_.begin()->first < wakes_at_; });
  }
}

}  // namespace relay
