// The Lua steps of SPEC §4 against a real redis-server: fencing by lease token, terminal states
// that never change, and the atomic submit.

#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "common/job_id.hpp"
#include "redis/schedules.hpp"
#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

using JobStoreTest = RelayTest;

// The reads Redis made so far (INFO's total_reads_processed) on the node holding key: the round
// trips made to it, each count adding one for its own INFO.
class ReadCounter {
 public:
  ReadCounter(RedisServer& redis, const std::string& key)
      : node_(redis.cluster() ? redis::Connection::open(
                                    redis.node_endpoint(redis.node_of_slot(redis::key_slot(key))))
                              : redis.connect()) {}
  long long operator()() {
    auto info = redis::as_string(node_.command({"INFO", "stats"}).get());
    return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
  }

 private:
  redis::Connection node_;
};

// The relay's last step for r.
redis::Completion ending(const JobRecord& r, JobStatus status) {
  redis::Completion c;
  c.job_id = r.id;
  c.model = r.model;
  c.service_type = r.service_type;
  c.status = status;
  c.finished_at = *parse_rfc3339("2026-11-30T00:00:01.000Z");
  c.result_key = "x";
  c.error_code = "x";
  return c;
}

TEST_F(JobStoreTest, SubmitWritesRecordAndQueueTogetherAndRefusesADuplicateId) {
  auto r = pending_job(model_);
  ASSERT_TRUE(store_.submit(r, false));
  EXPECT_EQ(list(keys_.pending(model_)), std::vector<std::string>{r.id});
  EXPECT_EQ(status(r.id), "pending");
  r.status = JobStatus::completed;
  EXPECT_FALSE(store_.submit(r, false));
  EXPECT_EQ(status(r.id), "pending") << "a duplicate id changes nothing";
  EXPECT_EQ(list(keys_.pending(model_)).size(), 1u);
}

TEST_F(JobStoreTest, BeginTakesLeaseAndMarksProcessing) {
  auto r = pending_job(model_);
  store_.submit(r, false);
  ASSERT_EQ(store_.pop(model_, 1s), r.id);
  auto b = store_.begin(model_, r.id, "tok-1", 5s);
  ASSERT_EQ(b.outcome, redis::BeginOutcome::ok);
  EXPECT_EQ(b.record.status, JobStatus::processing);
  EXPECT_EQ(b.record.holder, "tok-1");
  EXPECT_EQ(redis::as_string(conn_.command({"GET", keys_.lease(model_, r.id)}).get()), "tok-1");
  auto ttl = redis::as_integer(conn_.command({"PTTL", keys_.lease(model_, r.id)}).get());
  EXPECT_GT(ttl, 4000);
  EXPECT_LE(ttl, 5000);
  // The record is read by an HGETALL behind the script; with the script cache emptied (a
  // restarted Redis), the script is refused and sent again after the read: the record returned
  // is still the one begin wrote.
  for (const bool flushed : {false, true}) {
    auto next = pending_job(model_);
    store_.submit(next, false);
    ASSERT_EQ(store_.pop(model_, 1s), next.id);
    if (flushed) conn_.command({"SCRIPT", "FLUSH"});
    auto begun = store_.begin(model_, next.id, "tok-2", 5s);
    ASSERT_EQ(begun.outcome, redis::BeginOutcome::ok);
    const auto stored = store_.get(model_, next.id);
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(begun.record.status, JobStatus::processing) << flushed;
    EXPECT_EQ(begun.record.holder, "tok-2") << flushed;
    EXPECT_EQ(begun.record.started_at, stored->started_at) << flushed;
    EXPECT_EQ(begun.record.id, next.id);
    EXPECT_EQ(begun.record.input_key, next.input_key);
  }
}

TEST_F(JobStoreTest, PopTimesOutWithNothing) {
  EXPECT_EQ(store_.pop(model_, 100ms), std::nullopt);
}

TEST_F(JobStoreTest, HeartbeatExtendsOnlyItsOwnLease) {
  auto r = pending_job(model_);
  store_.submit(r, false);
  store_.pop(model_, 1s);
  store_.begin(model_, r.id, "mine", 1s);
  auto hb = store_.heartbeat(model_, r.id, "mine", 10s);
  EXPECT_TRUE(hb.held);
  EXPECT_FALSE(hb.cancel_requested);
  EXPECT_GT(redis::as_integer(conn_.command({"PTTL", keys_.lease(model_, r.id)}).get()), 5000);
  EXPECT_FALSE(store_.heartbeat(model_, r.id, "someone-else", 10s).held);
  conn_.command({"HSET", keys_.job(model_, r.id), "cancel_requested", "1"});
  EXPECT_TRUE(store_.heartbeat(model_, r.id, "mine", 10s).cancel_requested);
}

TEST_F(JobStoreTest, FinishWithAStaleTokenWritesNothing) {
  auto r = pending_job(model_);
  store_.submit(r, false);
  store_.pop(model_, 1s);
  store_.begin(model_, r.id, "old-holder", 5s);
  // The job was reaped and taken by another relay.
  conn_.command({"SET", keys_.lease(model_, r.id), "new-holder"});
  auto out = store_.finish(ending(r, JobStatus::completed), "old-holder");
  EXPECT_EQ(out, redis::FinishOutcome::lease_lost);
  EXPECT_EQ(status(r.id), "processing");
  EXPECT_TRUE(record(r.id).result_key.empty());
  EXPECT_EQ(events_count(), 0);
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{r.id});
  EXPECT_EQ(redis::as_string(conn_.command({"GET", keys_.lease(model_, r.id)}).get()),
            "new-holder");
}

TEST_F(JobStoreTest, TerminalStatesNeverChange) {
  auto r = pending_job(model_);
  store_.submit(r, false);
  store_.pop(model_, 1s);
  store_.begin(model_, r.id, "tok", 5s);
  const auto first = ending(r, JobStatus::completed);
  ASSERT_EQ(store_.finish(first, "tok"), redis::FinishOutcome::ok);
  EXPECT_EQ(events_count(), 1);
  // A late duplicate of the last step, a late give-back and a late begin: all no-ops.
  conn_.command({"SET", keys_.lease(model_, r.id), "tok"});
  auto late = ending(r, JobStatus::failed);
  late.finished_at += std::chrono::seconds(1);
  EXPECT_EQ(store_.finish(late, "tok"), redis::FinishOutcome::terminal);
  EXPECT_FALSE(store_.give_back(model_, r.id, "tok"));
  conn_.command({"RPUSH", keys_.processing(model_), r.id});
  EXPECT_EQ(store_.begin(model_, r.id, "tok2", 5s).outcome, redis::BeginOutcome::terminal);
  auto rec = record(r.id);
  EXPECT_EQ(rec.status, JobStatus::completed);
  EXPECT_EQ(rec.finished_at, first.finished_at);
  EXPECT_EQ(rec.holder, "tok");
  EXPECT_EQ(events_count(), 1);
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
}

