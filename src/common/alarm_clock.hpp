#pragma once
// Deadlines served by one thread for the life of its owner, instead of a thread per deadline.
// A relay arms one for each timed request to the model and one for each job with a timeout: a
// thread started and joined per job cost about as much CPU as the rest of a fast job.
//
// Arming does not wake the thread unless the new deadline comes before the thread's next
// wake-up, and that is at most a tick (a second) away: deadlines further out than the tick (the
// usual timeouts) cost no context switch at all, and a disarmed one costs at most one late wake-up.
// The thread starts with the first arm: an owner that never arms one never starts it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace relay {

class AlarmClock {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;
  // How long the thread sleeps when nothing is due sooner (its only cost while idle).
  static constexpr std::chrono::milliseconds kTick{1000};

  explicit AlarmClock(std::chrono::milliseconds tick = kTick) : tick_(tick) {}
  ~AlarmClock();
  AlarmClock(const AlarmClock&) = delete;
  AlarmClock& operator=(const AlarmClock&) = delete;

  // Calls ring on the clock's thread at `when` (at once if it has passed), unless disarmed
  // first. ring must not throw, nor arm or disarm on this clock. Alarms still armed when the
  // clock goes never ring.
  Id arm(Clock::time_point when, std::function<void()> ring);
  // After this returns, the alarm's ring is not running and never will: true if it had not
  // rung, false if it rang (waiting for a ring in progress to end).
  bool disarm(Id id);

 private:
  void run(std::stop_token stop);

  const std::chrono::milliseconds tick_;
  std::mutex mu_;
  std::condition_variable_any cv_;   // the thread's sleep
  std::condition_variable rung_cv_;  // a ring ended (for disarm)
  std::multimap<Clock::time_point, std::pair<Id, std::function<void()>>> due_;
  Clock::time_point wakes_at_ = Clock::time_point::max();  // the thread's planned wake-up
  Id next_id_ = 1, ringing_ = 0;
  std::jthread thread_;  // last: stopped and joined before the rest goes
};

// An armed alarm for the scope that holds it: disarmed on the way out (whatever happens).
class ScopedAlarm {
 public:
  ScopedAlarm(AlarmClock& clock, AlarmClock::Clock::time_point when, std::function<void()> ring)
      : clock_(&clock), id_(clock.arm(when, std::move(ring))) {}
  ~ScopedAlarm() { disarm(); }
  ScopedAlarm(const ScopedAlarm&) = delete;
  ScopedAlarm& operator=(const ScopedAlarm&) = delete;
  // True if it had not rung; later calls do nothing and return false.
  bool disarm() {
    if (!clock_) return false;
    return std::exchange(clock_, nullptr)->disarm(id_);
  }

 private:
  AlarmClock* clock_ = nullptr;
  AlarmClock::Id id_ = 0;
};

}  // namespace relay
