#pragma once
// A pool of threads for blocking work (the gateway's request handlers and storage writes) that
// wakes as few of them as the work needs. A plain pool (asio::thread_pool) wakes a sleeping
// thread for every task posted while one sleeps: with 16 threads and short tasks — a small
// submission's storage write, a status read — nearly every request paid a futex wake and two
// context switches, a quarter of the gateway's CPU per request on 2 cores (issue 14).
//
// Here at most `eager` threads (the cores) are woken to run tasks; a thread that finishes one
// takes the next queued without sleeping. The rest join in when the oldest queued task has
// waited `lag` for the busy ones — work that blocks (slow storage, a Redis round trip in cluster
// mode, a Redis failing over) or a backlog — one more per `lag`, up to `threads`. So fast work
// runs on few, hot threads and slow work still gets them all, without anyone configuring which
// is which. (Waiting for "no task started or ended for `lag`" instead spared a saturated CPU a
// few switches, but left round trips of a few hundred µs to the eager threads alone: cluster
// submissions fell to 0.57 of standalone.) Idle threads are woken last-in, first-out: the one
// woken slept least, its cache still warm. The lag is watched by a monitor thread that ticks
// (every `lag`) only while tasks queue behind busy threads, and a while after (so that a busy
// pool does not wake it per task).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace relay {

class WorkPool {
 public:
  using Clock = std::chrono::steady_clock;

  // eager: how many threads run tasks before any has waited `lag` (at least 1, at most threads).
  // name: its threads' (name_this_thread).
  WorkPool(std::size_t threads, std::size_t eager,
           std::chrono::microseconds lag = std::chrono::milliseconds(1), std::string name = "pool");
  ~WorkPool();  // join()
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Runs f on one of the threads. f must not throw (what it throws ends the process).
  void post(std::function<void()> f);
  // Runs what is queued (on every thread), then stops the threads. Posting afterwards is a bug.
  void join();
  // Drops the tasks not started yet (what they hold is destroyed on this thread); returns how
  // many. For a shutdown past its deadline: the work queued then is for connections just cut.
  std::size_t discard_queued();

  // Threads that ran a task at least once: how far beyond `eager` the work took the pool.
  std::size_t threads_used() const;

 private:
  struct Task {
    std::function<void()> f;
    Clock::time_point queued;
  };
  struct Worker {
    std::condition_variable cv;
    bool asleep = false;  // on the idle stack
    bool used = false;    // ran a task once
  };
  void work(std::size_t index);
  void watch();
  bool may_take(Clock::time_point now) const;  // (mu_ held)
  bool lagging(Clock::time_point now) const;   // (mu_ held) the oldest queued waited lag
  bool watch_queue();   // (mu_ held) arms the lag monitor: whether it must be notified
  Worker* take_idle();  // (mu_ held) the thread that slept least, marked awake; to notify

  const std::size_t eager_;
  const std::chrono::microseconds lag_;
  mutable std::mutex mu_;
  std::condition_variable monitor_;  // the lag monitor's
  std::deque<Task> queue_;
  std::size_t running_ = 0;
  std::size_t waking_ = 0;  // woken, not yet running: a burst of posts wakes no more than eager
  std::vector<std::size_t> idle_;  // asleep, the last to sleep on top
  bool watching_ = false;          // the monitor ticks
  bool stopping_ = false;
  std::vector<Worker> workers_;
  std::vector<std::thread> threads_;  // last: started once the rest exists
  std::thread monitor_thread_;
};

}  // namespace relay
