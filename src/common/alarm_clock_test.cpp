#include "common/alarm_clock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

namespace relay {
namespace {

using namespace std::chrono_literals;
using Clock = AlarmClock::Clock;

// Rings are recorded here; wait() blocks until n of them (or the deadline).
class Rings {
 public:
  std::function<void()> ring(int tag) {
    return [this, tag] {
      std::lock_guard lock(mu_);
      order_.push_back(tag);
      at_.push_back(Clock::now());
      cv_.notify_all();
    };
  }
  bool wait(std::size_t n, std::chrono::milliseconds within = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, within, [&] { return order_.size() >= n; });
  }
  std::vector<int> order() {
    std::lock_guard lock(mu_);
    return order_;
  }
  Clock::time_point at(std::size_t i) {
    std::lock_guard lock(mu_);
    return at_.at(i);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> order_;
  std::vector<Clock::time_point> at_;
};

TEST(AlarmClock, RingsAtItsTimeNotBefore) {
  AlarmClock clock;
  Rings rings;
  const auto when = Clock::now() + 50ms;
  clock.arm(when, rings.ring(1));
  ASSERT_TRUE(rings.wait(1));
  EXPECT_GE(rings.at(0), when);
}

TEST(AlarmClock, RingsInDeadlineOrderWhateverTheArmingOrder) {
  AlarmClock clock;
  Rings rings;
  const auto now = Clock::now();
  clock.arm(now + 60ms, rings.ring(3));
  clock.arm(now + 20ms, rings.ring(1));
  clock.arm(now + 40ms, rings.ring(2));
  clock.arm(now - 1s, rings.ring(0));  // passed already: at once
  ASSERT_TRUE(rings.wait(4));
  EXPECT_EQ(rings.order(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(AlarmClock, ADisarmedAlarmNeverRings) {
  AlarmClock clock;
  Rings rings;
  const auto now = Clock::now();
  auto id = clock.arm(now + 20ms, rings.ring(1));
  clock.arm(now + 40ms, rings.ring(2));
  EXPECT_TRUE(clock.disarm(id));
  ASSERT_TRUE(rings.wait(1));  // the later one rang: the earlier one's time has passed
  EXPECT_EQ(rings.order(), std::vector<int>{2});
  EXPECT_FALSE(clock.disarm(id)) << "gone already";
}

// The thread sleeps a tick at a time while nothing is due sooner; an alarm due before its
// planned wake-up must wake it. (With an hour's tick, a missed wake-up is a failed wait.)
TEST(AlarmClock, AnEarlierDeadlineWakesTheSleepingThread) {
  AlarmClock clock(std::chrono::hours(1));
  Rings rings;
  clock.arm(Clock::now() + std::chrono::minutes(30), rings.ring(2));
  clock.arm(Clock::now() + 10ms, rings.ring(1));  // the thread now sleeps until the first
  ASSERT_TRUE(rings.wait(1));
  clock.arm(Clock::now() + 10ms, rings.ring(3));  // and again, after re-planning
  ASSERT_TRUE(rings.wait(2));
  EXPECT_EQ(rings.order(), (std::vector<int>{1, 3}));
}

TEST(AlarmClock, DisarmWaitsForARingInProgress) {
  AlarmClock clock;
  std::promise<void> started, release;
  std::atomic<bool> finished{false};
  auto id = clock.arm(Clock::now(), [&] {
    started.set_value();
    release.get_future().wait();
    finished = true;
  });
  started.get_future().wait();
  std::atomic<bool> disarming{false};
  auto disarm = std::async(std::launch::async, [&] {
    disarming = true;
    const bool had_not_rung = clock.disarm(id);
    return std::make_pair(had_not_rung, finished.load());
  });
  while (!disarming) std::this_thread::yield();
  release.set_value();
  auto [had_not_rung, saw_finished] = disarm.get();
  EXPECT_FALSE(had_not_rung);
  EXPECT_TRUE(saw_finished) << "disarm returned while the ring was still running";
}

TEST(AlarmClock, ScopedAlarmDisarmsOnTheWayOut) {
  AlarmClock clock;
  Rings rings;
  { ScopedAlarm a(clock, Clock::now() + 20ms, rings.ring(1)); }
  clock.arm(Clock::now() + 40ms, rings.ring(2));
  ASSERT_TRUE(rings.wait(1));
  EXPECT_EQ(rings.order(), std::vector<int>{2});
  ScopedAlarm b(clock, Clock::now(), rings.ring(3));
  ASSERT_TRUE(rings.wait(2));
  EXPECT_FALSE(b.disarm()) << "it rang";
  EXPECT_FALSE(b.disarm()) << "once only";
}

TEST(AlarmClock, GoesAtOnceWithAlarmsStillArmed) {
  Rings rings;
  {
    AlarmClock clock;
    clock.arm(Clock::now() + std::chrono::hours(1), rings.ring(1));
  }  // (a destructor waiting for the hour would time the test out)
  EXPECT_TRUE(rings.order().empty());
}

}  // namespace
}  // namespace relay