TEST_F(JobStoreTest, GiveBackPutsTheJobAtTheFrontAndDropsTheLease) {
  auto a = pending_job(model_), b = pending_job(model_);
  store_.submit(a, false);
  store_.submit(b, false);
  store_.pop(model_, 1s);
  store_.begin(model_, a.id, "tok", 5s);
  EXPECT_FALSE(store_.give_back(model_, a.id, "not-mine"));
  EXPECT_TRUE(store_.give_back(model_, a.id, "tok"));
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{a.id, b.id}));
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_FALSE(exists(keys_.lease(model_, a.id)));
  EXPECT_EQ(status(a.id), "pending");
}

// Pausing puts pending's jobs ahead of any already held; resuming puts the held jobs ahead of any
// that reached pending meanwhile (an older binary's). With both lists holding jobs, pause.lua
// moves the shorter one's entries onto the longer and renames: the order is the same whichever
// is longer.
TEST_F(JobStoreTest, PauseAndResumeKeepTheOrderWhicheverListIsLonger) {
  auto ids = [](const std::string& name, int n) {
    std::vector<std::string> v;
    for (int i = 0; i < n; ++i) v.push_back(name + std::to_string(i));
    return v;
  };
  auto push = [&](const std::string& key, const std::vector<std::string>& v) {
    if (v.empty()) return;
    std::vector<std::string> cmd{"RPUSH", key};
    cmd.insert(cmd.end(), v.begin(), v.end());
    conn_.command(cmd);
  };
  auto cat = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::string pending = keys_.pending(model_), held = keys_.held(model_);
  // (jobs in pending, in held, then in pending while paused)
  const std::tuple<int, int, int> cases[] = {{0, 0, 0}, {3, 0, 0}, {0, 3, 0}, {2, 5, 1},
                                             {5, 2, 9}, {4, 4, 4}, {1, 0, 6}};
  for (auto [np, nh, nlate] : cases) {
    SCOPED_TRACE(std::to_string(np) + " " + std::to_string(nh) + " " + std::to_string(nlate));
    conn_.command({"DEL", pending, held});
    const auto p = ids("p", np), h = ids("h", nh), late = ids("late", nlate);
    push(pending, p);
    push(held, h);
    EXPECT_EQ(store_.set_paused(model_, true), np);
    EXPECT_TRUE(list(pending).empty());
    EXPECT_EQ(list(held), cat(p, h));
    push(pending, late);
    EXPECT_EQ(store_.set_paused(model_, false), np + nh);
    EXPECT_EQ(list(pending), cat(cat(p, h), late));
    EXPECT_TRUE(list(held).empty());
    EXPECT_FALSE(exists(keys_.paused(model_)));
  }
  // A long held list and a few late arrivals: the few move (until 2026-12-07 the long list did,
  // one entry at a time).
  auto node = redis_.cluster() ? redis::Connection::open(redis_.node_endpoint(
                                     redis_.node_of_slot(redis::key_slot(held))))
                               : redis_.connect();
  auto moves = [&] {
    const auto info = redis::as_string(node.command({"INFO", "commandstats"}).get());
    long long n = 0;
    for (std::string cmd : {"cmdstat_lmove:calls=", "cmdstat_rpoplpush:calls="})
      if (auto at = info.find(cmd); at != std::string::npos)
        n += std::stoll(info.substr(at + cmd.size()));
    return n;
  };
  conn_.command({"DEL", pending, held});
  ASSERT_EQ(store_.set_paused(model_, true), 0);
  const auto h = ids("h", 2000), late = ids("late", 3);
  push(held, h);
  push(pending, late);
  const long long before = moves();
  EXPECT_EQ(store_.set_paused(model_, false), 2000);
  EXPECT_EQ(list(pending), cat(h, late));
  EXPECT_LE(moves() - before, 3);
}

TEST_F(JobStoreTest, ScriptsSurviveARedisRestart) {
  // EVALSHA meets an empty script cache after a restart; the NOSCRIPT fallback loads it.
  auto r = pending_job(model_);
  store_.submit(r, false);
  conn_.command({"SCRIPT", "FLUSH"});
  auto r2 = pending_job(model_);
  EXPECT_TRUE(store_.submit(r2, false));
}

TEST_F(JobStoreTest, HashTagKeysWorkForEveryStep) {
  redis::Keys tagged("pfx:", true);
  redis::JobStore store(conn_, tagged);
  auto r = pending_job(model_);
  ASSERT_TRUE(store.submit(r, true));
  EXPECT_TRUE(exists("pfx:job:{m1}:" + r.id));
  ASSERT_EQ(store.pop(model_, 1s), r.id);
  ASSERT_EQ(store.begin(model_, r.id, "t", 5s).outcome, redis::BeginOutcome::ok);
  EXPECT_TRUE(exists("pfx:relay:{m1}:lease:" + r.id));
  EXPECT_EQ(store.finish(ending(r, JobStatus::failed), "t"), redis::FinishOutcome::ok);
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", "pfx:jobs:{m1}:events"}).get()), 1);
  auto r2 = pending_job(model_), r3 = pending_job(model_);
  store.submit(r2, false);
  store.submit(r3, false);
  redis::TakeCandidates candidates;
  auto taken = store.take(model_, "t2", 5s, candidates);
  ASSERT_TRUE(taken && taken->id == r2.id);
  EXPECT_TRUE(exists("pfx:relay:{m1}:lease:" + r2.id));
  std::optional<redis::Taken> next;
  auto outcome =
      store.finish_and_take(ending(r2, JobStatus::completed), "t2", "t3", 5s, candidates, next);
  EXPECT_EQ(outcome, redis::FinishOutcome::ok);
  ASSERT_TRUE(next && next->id == r3.id);
}

