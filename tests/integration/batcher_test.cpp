// Group commit (redis/batcher.hpp) against a real redis-server: many threads' steps share round
// trips, each caller gets exactly its own outcome, and a lost connection fails only the batch
// in flight.

#include "redis/batcher.hpp"

#include <atomic>
#include <future>
#include <optional>
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

// At light load a step has nothing to share a round trip with: its caller sends it, saving it
// the batching thread's wake-up. A step that comes meanwhile queues, and the batching thread
// sends it once the lone one is done.
TEST_F(BatcherTest, ALoneStepIsSentByItsCallerAndWhatQueuesBehindItStillGoes) {
  redis::Batcher batcher(redis_.endpoint(), 0);  // nothing sent yet: quiet
  const auto caller = std::this_thread::get_id();
  auto first = job_for(model_), second = job_for(model_);
  std::optional<std::thread::id> first_on;
  std::promise<std::thread::id> second_on;
  auto second_done = second_on.get_future();
  std::atomic<bool> queued{false};
  std::thread other;
  batcher.submit(store_.submit_calls(first, false, std::chrono::hours(1)), [&](auto o) {
    EXPECT_FALSE(o.error);
    first_on = std::this_thread::get_id();
    // While this step holds the connection, another caller's step comes.
    other = std::thread([&] {
      batcher.submit(store_.submit_calls(second, false, std::chrono::hours(1)), [&](auto o2) {
        EXPECT_FALSE(o2.error);
        second_on.set_value(std::this_thread::get_id());
      });
      queued = true;
    });
    EXPECT_TRUE(wait_until([&] { return queued.load(); }, 10s));
  });
  ASSERT_TRUE(first_on) << "a lone step's outcome is in before submit returns";
  EXPECT_EQ(*first_on, caller);
  ASSERT_EQ(second_done.wait_for(10s), std::future_status::ready);
  const auto other_id = other.get_id();
  other.join();
  const auto second_thread = second_done.get();
  EXPECT_NE(second_thread, caller);
  EXPECT_NE(second_thread, other_id) << "queued behind a lone step: the batching thread's";
  EXPECT_EQ(status(first.id), "pending");
  EXPECT_EQ(status(second.id), "pending");
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
