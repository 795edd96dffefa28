// The gateway's completion consumer (gateway/completion_consumer.hpp) against a real
// redis-server: a batch is settled in the round trip that reads the next, its follow-up runs
// within kFollowUpWait when nothing follows, and a stop never loses a batch read.

#include "gateway/completion_consumer.hpp"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

using namespace std::chrono_literals;

class Followed {
 public:
  void add(const gateway::CompletionEvent& ev) {
    std::lock_guard lock(mu_);
    ids_.insert(ev.job_id);
    ++calls_;
  }
  bool has(const std::string& id) const {
    std::lock_guard lock(mu_);
    return ids_.count(id) > 0;
  }
  int calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> ids_;
  int calls_ = 0;
};

class ConsumerTest : public RelayTest {
 protected:
  gateway::CompletionConsumerParams params(Followed& followed) {
    return {redis_.endpoint(),
            keys_,
            {model_},
            "test-consumer",
            60s,
            1h,
            [&followed](redis::Connection&, const auto& ev) { followed.add(ev); }};
  }

  // A job taken and finished by a relay: its completion entry is on the events stream.
  std::string finished_job(const std::string& tenant = "") {
    auto r = pending_job(model_);
    r.tenant = tenant;
    store_.submit(r, false);
    store_.pop(model_, 1s);
    store_.begin(model_, r.id, "tok", 5s);
    redis::Completion c;
    c.job_id = r.id;
    c.model = model_;
    c.service_type = r.service_type;
    c.status = JobStatus::completed;
    c.finished_at = wall_now();
    c.result_key = r.service_type + "/" + r.id + "/result.json";
    EXPECT_EQ(store_.finish(c, "tok"), redis::FinishOutcome::ok);
    return r.id;
  }

  // The consumer creates it too (an existing group is fine): made here, a test's reads of the
  // group do not race the consumer's thread.
  void create_group() {
    conn_.command(
        {"XGROUP", "CREATE", keys_.events(model_), gateway::kEventsGroup, "0", "MKSTREAM"});
  }

  // Entries delivered to a consumer and not yet acknowledged.
  long long pending_entries() {
    auto r = conn_.command({"XPENDING", keys_.events(model_), gateway::kEventsGroup});
    return redis::as_integer(r->element[0]);
  }

  long long reads() {
    auto info = redis::as_string(conn_.command({"INFO", "stats"}).get());
    return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
  }
};

// A batch read is settled (acknowledged, its record set to expire) by the next pass's single
// round trip, and followed up after it; with nothing new, that pass waits kFollowUpWait, not
// its whole block (20 s here).
TEST_F(ConsumerTest, ABatchIsSettledWithTheNextReadAndFollowedUpWithoutWaitingItOut) {
  Followed followed;
  gateway::CompletionConsumer consumer(params(followed));
  // (A first job loads the settle script: its first call is refused NOSCRIPT and sent whole.)
  const std::string warm = finished_job();
  consumer.pass(20s);
  consumer.pass(20s);
  ASSERT_TRUE(followed.has(warm));

  const std::string id = finished_job();
  EXPECT_EQ(consumer.pass(20s), 0);  // read, not settled yet
  EXPECT_EQ(pending_entries(), 1);
  EXPECT_FALSE(followed.has(id));

  const auto before = reads();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(consumer.pass(20s), 1);
  const auto took = std::chrono::steady_clock::now() - start;
  // The settle and the read in one round trip (the other read counted is this INFO).
  EXPECT_EQ(reads() - before, 2);
  EXPECT_TRUE(followed.has(id));
  EXPECT_EQ(pending_entries(), 0);
  EXPECT_GT(redis::as_integer(conn_.command({"PTTL", keys_.job(model_, id)}).get()), 0);
  EXPECT_LT(took, 10s);  // (kFollowUpWait: a behaviour, not a speed — the block is 20 s)
}

// Under a max_pending quota, the ended jobs' admissions are released a batch at a time, each
// tenant's in one ZREM riding with the next settle and read: no round trip of their own.
TEST_F(ConsumerTest, AdmissionsOfEndedJobsAreReleasedInTheNextRoundTrip) {
  Followed followed;
  auto p = params(followed);
  p.release_admissions = true;
  gateway::CompletionConsumer consumer(std::move(p));
  consumer.pass(100ms);  // (the group made)
  const redis::Quota quota{.max_pending = 10};
  std::vector<std::string> ids;
  for (const std::string tenant : {"acme", "acme", "globex"}) {
    ids.push_back(finished_job(tenant));
    ASSERT_EQ(store_.admit(tenant, model_, ids.back(), quota).outcome,
              redis::Admission::Outcome::ok);
  }
  const std::string other = new_job_id();  // admitted, not ended: keeps its slot
  ASSERT_EQ(store_.admit("acme", model_, other, quota).outcome, redis::Admission::Outcome::ok);
  auto admitted = [&](const std::string& tenant) {
    return redis::as_integer(conn_.command({"ZCARD", keys_.quota_admitted(tenant)}).get());
  };
  ASSERT_TRUE(wait_until(
      [&] {
        consumer.pass(200ms);
        return followed.calls() == 3;
      },
      10s));
  EXPECT_EQ(admitted("acme"), 3);  // queued for the next round trip
  const auto before = reads();
  consumer.pass(200ms);
  EXPECT_EQ(reads() - before, 2);  // that round trip (and this INFO)
  EXPECT_EQ(admitted("acme"), 1);
  EXPECT_EQ(admitted("globex"), 0);
  EXPECT_NE(conn_.command({"ZSCORE", keys_.quota_admitted("acme"), model_ + "/" + other})->type,
            REDIS_REPLY_NIL);
}