// The three writers of a terminal state — the relay's finish, the cancel of a pending job and
// the reaper's dead letter — publish the same documented payload (redis/completion.hpp), and
// it agrees with the record each wrote.
TEST_F(JobStoreTest, EveryTerminalWriterPublishesTheDocumentedCompletion) {
  auto sub = redis_.connect();
  sub.append({"SUBSCRIBE", keys_.completed_channel(model_)});
  sub.read_reply();
  auto next = [&] {
    auto msg = sub.read_reply();
    EXPECT_EQ(msg->elements, 3u);
    auto c = redis::Completion::from_payload(redis::as_string(msg->element[2]));
    EXPECT_TRUE(c) << redis::as_string(msg->element[2]);
    return c.value_or(redis::Completion{});
  };

  auto finished = pending_job(model_);
  store_.submit(finished, false);
  store_.pop(model_, 1s);
  store_.begin(model_, finished.id, "tok", 5s);
  ASSERT_EQ(store_.finish(ending(finished, JobStatus::completed), "tok"), redis::FinishOutcome::ok);
  auto c = next();
  EXPECT_EQ(c.job_id, finished.id);
  EXPECT_EQ(c.status, JobStatus::completed);
  EXPECT_EQ(c.service_type, "svc");
  EXPECT_EQ(c.model, model_);
  EXPECT_EQ(c.result_key, "x");
  EXPECT_EQ(c.finished_at, record(finished.id).finished_at);

  auto cancelled = pending_job(model_);
  store_.submit(cancelled, false);
  ASSERT_EQ(store_.cancel(model_, "svc", cancelled.id), redis::CancelOutcome::cancelled);
  c = next();
  EXPECT_EQ(c.job_id, cancelled.id);
  EXPECT_EQ(c.status, JobStatus::cancelled);
  EXPECT_EQ(c.service_type, "svc");
  EXPECT_EQ(c.finished_at, record(cancelled.id).finished_at);

  auto dead = pending_job(model_);
  store_.submit(dead, false);
  store_.pop(model_, 1s);  // taken, never leased: a relay that died at once
  EXPECT_EQ(store_.reap(model_, dead.id, 0ms, 1), redis::ReapOutcome::marked);
  EXPECT_EQ(store_.reap(model_, dead.id, 0ms, 1), redis::ReapOutcome::deadlettered);
  c = next();
  EXPECT_EQ(c.job_id, dead.id);
  EXPECT_EQ(c.status, JobStatus::failed);
  EXPECT_EQ(c.error_code, "dead_lettered");
  EXPECT_EQ(c.service_type, "svc");
  EXPECT_EQ(c.model, model_);
  auto rec = record(dead.id);
  EXPECT_EQ(rec.error_code, "dead_lettered");
  EXPECT_EQ(c.finished_at, rec.finished_at);
  EXPECT_EQ(events_count(), 3);
}

TEST_F(JobStoreTest, TakeMovesLeasesAndMarksInOneStepSkippingStaleEntries) {
  auto stale = pending_job(model_);
  store_.submit(stale, false);
  conn_.command({"HSET", keys_.job(model_, stale.id), "status", "cancelled"});
  conn_.command({"RPUSH", keys_.pending(model_), "no-such-job"});
  auto live = pending_job(model_);
  store_.submit(live, false);
  redis::TakeCandidates candidates;  // none known: looked up
  auto taken = store_.take(model_, "tok", 5s, candidates);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, live.id);
  EXPECT_EQ(taken->record.status, JobStatus::processing);
  EXPECT_EQ(taken->record.holder, "tok");
  EXPECT_EQ(redis::as_string(conn_.command({"GET", keys_.lease(model_, live.id)}).get()), "tok");
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{live.id})
      << "stale entries are dropped";
  EXPECT_EQ(status(stale.id), "cancelled");
  EXPECT_TRUE(candidates.ids.empty()) << "the queue is empty now";
  EXPECT_FALSE(store_.take(model_, "tok2", 5s, candidates).has_value());
}

// A take's record comes from a copy the script makes for its slot (Keys::taken), read by a plain
// HGETALL behind it: the record as the take left it, the copy expiring with the lease. A take
// refused NOSCRIPT runs after that read: the record is read again, not taken from the copy of
// the slot's last job.
TEST_F(JobStoreTest, TakeReadsTheRecordFromItsSlotsCopy) {
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(pending_job(model_));
    store_.submit(jobs.back(), false);
  }
  redis::TakeCandidates candidates;
  const std::string copy = keys_.taken(model_, candidates.taker());
  for (int i = 0; i < 3; ++i) {
    const std::string token = "tok-" + std::to_string(i);
    if (i == 2) conn_.command({"SCRIPT", "FLUSH"});
    auto taken = store_.take(model_, token, 5s, candidates);
    ASSERT_TRUE(taken.has_value());
    EXPECT_EQ(taken->id, jobs[i].id);
    const auto stored = store_.get(model_, jobs[i].id);
    ASSERT_TRUE(stored.has_value());
    EXPECT_EQ(taken->record.id, jobs[i].id) << i;
    EXPECT_EQ(taken->record.holder, token) << i;
    EXPECT_EQ(taken->record.status, JobStatus::processing) << i;
    EXPECT_EQ(taken->record.started_at, stored->started_at) << i;
    EXPECT_EQ(taken->record.input_key, jobs[i].input_key) << i;
    EXPECT_EQ(redis::as_string(conn_.command({"HGET", copy, "holder"}).get()), token);
    const auto ttl = redis::as_integer(conn_.command({"PTTL", copy}).get());
    EXPECT_GT(ttl, 0) << "expires";
    EXPECT_LE(ttl, 5000) << "with the lease";
  }
  redis::TakeCandidates other;
  EXPECT_NE(other.taker(), candidates.taker()) << "one copy per slot";
}

TEST_F(JobStoreTest, TakeTakesTheHeadWhicheverCandidateItIsAndLooksAgainWhenItIsNone) {
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(pending_job(model_));
    store_.submit(jobs.back(), false);
  }
  // Candidates seen before another relay took the first two: the head is the third of them.
  redis::TakeCandidates candidates({jobs[0].id, jobs[1].id, jobs[2].id});
  conn_.command({"LPOP", keys_.pending(model_), "2"});
  auto taken = store_.take(model_, "tok", 5s, candidates);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, jobs[2].id) << "strictly the head";
  EXPECT_EQ(candidates.ids, std::vector<std::string>{jobs[3].id}) << "the head after the take";
  // None of them at the head (taken meanwhile): one more look, from the ids returned.
  auto late = pending_job(model_);
  store_.submit(late, true);
  candidates.ids = {jobs[0].id};
  taken = store_.take(model_, "tok2", 5s, candidates);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, late.id);
  EXPECT_EQ(list(keys_.processing(model_)), (std::vector<std::string>{jobs[2].id, late.id}));
}

