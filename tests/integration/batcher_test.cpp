// Group commit (redis/batcher.hpp) against a real redis-server: many threads' steps share round
// trips, each caller gets exactly its own outcome, and a lost connection fails only the batch
// in flight.

#include "redis/batcher.hpp"

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "common/job_id.hpp"
#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

using BatcherTest = RelayTest;

JobRecord job_for(const std::string& model) {
  JobRecord r = pending_job(model);
  r.tenant = "t1";
  r.created_at = wall_now();  // listed: the index drops entries older than the retention
  return r;
}

long long reads(redis::Connection& c) {
  auto info = redis::as_string(c.command({"INFO", "stats"}).get());
  return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
}

// (In cluster mode too: a batch's submissions and their tenant's listing entries live on
// several nodes, each node's share in one write.)
TEST_F(BatcherTest, ConcurrentSubmitsShareRoundTripsAndEachGetsItsOwnOutcome) {
  redis::Batcher batcher(redis_.endpoint(), 0);
  constexpr int kThreads = 16, kEach = 50;
  const auto before = reads(conn_);
  std::vector<std::vector<std::string>> ids(kThreads);
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto r = job_for(model_);
        if (redis::JobStore::submitted(
                batcher.pipeline(store_.submit_calls(r, false, std::chrono::hours(1)))))
          ++created;
        ids[t].push_back(r.id);
      }
    });
  for (auto& t : threads) t.join();
  const auto after = reads(conn_);
  EXPECT_EQ(created.load(), kThreads * kEach);
  std::set<std::string> pending;
  for (auto& id : list(keys_.pending(model_))) pending.insert(id);
  for (const auto& per : ids)
    for (const auto& id : per) {
      EXPECT_TRUE(pending.count(id)) << id;
      EXPECT_EQ(status(id), "pending");
    }
  EXPECT_EQ(redis::as_integer(conn_.command({"ZCARD", keys_.tenant_jobs("t1")}).get()),
            kThreads * kEach)
      << "each submit's listing entry, in its own batch";
  // 800 submits of three commands each: with 16 callers at once, far fewer reads than submits
  // (not asserted more tightly: how many share a batch depends on the scheduler). (In cluster
  // mode INFO answers for one node.)
  EXPECT_LT(after - before, kThreads * kEach);
  // A duplicate id is its caller's outcome alone.
  auto dup = job_for(model_);
  dup.id = ids[0][0];
  EXPECT_FALSE(redis::JobStore::submitted(
      batcher.pipeline(store_.submit_calls(dup, false, std::chrono::hours(1)))));
}

// At light load a step has nothing to share a round trip with: its caller writes it (sparing
// it the batching thread's wake-up) and returns, and the batching thread reads the reply — so
// no caller waits on Redis, even a stalled one. With writes paused, a lone step's submit
// returns at once; a step that comes meanwhile queues and goes out after it; both outcomes come
// on the batching thread once the pause ends.
TEST_F(BatcherTest, ALoneStepIsWrittenAndNoCallerWaitsForItsReply) {
  if (redis_.cluster()) GTEST_SKIP() << "CLIENT PAUSE is per node";
  redis::Batcher batcher(redis_.endpoint(), 0);
  // The batcher's connection opened by a first step (a lone write needs an open one).
  batcher.pipeline(store_.submit_calls(job_for(model_), false, std::chrono::hours(1)));
  std::this_thread::sleep_for(5ms);  // quiet: no batch for its 1 ms
  conn_.command({"CLIENT", "PAUSE", "1500", "WRITE"});
  const auto caller = std::this_thread::get_id();
  auto first = job_for(model_), second = job_for(model_);
  std::promise<std::thread::id> first_on, second_on;
  auto first_done = first_on.get_future(), second_done = second_on.get_future();
  const auto t0 = std::chrono::steady_clock::now();
  batcher.submit(store_.submit_calls(first, false, std::chrono::hours(1)), [&](auto o) {
    EXPECT_FALSE(o.error);
    first_on.set_value(std::this_thread::get_id());
  });
  batcher.submit(store_.submit_calls(second, false, std::chrono::hours(1)), [&](auto o) {
    EXPECT_FALSE(o.error);
    second_on.set_value(std::this_thread::get_id());
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms) << "a caller waited on Redis";
  EXPECT_EQ(first_done.wait_for(0s), std::future_status::timeout) << "done during the pause";
  ASSERT_EQ(first_done.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(second_done.wait_for(10s), std::future_status::ready);
  EXPECT_NE(first_done.get(), caller);
  EXPECT_NE(second_done.get(), caller);
  EXPECT_EQ(status(first.id), "pending");
  EXPECT_EQ(status(second.id), "pending");
  EXPECT_EQ(list(keys_.pending(model_)).back(), second.id) << "in the order they came";
}

TEST_F(BatcherTest, AnErrorReplyIsThrownToItsCallerOnly) {
  redis::Batcher batcher(redis_.endpoint(), 0);
  conn_.command({"SET", "a-string", "x"});
  std::atomic<int> bad{0}, good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        try {
          // Odd threads send a command that fails (LPUSH on a string); even ones a good one.
          auto replies = batcher.pipeline(
              {{nullptr, {}, {t % 2 ? "LPUSH" : "INCR", t % 2 ? "a-string" : "counter", "v"}}});
          if (t % 2 == 0) ADD_FAILURE() << "INCR with a value is an error too";
        } catch (const redis::ReplyError&) {
          ++bad;
        }
        try {
          batcher.pipeline({{nullptr, {}, {"INCR", "counter"}}});
          ++good;
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 160);
  EXPECT_EQ(good.load(), 160);
  EXPECT_EQ(redis::as_string(conn_.command({"GET", "counter"}).get()), "160");
}

TEST_F(BatcherTest, ALostConnectionFailsTheBatchAndTheNextOneReconnects) {
  if (redis_.cluster()) GTEST_SKIP() << "kills and WAIT are per node: standalone only";
  redis::Batcher batcher(redis_.endpoint(), 0);
  batcher.pipeline({{nullptr, {}, {"PING"}}});
  // The server closes every client's connection, the batcher's included.
  conn_.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  try {
    batcher.pipeline({{nullptr, {}, {"PING"}}});
  } catch (const redis::IoError&) {
    // Either outcome is right: a stale idle connection is usually replaced before use.
  }
  auto replies = batcher.pipeline({{nullptr, {}, {"INCR", "after"}}});
  EXPECT_EQ(redis::as_integer(replies[0].get()), 1);
  // A Redis that is down: an IoError, not a hang.
  redis_.stop();
  EXPECT_THROW(batcher.pipeline({{nullptr, {}, {"PING"}}}), redis::IoError);
  redis_.start();
}

TEST_F(BatcherTest, WithWaitReplicasEachBatchEndsWithOneWait) {
  if (redis_.cluster()) GTEST_SKIP() << "kills and WAIT are per node: standalone only";
  // No replica here: every batch's WAIT gets 0 acks, so each caller gets the IoError a submit
  // retries — after the write itself ran.
  redis::Batcher batcher(redis_.endpoint(), 1);
  EXPECT_THROW(batcher.pipeline({{nullptr, {}, {"INCR", "w"}}}), redis::IoError);
  EXPECT_EQ(redis::as_string(conn_.command({"GET", "w"}).get()), "1");
}

}  // namespace
}  // namespace relay::testing