// A stopping consumer releases the admissions of the last jobs it followed up.
TEST_F(ConsumerTest, AStopReleasesTheLastBatchsAdmissions) {
  create_group();
  Followed followed;
  auto p = params(followed);
  p.release_admissions = true;
  gateway::CompletionConsumer consumer(std::move(p));
  std::jthread runner([&](std::stop_token st) { consumer.run(st); });
  const std::string id = finished_job("acme");
  ASSERT_EQ(store_.admit("acme", model_, id, {.max_pending = 10}).outcome,
            redis::Admission::Outcome::ok);
  ASSERT_TRUE(wait_until([&] { return pending_entries() == 1 || followed.has(id); }, 10s));
  runner.request_stop();
  runner.join();
  EXPECT_TRUE(followed.has(id));
  EXPECT_EQ(redis::as_integer(conn_.command({"ZCARD", keys_.quota_admitted("acme")}).get()), 0);
}

// A pass that reads new entries while it settles the previous batch keeps them for the next.
TEST_F(ConsumerTest, EntriesReadWhileABatchIsSettledAreSettledByTheNextPass) {
  Followed followed;
  gateway::CompletionConsumer consumer(params(followed));
  const std::string first = finished_job();
  consumer.pass(5s);
  const std::string second = finished_job();
  EXPECT_EQ(consumer.pass(5s), 1);  // settles the first, reads the second
  EXPECT_TRUE(followed.has(first));
  EXPECT_FALSE(followed.has(second));
  EXPECT_EQ(pending_entries(), 1);
  EXPECT_EQ(consumer.pass(5s), 1);
  EXPECT_TRUE(followed.has(second));
  EXPECT_EQ(pending_entries(), 0);
  EXPECT_EQ(followed.calls(), 2);
}

// Stopped while its last batch waits for its follow-up (the read carrying its settle is
// interrupted), the consumer settles and follows it up before run() returns: nothing is left
// pending for another replica, nothing unlogged.
TEST_F(ConsumerTest, AStopSettlesAndFollowsUpTheLastBatchRead) {
  create_group();
  for (int round = 0; round < 5; ++round) {
    Followed followed;
    gateway::CompletionConsumer consumer(params(followed));
    std::jthread runner([&](std::stop_token st) { consumer.run(st); });
    const std::string id = finished_job();
    // Delivered to the consumer: the stop comes while its follow-up waits (or just after it).
    ASSERT_TRUE(wait_until([&] { return pending_entries() == 1 || followed.has(id); }, 10s));
    runner.request_stop();
    runner.join();
    EXPECT_TRUE(followed.has(id)) << "round " << round;
    EXPECT_EQ(pending_entries(), 0) << "round " << round;
  }
}

// Entries Redis delivered to this consumer whose read reply never reached it (the stop cut the
// connection while the reply was on its way) are this consumer's pending entries: a stop
// settles and follows them up too. Here they are delivered under the consumer's name on
// another connection while its own read blocks, in one transaction with their XADD (so its
// read is not served them).
TEST_F(ConsumerTest, AStopSettlesEntriesDeliveredWhoseReplyWasLost) {
  create_group();
  Followed followed;
  gateway::CompletionConsumer consumer(params(followed));
  std::jthread runner([&](std::stop_token st) { consumer.run(st); });
  ASSERT_TRUE(wait_until(
      [&] {
        auto clients = redis::as_string(conn_.command({"CLIENT", "LIST"}).get());
        return clients.find("cmd=xreadgroup") != std::string::npos;
      },
      10s));
  auto r = pending_job(model_);
  store_.submit(r, false);
  conn_.command({"MULTI"});
  conn_.command({"XADD", keys_.events(model_), "*", "job_id", r.id, "status", "completed"});
  conn_.command({"XREADGROUP", "GROUP", gateway::kEventsGroup, "test-consumer", "COUNT", "10",
                 "STREAMS", keys_.events(model_), ">"});
  auto exec = conn_.command({"EXEC"});
  ASSERT_EQ(exec->elements, 2u);
  ASSERT_EQ(exec->element[1]->type, REDIS_REPLY_ARRAY) << "delivered in the transaction";
  EXPECT_EQ(pending_entries(), 1);
  EXPECT_FALSE(followed.has(r.id));
  runner.request_stop();
  runner.join();
  EXPECT_TRUE(followed.has(r.id));
  EXPECT_EQ(pending_entries(), 0);
  EXPECT_EQ(followed.calls(), 1);
}

// Entries left pending under this consumer's name (a previous gateway process on the same host,
// or a read whose reply a failed connection lost) are settled by its first pass, not claimed
// after claim_idle (60 s here).
TEST_F(ConsumerTest, OwnPendingEntriesAreSettledByTheFirstPass) {
  create_group();
  const std::string id = finished_job();
  conn_.command({"XREADGROUP", "GROUP", gateway::kEventsGroup, "test-consumer", "COUNT", "10",
                 "STREAMS", keys_.events(model_), ">"});
  ASSERT_EQ(pending_entries(), 1);
  Followed followed;
  gateway::CompletionConsumer consumer(params(followed));
  consumer.pass(5s);
  EXPECT_EQ(pending_entries(), 0);
  EXPECT_TRUE(followed.has(id));
  // Another consumer's pending entries are not this one's: they wait for claim_idle.
  const std::string other = finished_job();
  conn_.command({"XREADGROUP", "GROUP", gateway::kEventsGroup, "another-consumer", "COUNT", "10",
                 "STREAMS", keys_.events(model_), ">"});
  gateway::CompletionConsumer restarted(params(followed));
  restarted.pass(100ms);
  restarted.pass(100ms);
  EXPECT_FALSE(followed.has(other));
  EXPECT_EQ(pending_entries(), 1);
}

}  // namespace
}  // namespace relay::testing