// take.lua names the taken job's changed channel from its id (a candidate is only its keys):
// a watched job is announced on the channel its event streams listen on, whatever the prefix
// and tag, and only that job.
TEST_F(JobStoreTest, TakeAnnouncesAWatchedJobOnItsOwnChangedChannel) {
  for (bool tag : {false, true}) {
    redis::Keys keys("pfx:", tag);
    redis::JobStore store(conn_, keys);
    auto watched = pending_job(model_), other = pending_job(model_);
    store.submit(watched, false);
    store.submit(other, false);
    ASSERT_TRUE(store.watch(model_, watched.id));
    auto sub = redis_.connect();
    sub.append({"PSUBSCRIBE", "pfx:job:*"});
    sub.read_reply();
    redis::TakeCandidates candidates({watched.id, other.id});
    auto taken = store.take(model_, "tok", 5s, candidates);
    ASSERT_TRUE(taken && taken->id == watched.id);
    taken = store.take(model_, "tok2", 5s, candidates);  // not watched: no message
    ASSERT_TRUE(taken && taken->id == other.id);
    conn_.command({"PUBLISH", "pfx:job:end", "end"});
    auto msg = sub.read_reply();
    ASSERT_EQ(msg->elements, 4u);
    EXPECT_EQ(redis::as_string(msg->element[2]), keys.job_changed_channel(watched.id)) << tag;
    EXPECT_EQ(redis::as_string(msg->element[3]), "processing");
    EXPECT_EQ(redis::as_string(sub.read_reply()->element[2]), "pfx:job:end")
        << "nothing for the job nobody watches";
  }
}

// relay.take_ahead's halves: the steps are written now and run at once; their replies wait until
// read — across other connections' work, a script cache flushed after the write (NOSCRIPT:
// resent whole at the read) — and the connection is not taken for stale meanwhile.
TEST_F(JobStoreTest, StepsSentNowAreReadLater) {
  auto first = pending_job(model_), second = pending_job(model_), third = pending_job(model_);
  for (auto* r : {&first, &second, &third}) store_.submit(*r, false);
  redis::TakeCandidates candidates;
  ASSERT_TRUE(store_.take(model_, "t1", 5s, candidates));
  auto relay_conn = redis_.connect();
  redis::JobStore relay_store(relay_conn, keys_);
  conn_.command({"SCRIPT", "FLUSH"});
  const auto done = ending(first, JobStatus::completed);
  auto sent = relay_store.send_steps(model_, &done, "t1", "t2", 5s, candidates);
  EXPECT_TRUE(sent.finish && sent.take);
  EXPECT_FALSE(relay_conn.stale()) << "its replies are what it has to read";
  EXPECT_THROW(relay_conn.send({}), redis::IoError) << "one send at a time";
  // Whatever ran at once has run (the finish, or its NOSCRIPT refusal): the read settles it.
  std::optional<redis::Taken> next;
  auto outcome = relay_store.receive_steps(sent, candidates, next);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(*outcome, redis::FinishOutcome::ok);
  EXPECT_EQ(status(first.id), "completed");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->id, second.id);
  EXPECT_EQ(status(second.id), "processing");
  // The copy behind the take was read before the take ran (sent again after NOSCRIPT): it held
  // the first job's record, and the second's was read instead.
  EXPECT_EQ(next->record.id, second.id);
  EXPECT_EQ(next->record.holder, "t2");
  EXPECT_EQ(next->record.status, JobStatus::processing);
  EXPECT_EQ(candidates.ids, std::vector<std::string>{third.id});
  // A take alone; then nothing left to read.
  sent = relay_store.send_steps(model_, nullptr, "", "t3", 5s, candidates);
  EXPECT_TRUE(!sent.finish && sent.take);
  // (The server runs it on its own time: waited for, without reading the reply.)
  EXPECT_TRUE(wait_until(
      [&] {
        return redis::as_string(conn_.command({"LINDEX", keys_.processing(model_), "-1"}).get()) ==
               third.id;
      },
      5s))
      << "run before its reply is read";
  std::optional<redis::Taken> last;
  auto none = relay_store.receive_steps(sent, candidates, last);
  EXPECT_FALSE(none.has_value());
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->id, third.id);
  EXPECT_THROW(relay_conn.receive(), redis::IoError) << "nothing sent";
  EXPECT_EQ(redis::as_string(relay_conn.command({"PING"}).get()), "PONG") << "still in step";
}

TEST_F(JobStoreTest, FinishAndTakeWriteTheOutcomeAndTakeTheNextJobInOneRoundTrip) {
  auto first = pending_job(model_), second = pending_job(model_), third = pending_job(model_);
  for (auto* r : {&first, &second, &third}) store_.submit(*r, false);
  redis::TakeCandidates candidates;
  auto taken = store_.take(model_, "t1", 5s, candidates);
  ASSERT_TRUE(taken && taken->id == first.id);
  EXPECT_EQ(candidates.ids, (std::vector<std::string>{second.id, third.id}));
  // (finish.lua into the script cache first: a NOSCRIPT costs a round trip more.)
  EXPECT_EQ(store_.finish(ending(pending_job(model_), JobStatus::completed), "t0"),
            redis::FinishOutcome::missing);
  auto reads = [&] {
    auto info = redis::as_string(conn_.command({"INFO", "stats"}).get());
    auto at = info.find("total_reads_processed:");
    return std::stoll(info.substr(at + 22));
  };
  const auto before = reads();
  std::optional<redis::Taken> next;
  auto outcome =
      store_.finish_and_take(ending(first, JobStatus::completed), "t1", "t2", 5s, candidates, next);
  const auto after = reads();
  EXPECT_EQ(outcome, redis::FinishOutcome::ok);
  EXPECT_EQ(status(first.id), "completed");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->id, second.id);
  EXPECT_EQ(next->record.holder, "t2");
  EXPECT_EQ(candidates.ids, std::vector<std::string>{third.id});
  // The INFO before counts one read; both steps arrived in one more (loopback delivers the one
  // write whole).
  EXPECT_EQ(after - before, 2);
  // The take runs whatever the finish's outcome: a lost lease loses nothing else.
  std::optional<redis::Taken> after_lost;
  auto lost = store_.finish_and_take(ending(second, JobStatus::completed), "wrong", "t3", 5s,
                                     candidates, after_lost);
  EXPECT_EQ(lost, redis::FinishOutcome::lease_lost);
  EXPECT_EQ(status(second.id), "processing");
  ASSERT_TRUE(after_lost.has_value());
  EXPECT_EQ(after_lost->id, third.id);
  // An empty queue: finished, nothing taken, no candidates.
  std::optional<redis::Taken> none;
  auto last =
      store_.finish_and_take(ending(third, JobStatus::failed), "t3", "t4", 5s, candidates, none);
  EXPECT_EQ(last, redis::FinishOutcome::ok);
  EXPECT_FALSE(none.has_value());
  EXPECT_TRUE(candidates.ids.empty());
}

