#include "common/work_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

namespace relay {
namespace {

using namespace std::chrono_literals;

// A gate that tasks wait at until it opens.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  // Until n tasks wait at the gate (or the deadline): whether they do.
  bool waiting(int n, std::chrono::milliseconds within = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, within, [&] { return waiting_ >= n; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Opens the gate on the way out, whatever failed: the pool's join waits for its tasks.
  struct Opener {
    Gate& gate;
    ~Opener() { gate.open(); }
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(WorkPoolTest, RunsEveryTaskAndJoinWaitsForThem) {
  std::atomic<int> ran{0};
  {
    WorkPool pool(4, 2);
    for (int i = 0; i < 1000; ++i) pool.post([&] { ++ran; });
    pool.join();
    EXPECT_EQ(ran.load(), 1000);
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WorkPoolTest, ShortTasksRunOnAtMostTheEagerThreadsAtATime) {
  // Tasks that never wait the lag (here: ten seconds) are run by two threads at most, however
  // many are queued at once; a plain pool would have run them on all sixteen.
  WorkPool pool(16, 2, 10s);
  std::atomic<int> active{0}, most{0}, ran{0};
  for (int i = 0; i < 2000; ++i)
    pool.post([&] {
      const int now = ++active;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      const auto until = std::chrono::steady_clock::now() + 20us;
      while (std::chrono::steady_clock::now() < until) {
      }
      --active;
      ++ran;
    });
  // (Not join() at once: a joining pool drains its queue with every thread.)
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (ran.load() < 2000 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(ran.load(), 2000);
  EXPECT_LE(most.load(), 2);
}

TEST(WorkPoolTest, TasksQueuedBehindBlockedThreadsGetMoreThreads) {
  // Both eager threads block (slow storage, a Redis failing over): the tasks behind them are
  // taken by other threads once they waited the lag, not when the blocked ones return.
  Gate gate;
  WorkPool pool(8, 2, 2ms);
  Gate::Opener opener{gate};
  pool.post([&] { gate.wait(); });
  pool.post([&] { gate.wait(); });
  ASSERT_TRUE(gate.waiting(2));
  std::promise<void> third, fourth;
  pool.post([&] { third.set_value(); });
  pool.post([&] { fourth.set_value(); });
  EXPECT_EQ(third.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(fourth.get_future().wait_for(10s), std::future_status::ready);
  gate.open();
  pool.join();
  EXPECT_GE(pool.threads_used(), 3u);
}

TEST(WorkPoolTest, EveryThreadBlockedStillQueuesAndRunsTheRestLater) {
  Gate gate;
  WorkPool pool(3, 1, 1ms);
  Gate::Opener opener{gate};
  for (int i = 0; i < 3; ++i) pool.post([&] { gate.wait(); });
  ASSERT_TRUE(gate.waiting(3));  // all three threads: the lag took the pool to its size
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) pool.post([&] { ++ran; });
  EXPECT_EQ(ran.load(), 0);  // nobody is free
  gate.open();
  pool.join();
  EXPECT_EQ(ran.load(), 10);
}

TEST(WorkPoolTest, DiscardQueuedDropsWhatHasNotStarted) {
  Gate gate;
  WorkPool pool(1, 1, 1h);  // one thread, and no monitor lag within the test
  Gate::Opener opener{gate};
  pool.post([&] { gate.wait(); });
  ASSERT_TRUE(gate.waiting(1));
  std::atomic<int> ran{0};
  auto held = std::make_shared<int>(0);  // what a dropped task holds goes with it
  for (int i = 0; i < 3; ++i) pool.post([&ran, held] { ++ran; });
  EXPECT_EQ(held.use_count(), 4);
  EXPECT_EQ(pool.discard_queued(), 3u);
  EXPECT_EQ(held.use_count(), 1);
  gate.open();
  pool.join();
  EXPECT_EQ(ran.load(), 0);
}

TEST(WorkPoolTest, AnIdleMonitorWakesAgainForTheNextBusySpell) {
  // The monitor stops ticking once nothing waits for a while; a later spell of blocked threads
  // must still be watched.
  Gate gates[2];
  WorkPool pool(4, 1, 1ms);
  Gate::Opener opener0{gates[0]}, opener1{gates[1]};
  for (int spell = 0; spell < 2; ++spell) {
    Gate& gate = gates[spell];
    pool.post([&] { gate.wait(); });
    ASSERT_TRUE(gate.waiting(1));
    std::promise<void> behind;
    pool.post([&] { behind.set_value(); });
    EXPECT_EQ(behind.get_future().wait_for(10s), std::future_status::ready) << "spell " << spell;
    gate.open();
    if (spell == 0) std::this_thread::sleep_for(200ms);  // the monitor lingers 50 ticks, then rests
  }
}

}  // namespace
}  // namespace relay
