#pragma once
// Group commit for one kind of step that many threads run at once (the gateway's submits): each
// caller's calls go out with every other caller's waiting at that moment, in one write on one
// connection, and the replies come back together. A batch is sent while the previous one's
// replies are awaited, so the busier the gateway, the more steps share a round trip — where
// each request made its own round trip on its own connection before (issue 14: Redis's cost
// per job was mostly one read and one write per round trip).
//
// A caller gets exactly what Connection::pipeline would give it: its replies, its first error
// reply thrown, or the batch's IoError (its calls may or may not have run — the usual rule: only
// steps safe to repeat are retried; NotSent when no connection could be made: they did not). With
// wait_replicas, one WAIT ends each batch and covers every write in it. pipeline() blocks its
// thread until then; submit() does not: its callback gets the outcome on the batching thread (the
// gateway resumes a request's coroutine with it, so that no thread waits on a submit's round trip).
// A lone step on a quiet connection (no batch for kQuiet, nothing queued) is written by its caller,
// and its reply read by the batching thread: that saves the step the batching thread's wake-up
// before it goes out when there is nothing to batch it with, and under load never happens. In
// cluster mode a batch goes to each node it touches in one write per node (with wait_replicas, not
// at all: one WAIT could not cover several nodes' writes; steps then go to their nodes alone).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "redis/connection.hpp"

namespace relay::redis {

class Batcher {
 public:
  // patience: how long a caller waits for its replies, counted from its submit (time queued
  // behind a batch included; at least kLeastReadWait for its own batch's connect and replies)
  // before its batch fails as on a broken connection: a Redis that stops answering without
  // closing the connection is given up on when the callers would give up.
  Batcher(Endpoint ep, std::int64_t wait_replicas,
          std::chrono::milliseconds patience = kReadTimeout);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // What a caller gets: its replies, or why it has none (then `replies` is empty).
  struct Outcome {
    std::vector<Reply> replies;
    std::exception_ptr error;
    // When the calls were handed in: a caller that tries its step again after an error counts
    // its patience from then (the batch's wait was part of it).
    std::chrono::steady_clock::time_point queued;
  };
  using Callback = std::function<void(Outcome)>;

  std::vector<Reply> pipeline(std::vector<Connection::Call> calls);
  // Queues the calls (or writes them, when alone) and returns; `done` is called once, on the
  // batching thread (or on this one, before submit returns, when a lone step's write failed),
  // and must be quick (hand the outcome on). Queued calls are sent even while the batcher is
  // destroyed.
  void submit(std::vector<Connection::Call> calls, Callback done);

 private:
  struct Item {
    std::vector<Connection::Call> calls;
    Callback done;
    std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now();
  };
  // What is left of the patience of a batch's first (oldest) caller.
  std::chrono::milliseconds wait_for(const std::vector<Item>& batch) const;
  void run(std::stop_token stop);
  // A batch's calls in one write (with wait_replicas, a WAIT after them); throws IoError.
  void send(Connection& conn, std::vector<Item>& batch);
  // Reads a written batch's replies and hands each caller its outcome.
  void receive(std::vector<Item>& batch);
  // Hands each caller the batch's failure; the connection is opened again for the next one.
  void fail(std::vector<Item>& batch, std::exception_ptr error);

  using Clock = std::chrono::steady_clock;
  // How long no batch must have gone out for a lone step to be written by its caller: at 1,000
  // steps a second and more they all go through the batching thread.
  static constexpr auto kQuiet = std::chrono::milliseconds(1);

  const bool lone_writes_;  // not in cluster mode
  LazyConnection conn_;     // used by whoever set busy_
  const std::int64_t wait_replicas_;
  const std::chrono::milliseconds patience_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::vector<Item> queue_;
  std::vector<Item> sent_;         // a lone step its caller wrote: its replies are to be read
  bool busy_ = false;              // a batch (or a caller's lone step) is out on conn_
  Clock::time_point last_sent_{};  // when the last one's replies were in
  std::jthread thread_;            // last: started once the rest exists
};

}  // namespace relay::redis