// Many relays moving the head far between one relay's steps (TakeCandidates::far()): the take is
// a pop sent with the finish (LMOVE, as the seed's dequeue), then begin.lua — not a take naming
// the relay's stale ids (with those, a take naming them all costs Redis more than the round
// trip saved, or misses).
TEST_F(JobStoreTest, AFarTakeIsAPopSentWithItsFinishThenBegun) {
  std::vector<JobRecord> jobs;
  for (int i = 0; i < 12; ++i) {
    jobs.push_back(pending_job(model_));
    store_.submit(jobs.back(), false);
  }
  redis::TakeCandidates candidates;
  ASSERT_TRUE(store_.take(model_, "t1", 5s, candidates));
  for (int i = 0; i < 5; ++i) candidates.missed();
  ASSERT_TRUE(candidates.far());
  // Other relays took the next six meanwhile: none of the ids this relay saw is the head now.
  candidates.ids = {jobs[1].id, jobs[2].id, jobs[3].id};
  conn_.command({"LPOP", keys_.pending(model_), "6"});
  // (finish.lua into the script cache first: a NOSCRIPT defers the finish to the read.)
  EXPECT_EQ(store_.finish(ending(pending_job(model_), JobStatus::completed), "t0"),
            redis::FinishOutcome::missing);
  auto relay_conn = redis_.connect();
  redis::JobStore relay_store(relay_conn, keys_);
  const auto done = ending(jobs[0], JobStatus::completed);
  auto sent = relay_store.send_steps(model_, &done, "t1", "t2", 5s, candidates);
  EXPECT_TRUE(sent.finish && sent.take && sent.taking && sent.taking->pop);
  EXPECT_TRUE(wait_until([&] { return status(jobs[0].id) == "completed"; }, 5s));
  EXPECT_TRUE(wait_until(
      [&] { return list(keys_.processing(model_)) == std::vector<std::string>{jobs[7].id}; }, 5s))
      << "the pop is sent with the finish, strictly the head";
  EXPECT_EQ(status(jobs[7].id), "pending") << "begun once its reply is read";
  std::optional<redis::Taken> next;
  EXPECT_EQ(relay_store.receive_steps(sent, candidates, next), redis::FinishOutcome::ok);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->id, jobs[7].id);
  EXPECT_EQ(next->record.holder, "t2");
  EXPECT_EQ(status(jobs[7].id), "processing");
  EXPECT_EQ(redis::as_string(conn_.command({"GET", keys_.lease(model_, jobs[7].id)}).get()), "t2");
  EXPECT_EQ(candidates.ids,
            (std::vector<std::string>{jobs[8].id, jobs[9].id, jobs[10].id, jobs[11].id}))
      << "the look behind the pop: the head after it";
  EXPECT_EQ(candidates.want(), redis::TakeCandidates::kMax)
      << "the head moved past the ids the relay had: still far";
  // The same through finish_and_take: a round trip for the finish and pop, one for the begin;
  // a job gone stale meanwhile (cancelled, say) is dropped and the next one taken.
  auto reads = [&] {
    auto info = redis::as_string(conn_.command({"INFO", "stats"}).get());
    return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
  };
  conn_.command({"LPOP", keys_.pending(model_), "1"});  // (job 8, by another relay)
  const auto before = reads();
  std::optional<redis::Taken> after;
  EXPECT_EQ(store_.finish_and_take(ending(next->record, JobStatus::completed), "t2", "t3", 5s,
                                   candidates, after),
            redis::FinishOutcome::ok);
  EXPECT_EQ(reads() - before, 3) << "the INFO, the finish with the pop, the begin";
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->id, jobs[9].id);
  EXPECT_EQ(status(jobs[7].id), "completed");
  conn_.command({"HSET", keys_.job(model_, jobs[10].id), "status", "cancelled"});
  std::optional<redis::Taken> past_stale;
  EXPECT_EQ(store_.finish_and_take(ending(after->record, JobStatus::completed), "t3", "t4", 5s,
                                   candidates, past_stale),
            redis::FinishOutcome::ok);
  ASSERT_TRUE(past_stale.has_value());
  EXPECT_EQ(past_stale->id, jobs[11].id) << "the stale one dropped, the next one popped";
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{jobs[11].id});
  EXPECT_EQ(list(keys_.pending(model_)), std::vector<std::string>{});
  // An empty queue at the finish: nothing taken, no candidates.
  std::optional<redis::Taken> none;
  candidates.ids = {"anything"};  // (as if jobs waited when the relay last looked)
  EXPECT_EQ(store_.finish_and_take(ending(past_stale->record, JobStatus::completed), "t4", "t5", 5s,
                                   candidates, none),
            redis::FinishOutcome::ok);
  EXPECT_FALSE(none.has_value());
  EXPECT_TRUE(candidates.ids.empty());
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{});
}

