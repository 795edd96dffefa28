#include "redis/batcher.hpp"

#include <future>

#include "common/thread_name.hpp"

namespace relay::redis {

Batcher::Batcher(Endpoint ep, std::int64_t wait_replicas, std::chrono::milliseconds patience)
    : lone_writes_(ep.cluster_seeds.empty()),
      conn_(std::move(ep)),
      wait_replicas_(wait_replicas),
      patience_(patience),
      thread_([this](std::stop_token st) {
        name_this_thread("redis-batcher");
        run(st);
      }) {}

Batcher::~Batcher() {
  thread_.request_stop();
  thread_.join();
}

std::vector<Reply> Batcher::pipeline(std::vector<Connection::Call> calls) {
  std::promise<std::vector<Reply>> promise;
  auto done = promise.get_future();
  submit(std::move(calls), [&promise](Outcome o) {
    if (o.error)
      promise.set_exception(o.error);
    else
      promise.set_value(std::move(o.replies));
  });
  return done.get();
}

void Batcher::submit(std::vector<Connection::Call> calls, Callback done) {
  std::unique_lock lock(mu_);
  queue_.push_back({std::move(calls), std::move(done)});
  // A lone step on a quiet connection is written by its caller: handing it to the batching
  // thread first would add that thread's wake-up to its way, and there is nothing to batch it
  // with (at 100 jobs/s the p50 from submission to a job's end fell ~0.1 ms of ~2.4, issue 14).
  // The batching thread, woken meanwhile, reads the reply: no caller waits on Redis. Only when
  // no batch went out for kQuiet, on an open connection (opening one is a round trip) and
  // outside cluster mode (where a batch spanning nodes runs in send()).
  if (lone_writes_ && !busy_ && queue_.size() == 1 && Clock::now() - last_sent_ >= kQuiet) {
    if (Connection* conn = conn_.if_open()) {
      busy_ = true;
      std::vector<Item> lone;
      lone.swap(queue_);
      lock.unlock();
      try {
        send(*conn, lone);
      } catch (...) {
        fail(lone, std::current_exception());  // (on this thread: its callback is quick)
        lock.lock();
        busy_ = false;
        lock.unlock();
        cv_.notify_one();  // (what queued meanwhile)
        return;
      }
      lock.lock();
      sent_ = std::move(lone);
    }
  }
  lock.unlock();
  cv_.notify_one();
}

void Batcher::run(std::stop_token stop) {
  for (;;) {
    std::vector<Item> batch;
    bool written = false;
    {
      std::unique_lock lock(mu_);
      auto ready = [this] { return !sent_.empty() || (!queue_.empty() && !busy_); };
      cv_.wait(lock, stop, ready);
      // Stopping: what is queued or written still goes, after a caller's write in progress.
      while (!ready()) {
        if (queue_.empty() && !busy_) return;
        cv_.wait(lock, [&] { return ready() || (queue_.empty() && !busy_); });
      }
      if (!sent_.empty()) {
        batch.swap(sent_);  // (busy_ stays set: its replies are on the connection)
        written = true;
      } else {
        batch.swap(queue_);
        busy_ = true;
      }
    }
    bool failed = false;
    if (!written) try {
        send(before_sending([&]() -> Connection& { return conn_.get(wait_for(batch)); }), batch);
      } catch (...) {
        fail(batch, std::current_exception());
        failed = true;
      }
    if (!failed) receive(batch);
    std::lock_guard lock(mu_);
    busy_ = false;
    last_sent_ = Clock::now();
  }
}

std::chrono::milliseconds Batcher::wait_for(const std::vector<Item>& batch) const {
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - batch.front().queued);
  // (In whole seconds: the same from one batch to the next, no system call to set it again.)
  return std::max<std::chrono::milliseconds>(
      kLeastReadWait, std::chrono::ceil<std::chrono::seconds>(patience_ - waited));
}

void Batcher::send(Connection& conn, std::vector<Item>& batch) {
  std::vector<Connection::Call> all;
  // (Each item's calls are moved out, not erased: its calls.size() still counts its replies.)
  for (auto& item : batch)
    for (auto& call : item.calls) all.push_back(std::move(call));
  if (wait_replicas_ > 0)
    all.push_back({nullptr, {}, {"WAIT", std::to_string(wait_replicas_), "1000"}});
  conn.set_read_timeout(wait_for(batch));  // (a system call only when it changes)
  conn.send(std::move(all));
}

void Batcher::fail(std::vector<Item>& batch, std::exception_ptr error) {
  conn_.reset();
  for (auto& item : batch) item.done({{}, error, item.queued});
}

void Batcher::receive(std::vector<Item>& batch) {
  std::vector<Reply> replies;
  try {
    replies = conn_.get().receive(/*checked=*/false);
  } catch (...) {
    fail(batch, std::current_exception());
    return;
  }
  std::exception_ptr replicas;
  if (wait_replicas_ > 0) {
    const auto& r = replies.back();
    const long long acks = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    if (acks < wait_replicas_)
      replicas =
          std::make_exception_ptr(IoError("redis: the write reached " + std::to_string(acks) +
                                          " of " + std::to_string(wait_replicas_) + " replicas"));
  }
  std::size_t at = 0;
  bool reconnect = false;
  for (auto& item : batch) {
    Outcome o{{}, {}, item.queued};
    for (std::size_t n = 0; n < item.calls.size(); ++n)
      o.replies.push_back(std::move(replies[at++]));
    try {
      for (const auto& r : o.replies) throw_if_error(r.get());
      if (replicas) std::rethrow_exception(replicas);
    } catch (const TransientError& e) {
      reconnect = reconnect || e.new_connection();  // a demoted master: find the new one
      o = {{}, std::current_exception(), item.queued};
    } catch (...) {
      o = {{}, std::current_exception(), item.queued};
    }
    item.done(std::move(o));
  }
  if (reconnect) conn_.reset();
}

}  // namespace relay::redis
