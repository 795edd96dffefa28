#include "common/work_pool.hpp"

#include <algorithm>

#include "common/thread_name.hpp"

namespace relay {
namespace {

// How long the monitor keeps ticking once nothing waits: a pool under steady load queues and
// drains many times a second, and re-arming the monitor each time would cost the wake it saves.
constexpr int kLingerTicks = 50;

}  // namespace

WorkPool::WorkPool(std::size_t threads, std::size_t eager, std::chrono::microseconds lag,
                   std::string name)
    : eager_(std::clamp<std::size_t>(eager, 1, std::max<std::size_t>(threads, 1))),
      lag_(lag),
      workers_(std::max<std::size_t>(threads, 1)) {
  idle_.reserve(workers_.size());
  threads_.reserve(workers_.size());
  for (std::size_t i = 0; i < workers_.size(); ++i)
    threads_.emplace_back([this, i, name] {
      name_this_thread(name);
      work(i);
    });
  if (eager_ < workers_.size())
    monitor_thread_ = std::thread([this, name] {
      name_this_thread(name + "-watch");
      watch();
    });
}

WorkPool::~WorkPool() {
  join();
}

void WorkPool::post(std::function<void()> f) {
  Worker* woken = nullptr;
  bool wake_monitor = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back({std::move(f), Clock::now()});
    // A thread that finishes its task takes this one without a wake: one is woken only while
    // fewer than `eager` run. Otherwise the task waits for one of them, watched for its lag.
    if (running_ + waking_ < eager_) woken = take_idle();
    if (!woken) wake_monitor = watch_queue();
  }
  // (Notified after unlocking: a thread woken under the lock would only wait for it.)
  if (woken) woken->cv.notify_one();
  if (wake_monitor) monitor_.notify_one();
}

bool WorkPool::watch_queue() {
  if (watching_ || !monitor_thread_.joinable()) return false;
  watching_ = true;
  return true;
}

WorkPool::Worker* WorkPool::take_idle() {
  if (idle_.empty()) return nullptr;
  Worker& w = workers_[idle_.back()];
  idle_.pop_back();
  w.asleep = false;
  ++waking_;
  return &w;
}

bool WorkPool::lagging(Clock::time_point now) const {
  return !queue_.empty() && now - queue_.front().queued >= lag_;
}

bool WorkPool::may_take(Clock::time_point now) const {
  if (queue_.empty()) return false;
  return running_ < eager_ || stopping_ || lagging(now);
}

void WorkPool::work(std::size_t index) {
  Worker& me = workers_[index];
  std::unique_lock lock(mu_);
  for (;;) {
    if (may_take(Clock::now())) {
      Task t = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      me.used = true;
      lock.unlock();
      t.f();
      t.f = nullptr;  // what it holds goes now, not when the next task comes
      lock.lock();
      --running_;
      continue;
    }
    if (stopping_) return;  // (and nothing is queued)
    // Tasks left queued for the busy threads: watched, or they might wait for ever.
    if (!queue_.empty() && watch_queue()) monitor_.notify_one();
    me.asleep = true;
    idle_.push_back(index);
    me.cv.wait(lock, [&] { return !me.asleep || stopping_; });
    if (me.asleep) {  // stopping: off the stack by itself
      idle_.erase(std::find(idle_.begin(), idle_.end(), index));
      me.asleep = false;
    } else {
      --waking_;
    }
  }
}

void WorkPool::watch() {
  std::unique_lock lock(mu_);
  int quiet = 0;
  while (!stopping_) {
    if (!watching_) {
      monitor_.wait(lock);
      quiet = 0;
      continue;
    }
    if (!queue_.empty()) {
      quiet = 0;
      // The busy threads keep the oldest waiting: one more takes it (and another the next
      // tick, if the queue still lags).
      if (lagging(Clock::now()))
        if (Worker* w = take_idle()) w->cv.notify_one();
    } else if (++quiet > kLingerTicks) {
      watching_ = false;
      continue;
    }
    monitor_.wait_for(lock, lag_);
  }
}

void WorkPool::join() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& w : workers_) w.cv.notify_all();
  }
  monitor_.notify_all();
  for (auto& t : threads_) t.join();
  if (monitor_thread_.joinable()) monitor_thread_.join();
}

std::size_t WorkPool::discard_queued() {
  std::deque<Task> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(queue_);
  }
  return dropped.size();  // (destroyed here, outside the lock)
}

std::size_t WorkPool::threads_used() const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.used; }));
}

}  // namespace relay