// Many relays taking at once: each job is taken exactly once, none is lost, and each relay sees
// the jobs in queue order.
TEST_F(JobStoreTest, ConcurrentTakersTakeEachJobOnceInQueueOrder) {
  constexpr int kJobs = 400, kTakers = 6;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    auto r = pending_job(model_);
    store_.submit(r, false);
    ids.push_back(r.id);
  }
  std::vector<std::vector<std::string>> seen(kTakers);
  std::vector<std::thread> takers;
  for (int t = 0; t < kTakers; ++t)
    takers.emplace_back([&, t] {
      auto conn = redis_.connect();
      redis::JobStore store(conn, keys_);
      redis::TakeCandidates candidates;
      std::optional<redis::Taken> next;
      const std::string token = "tok-" + std::to_string(t);
      for (;;) {
        auto job =
            next ? std::exchange(next, std::nullopt) : store.take(model_, token, 5s, candidates);
        if (!job) return;
        seen[t].push_back(job->id);
        JobRecord r = job->record;
        r.model = model_;
        std::optional<redis::Taken> taken;
        auto outcome = store.finish_and_take(ending(r, JobStatus::completed), token, token, 5s,
                                             candidates, taken);
        EXPECT_EQ(outcome, redis::FinishOutcome::ok);
        next = std::move(taken);
      }
    });
  for (auto& t : takers) t.join();
  std::map<std::string, int> position;
  for (int i = 0; i < kJobs; ++i) position[ids[i]] = i;
  std::set<std::string> all;
  for (const auto& s : seen) {
    for (size_t i = 1; i < s.size(); ++i) EXPECT_LT(position[s[i - 1]], position[s[i]]);
    all.insert(s.begin(), s.end());
  }
  size_t total = 0;
  for (const auto& s : seen) total += s.size();
  EXPECT_EQ(total, static_cast<size_t>(kJobs)) << "no job taken twice";
  EXPECT_EQ(all.size(), static_cast<size_t>(kJobs)) << "every job taken";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  for (const auto& id : ids) EXPECT_EQ(status(id), "completed");
}

TEST_F(JobStoreTest, APipelineSurvivesAnEmptiedScriptCache) {
  auto a = pending_job(model_), b = pending_job(model_);
  store_.submit(a, false);
  store_.submit(b, false);
  redis::TakeCandidates candidates;
  auto taken = store_.take(model_, "t1", 5s, candidates);
  ASSERT_TRUE(taken.has_value());
  conn_.command({"SCRIPT", "FLUSH"});
  std::optional<redis::Taken> next;
  auto outcome =
      store_.finish_and_take(ending(a, JobStatus::completed), "t1", "t2", 5s, candidates, next);
  EXPECT_EQ(outcome, redis::FinishOutcome::ok);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->id, b.id);
}
// Requeueing a whole dead letter (the dashboard's "requeue all", relayctl deadletter requeue
// --all) takes a round trip per batch of jobs, not per job (it was per job, on a request thread):
// every job back in pending in its order, its record pending with its count cleared, the dead
// letter empty, and a job taken from it meanwhile by someone else skipped.
TEST_F(JobStoreTest, RequeueingAWholeDeadLetterIsOneRoundTripPerBatch) {
  constexpr int kJobs = 1201;  // three batches
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    auto r = pending_job(model_);
    ASSERT_TRUE(store_.submit(r, false));
    ids.push_back(r.id);
  }
  // Dead-lettered as the reaper leaves them: out of the queue, failed, counted.
  conn_.command({"RENAME", keys_.pending(model_), keys_.deadletter(model_)});
  for (const auto& id : ids)
    conn_.command({"HSET", keys_.job(model_, id), "status", "failed", "error_code", "dead_lettered",
                   "attempts", "3"});
  EXPECT_TRUE(store_.requeue_deadletter(model_, ids[7], "op-1"));  // one alone, as an operator may
  EXPECT_TRUE(store_.requeue_deadletter(model_, ids[7], "op-1"))
      << "the same request retried (its reply lost) finds its own work";
  EXPECT_FALSE(store_.requeue_deadletter(model_, ids[7], "op-2"))
      << "for another request it is not in the dead letter any more";
  conn_.command({"DEL", keys_.pending(model_)});  // (as if a relay had taken it)
  ReadCounter reads(redis_, keys_.deadletter(model_));
  const auto before = reads();
  EXPECT_EQ(store_.requeue_deadletter_all(model_, "op-3"), kJobs - 1);
  // (Redis reads a long pipeline in 16 KiB reads: a few per batch. One per job was 1,200.)
  EXPECT_LT(reads() - before, 60) << "Redis reads for " << kJobs - 1 << " jobs";
  ids.erase(ids.begin() + 7);
  EXPECT_EQ(list(keys_.pending(model_)), ids) << "in their order";
  EXPECT_TRUE(list(keys_.deadletter(model_)).empty());
  for (const auto& id : {ids.front(), ids[600], ids.back()}) {
    const auto r = record(id);
    EXPECT_EQ(r.status, JobStatus::pending) << id;
    EXPECT_EQ(r.attempts, 0) << id;
    EXPECT_TRUE(r.error_code.empty()) << id;
  }
  EXPECT_EQ(store_.requeue_deadletter_all(model_, "op-4"), 0) << "nothing left";
}
// The webhook sender reads the deliveries it claimed in two round trips whatever their number
// (it was two per delivery): each with its job's record as it is now; one that vanished
// meanwhile (expired with its job) is left out and unscheduled. Deliveries put back for a busy
// receiver come due again in one round trip, and a vanished one is not brought back.
TEST_F(JobStoreTest, ClaimedWebhooksAreReadWithTheirJobsInTwoRoundTrips) {
  constexpr int kJobs = 40;
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::map<std::string, std::string> job_of;  // job key -> job id
  for (int i = 0; i < kJobs; ++i) {
    auto r = pending_job(model_);
    r.callback_url = "http://127.0.0.1:9/hook-" + std::to_string(i);
    r.webhook_events = "started";
    ASSERT_TRUE(store_.submit(r, false));
    ASSERT_TRUE(store_.schedule_webhook(model_, r.id, redis::WebhookEvent::started, "s1"));
    job_of[keys_.job(model_, r.id)] = r.id;
  }
  redis::Schedules schedules(conn_, keys_);
  const auto claimed = schedules.claim_webhooks(model_, now + 60'000, 60s, 100);
  ASSERT_EQ(claimed.size(), static_cast<size_t>(kJobs));
  const std::string vanished = claimed[5];
  conn_.command({"DEL", keys_.webhook(model_, vanished)});
  // A record changed after the delivery was scheduled is read as it is now.
  const std::string changed = claimed[9];
  conn_.command(
      {"HSET",
       redis::as_string(conn_.command({"HGET", keys_.webhook(model_, changed), "job_key"}).get()),
       "status", "processing"});
  ReadCounter reads(redis_, keys_.webhooks_due(model_));
  const auto before = reads();
  const auto got = schedules.deliveries(model_, claimed);
  // (One more: the INFO that counts them.)
  EXPECT_LE(reads() - before, 3) << "Redis reads for " << kJobs << " deliveries";
  ASSERT_EQ(got.size(), static_cast<size_t>(kJobs - 1));
  std::set<std::string> seen;
  for (const auto& d : got) {
    EXPECT_NE(d.id, vanished);
    seen.insert(d.id);
    ASSERT_TRUE(job_of.count(d.job_key)) << d.job_key;
    EXPECT_EQ(d.job.id, job_of[d.job_key]) << "each delivery with its own job's record";
    EXPECT_EQ(d.url, d.job.callback_url);
    EXPECT_EQ(d.event, "started");
    EXPECT_EQ(d.attempts, 0);
    EXPECT_EQ(d.job.status, d.id == changed ? JobStatus::processing : JobStatus::pending);
    EXPECT_GE(d.created_ms, now - 60'000);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kJobs - 1)) << "none twice";
  auto due = [&](const std::string& id) {
    return redis::as_optional_string(
        conn_.command({"ZSCORE", keys_.webhooks_due(model_), id}).get());
  };
  EXPECT_EQ(due(vanished), std::nullopt) << "a vanished delivery is unscheduled";
  schedules.defer_webhooks(model_, {changed, claimed[0], vanished}, now + 123);
  EXPECT_EQ(due(changed), std::to_string(now + 123));
  EXPECT_EQ(due(claimed[0]), std::to_string(now + 123));
  EXPECT_EQ(due(vanished), std::nullopt) << "not brought back";
}

// A quota admission retried after its reply was lost (the step is retried like any safe to
// repeat) finds its own job admitted: admitted again, charging nothing. It counted itself
// against max_pending before (2026-12-06): refused at the limit, its entry left behind.
TEST_F(JobStoreTest, AnAdmissionRetriedFindsItsOwnJobAdmitted) {
  // (A token a minute: none comes back within the test.)
  const redis::Quota quota{.max_pending = 1, .submits_per_minute = 1, .submit_burst = 2};
  using Outcome = redis::Admission::Outcome;
  EXPECT_EQ(store_.admit("t1", model_, "job-a", quota).outcome, Outcome::ok);
  EXPECT_EQ(store_.admit("t1", model_, "job-a", quota).outcome, Outcome::ok) << "a retry";
  EXPECT_EQ(store_.admit("t1", model_, "job-b", quota).outcome, Outcome::max_pending);
  // The retry took no token: with the first job gone, one of the burst's two is still there.
  conn_.command({"DEL", keys_.quota_admitted("t1")});
  EXPECT_EQ(store_.admit("t1", model_, "job-c", quota).outcome, Outcome::ok);
  conn_.command({"DEL", keys_.quota_admitted("t1")});
  EXPECT_EQ(store_.admit("t1", model_, "job-d", quota).outcome, Outcome::rate);
}
// The relay's retry step (a failed job with attempts left) run again after its reply was lost
// finds its own work and says ok — it said lease_lost (the first try had released the lease), and
// the relay logged and counted the job so. Another relay's lease, or another due time, is still
// lease_lost, writing nothing.
// The reaper's pass over a busy model: its reap steps go kReapBatch to a round trip, each with
// the outcome reap() alone gives (marked on the first sighting, requeued past the grace; a job
// at its last attempt dead-lettered, its live signal sent).
TEST_F(JobStoreTest, ReapingAWholeProcessingListIsOneRoundTripPerBatch) {
  const std::size_t n = 2 * redis::JobStore::kReapBatch + 50;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) {
    auto r = pending_job(model_);
    store_.submit(r, false);
    ASSERT_EQ(store_.pop(model_, 1s), r.id);  // lease-less in processing: a relay died
    ids.push_back(r.id);
  }
  conn_.command({"HSET", keys_.job(model_, ids[7]), "attempts", "2"});
  // An empty script cache (a restart, a failover) costs the refused batch one round trip more,
  // not one per step.
  conn_.command({"SCRIPT", "FLUSH"});
  ReadCounter reads(redis_, keys_.processing(model_));
  const auto before = reads();
  auto first = store_.reap_all(model_, ids, 0ms, 3);
  // (Redis reads a long pipeline in 16 KiB reads: a few per batch. One per job was 250.)
  EXPECT_LT(reads() - before, 25) << "Redis reads for " << n << " reap steps";
  ASSERT_EQ(first.size(), n);
  for (auto o : first) EXPECT_EQ(o, redis::ReapOutcome::marked);
  auto second = store_.reap_all(model_, ids, 0ms, 3);
  ASSERT_EQ(second.size(), n);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_EQ(second[i], i == 7 ? redis::ReapOutcome::deadlettered : redis::ReapOutcome::requeued)
        << i;
  EXPECT_EQ(list(keys_.processing(model_)).size(), 0u);
  EXPECT_EQ(list(keys_.pending(model_)).size(), n - 1);
  EXPECT_EQ(list(keys_.deadletter(model_)), std::vector<std::string>{ids[7]});
  EXPECT_TRUE(store_.reap_all(model_, {}, 0ms, 3).empty());
}

// The due sweep's steps for a batch of expired jobs go in one round trip: each expired job
// failed `expired` with its terminal event, out of pending; one taken meanwhile left alone.
TEST_F(JobStoreTest, ExpiringABatchOfJobsIsOneRoundTrip) {
  constexpr int kJobs = 100;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    auto r = pending_job(model_);
    r.expires_at = wall_now() - 1s;
    store_.submit(r, false);
    ids.push_back(r.id);
  }
  ASSERT_EQ(store_.pop(model_, 1s), ids[0]);  // taken before the sweep: not expired
  auto due = store_.due_expiries(model_, wall_now(), kJobs);
  ASSERT_EQ(due.size(), static_cast<std::size_t>(kJobs));
  ReadCounter reads(redis_, keys_.pending(model_));
  const auto before = reads();
  auto expired = store_.expire(model_, due);
  EXPECT_LT(reads() - before, 10) << "Redis reads for " << kJobs << " expire steps";
  ASSERT_EQ(expired.size(), due.size());
  for (std::size_t i = 0; i < due.size(); ++i) {
    EXPECT_EQ(expired[i], due[i] != ids[0]) << i;
    EXPECT_EQ(status(due[i]), due[i] == ids[0] ? "pending" : "failed") << i;
  }
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events(model_)}).get()), kJobs - 1);
  EXPECT_TRUE(store_.due_expiries(model_, wall_now(), kJobs).empty());
}

// Cancel and expire look for a pending job only within 500 entries of either end of its queue
// (cancel.lua): near an end it leaves the queue at once; deeper it ends where it lies, in the
// model's dropped set, left out of the queue's depth, and a take drops it at the head. One
// waiting for its retry or taken (between its pop and begin) is never dropped so.
TEST_F(JobStoreTest, AJobEndedDeepInALongQueueIsDroppedWhereItLiesAndTakenOutAtTheHead) {
  constexpr int kJobs = 1500;
  std::vector<JobRecord> jobs;
  for (int i = 0; i < kJobs; ++i) {
    jobs.push_back(pending_job(model_));
    ASSERT_TRUE(store_.submit(jobs.back(), false));
  }
  auto in_queue = [&](const std::string& list_key, const std::string& id) {
    return conn_.command({"LPOS", list_key, id})->type == REDIS_REPLY_INTEGER;
  };
  auto dropped = [&](const std::string& id) {
    return redis::as_integer(conn_.command({"SISMEMBER", keys_.dropped(model_), id}).get()) == 1;
  };
  auto cancel = [&](const JobRecord& r) { return store_.cancel(model_, r.service_type, r.id); };
  // Taken (popped, not begun), and waiting for its retry: neither is dropped.
  ASSERT_EQ(store_.pop(model_, 1s), jobs[0].id);
  auto retrying = pending_job(model_);
  store_.submit(retrying, true);
  ASSERT_EQ(store_.pop(model_, 1s), retrying.id);
  ASSERT_EQ(store_.begin(model_, retrying.id, "tok", 5s).outcome, redis::BeginOutcome::ok);
  ASSERT_EQ(store_.retry(model_, retrying.id, "tok", wall_now() + 1h, "[]"),
            redis::FinishOutcome::ok);
  EXPECT_EQ(store_.expire(model_, {jobs[0].id, retrying.id}), (std::vector<bool>{false, false}));
  EXPECT_EQ(cancel(jobs[0]), redis::CancelOutcome::requested);
  EXPECT_EQ(status(retrying.id), "pending");
  // Near either end: out of the queue at once.
  EXPECT_EQ(cancel(jobs[3]), redis::CancelOutcome::cancelled);
  EXPECT_EQ(store_.expire(model_, {jobs[kJobs - 3].id}), std::vector<bool>{true});
  EXPECT_FALSE(in_queue(keys_.pending(model_), jobs[3].id));
  EXPECT_FALSE(in_queue(keys_.pending(model_), jobs[kJobs - 3].id));
  EXPECT_FALSE(dropped(jobs[3].id));
  // Deep: ended where they lie.
  EXPECT_EQ(cancel(jobs[700]), redis::CancelOutcome::cancelled);
  EXPECT_EQ(store_.expire(model_, {jobs[800].id}), std::vector<bool>{true});
  EXPECT_EQ(status(jobs[700].id), "cancelled");
  EXPECT_EQ(record(jobs[800].id).error_code, "expired");
  EXPECT_EQ(events_count(), 4) << "each end's event, once";
  for (int i : {700, 800}) {
    EXPECT_TRUE(in_queue(keys_.pending(model_), jobs[i].id)) << i;
    EXPECT_TRUE(dropped(jobs[i].id)) << i;
  }
  EXPECT_EQ(cancel(jobs[700]), redis::CancelOutcome::terminal) << "once";
  long long queued = kJobs - 3 - 2;  // popped; ended near the ends; ended deep
  EXPECT_EQ(store_.pending_count(model_), queued);
  EXPECT_EQ(store_.queue_depth(model_).pending, queued);
  // Paused, the queue is the held list: the same there.
  ASSERT_EQ(store_.set_paused(model_, true), queued + 2);
  EXPECT_EQ(cancel(jobs[900]), redis::CancelOutcome::cancelled);
  EXPECT_TRUE(in_queue(keys_.held(model_), jobs[900].id));
  --queued;
  auto depth = store_.queue_depth(model_);
  EXPECT_EQ(depth.pending, 0);
  EXPECT_EQ(depth.held, queued);
  EXPECT_EQ(store_.pending_count(model_), 0);
  store_.set_paused(model_, false);
  EXPECT_EQ(store_.queue_depth(model_).pending, queued);
  // Taken through: every job still queued once, in order; the ended ones dropped at the head.
  std::vector<std::string> taken;
  redis::TakeCandidates candidates;
  while (auto t = store_.take(model_, "tok-" + std::to_string(taken.size()), 5s, candidates))
    taken.push_back(t->id);
  std::vector<std::string> expected;
  for (int i = 1; i < kJobs; ++i)
    if (i != 3 && i != kJobs - 3 && i != 700 && i != 800 && i != 900)
      expected.push_back(jobs[i].id);
  EXPECT_EQ(taken, expected);
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
  EXPECT_EQ(redis::as_integer(conn_.command({"SCARD", keys_.dropped(model_)}).get()), 0);
  EXPECT_EQ(status(jobs[700].id), "cancelled") << "dropped, not run";
}

TEST_F(JobStoreTest, ARetryStepRunAgainFindsItsOwnWork) {
  auto r = pending_job(model_);
  store_.submit(r, false);
  ASSERT_EQ(store_.pop(model_, 1s), r.id);
  ASSERT_EQ(store_.begin(model_, r.id, "tok-1", 5s).outcome, redis::BeginOutcome::ok);
  const auto due = *parse_rfc3339("2026-11-30T00:01:00.000Z");
  EXPECT_EQ(store_.retry(model_, r.id, "tok-1", due, "[]"), redis::FinishOutcome::ok);
  EXPECT_EQ(store_.retry(model_, r.id, "tok-1", due, "[]"), redis::FinishOutcome::ok) << "again";
  EXPECT_EQ(store_.retry(model_, r.id, "tok-2", due + 1s, "[1]"), redis::FinishOutcome::lease_lost);
  EXPECT_EQ(status(r.id), "pending");
  EXPECT_EQ(record(r.id).failures, "[]") << "a lost lease writes nothing";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}
}  // namespace
}  // namespace relay::testing
