// relay.take_ahead: with short jobs and a backlog, a slot takes its next job while the model runs
// the current one. What holds without it holds with it: every job runs once and is written, a
// cancel reaches a job taken ahead (it never reaches the model), a job taken ahead keeps its
// lease while it waits, a shutdown gives it back and a crash leaves it to the reaper. And the
// model waits for storage no more than for Redis: the input of the job taken ahead is read, and
// the last job's result stored, while the model works.

#include <algorithm>

#include "common/sha256.hpp"
#include "redis/lua_scripts.hpp"
#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

class RelayTakeAheadTest : public RelayTest {
 protected:
  Env env_for(const InferenceServer& inference) {
    Env env = base_env(inference);
    env["RELAY_RELAY_TAKE_AHEAD"] = "10s";
    return env;
  }
  Env env_for(const InferenceServer& inference, const S3Server& s3) {
    Env env = base_env(inference, s3);
    env["RELAY_RELAY_TAKE_AHEAD"] = "10s";
    env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
    return env;
  }
  std::vector<std::string> submit_n(storage::Storage& st, int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(submit(st, "input " + std::to_string(i)));
    return ids;
  }
  // Until the model runs its n-th request and the slot holds one more job: two in processing.
  bool wait_for_one_ahead(const InferenceServer& inference, size_t n) {
    return wait_until(
        [&] {
          return occurrences(inference.events(), "request /predict") == n &&
                 list(keys_.processing(model_)).size() == 2;
        },
        20s);
  }
  // Four jobs (ids_) and a relay on them, once the model runs the second and the third is held.
  std::unique_ptr<Process> start_with_one_ahead(const InferenceServer& inference,
                                                const std::string& pop_timeout = "1s") {
    auto env = env_for(inference);
    env["RELAY_QUEUE_POP_TIMEOUT"] = pop_timeout;
    ids_ = submit_n(*storage_for(env), 4);
    auto relay = start_relay(env, {"--max-jobs", "0"});
    EXPECT_TRUE(wait_for_one_ahead(inference, 2)) << inference.events() << relay->log();
    return relay;
  }
  std::vector<std::string> ids_;
};

// The lease is a third of each model call: a job taken ahead waits a whole call, and keeps its
// lease only because the heartbeat watches it from its take.
TEST_F(RelayTakeAheadTest, EveryJobRunsOnceWithTheNextTakenWhileTheModelWorks) {
  InferenceServer inference({.delay_ms = 900});
  auto env = env_for(inference);
  env["RELAY_LEASE_TTL"] = "300ms";
  env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
  auto st = storage_for(env);
  const auto ids = submit_n(*st, 5);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  // The first job's length is unknown: the second is taken when it ends, the third ahead.
  ASSERT_TRUE(wait_for_one_ahead(inference, 2)) << inference.events() << relay->log();
  EXPECT_EQ(list(keys_.processing(model_)).back(), ids[2]);
  EXPECT_EQ(record(ids[2]).status, JobStatus::processing);
  ASSERT_EQ(relay->wait_exit(60s), 0);
  for (const auto& id : ids) EXPECT_EQ(status(id), "completed") << id;
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 5u) << inference.events();
  EXPECT_EQ(events_count(), 5);
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
  EXPECT_EQ(occurrences(relay->log(), "\"job finished\""), 5u) << relay->log();
  EXPECT_EQ(occurrences(relay->log(), "lease_lost"), 0u) << relay->log();
}

TEST_F(RelayTakeAheadTest, ACancelReachesAJobTakenAheadBeforeTheModelSeesIt) {
  InferenceServer inference({.delay_ms = 1500});
  auto relay = start_with_one_ahead(inference);
  ASSERT_FALSE(HasFailure());
  const auto& ids = ids_;
  const auto& ahead = ids[2];
  EXPECT_EQ(store_.cancel(model_, record(ahead).service_type, ahead),
            redis::CancelOutcome::requested);
  // Heard at once, while the model still runs the job before it.
  ASSERT_TRUE(
      wait_until([&] { return relay->log().find("cancel received") != std::string::npos; }, 10s))
      << relay->log();
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 2u);
  ASSERT_EQ(relay->wait_exit(60s), 0);
  EXPECT_EQ(status(ahead), "cancelled");
  for (const auto& id : {ids[0], ids[1], ids[3]}) EXPECT_EQ(status(id), "completed") << id;
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 3u) << inference.events();
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

// A job taken ahead is known to the relay a round trip after its take: a cancel heard before that
// is kept for it. Shown with a job the relay cannot know yet (held by a paused model): the cancel
// announced for it first, then the job released — the relay takes it and cancels it unrun.
TEST_F(RelayTakeAheadTest, ACancelHeardBeforeTheRelayKnowsItsJobIsKeptForIt) {
  InferenceServer inference;
  auto env = env_for(inference);
  auto st = storage_for(env);
  store_.set_paused(model_, true);
  const auto id = submit(*st, "cancelled before it is taken");
  auto relay = start_relay(env, {"--max-jobs", "1"});
  ASSERT_TRUE(wait_for_blocked_client());  // (subscribed before its first wait)
  // (No cancel_requested in the record: only what the listener heard can stop it.)
  EXPECT_EQ(publish_heard(keys_.cancel_channel(model_), id), 1);
  // Sent is not yet heard: the listener thread reads it when it is next scheduled.
  ASSERT_TRUE(wait_until(
      [&] {
        return relay->log().find("cancel heard for no job running here") != std::string::npos;
      },
      10s))
      << relay->log();
  store_.set_paused(model_, false);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(status(id), "cancelled");
  EXPECT_FALSE(inference.saw("request /predict")) << inference.events();
}

// Taken ahead because the job before ran short, a job waits for the one running at most
// take_ahead: that one turning out long, the job taken ahead goes back to the front of pending,
// and a relay that is free runs it while the long one still runs.
TEST_F(RelayTakeAheadTest, AJobTakenAheadGoesBackWhenTheJobBeforeItRunsLong) {
  // In order of arrival at the model: the first job short, the second long, the rest short.
  InferenceServer inference({.delays_ms = {50, 6000, 50}});
  auto env = env_for(inference);
  env["RELAY_RELAY_TAKE_AHEAD"] = "500ms";
  env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
  const auto ids = submit_n(*storage_for(env), 4);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  // The second job runs; the third, taken ahead with it, is given back within take_ahead (the
  // line is written once it is).
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("job taken ahead given back") != std::string::npos; }, 20s))
      << inference.events() << relay->log();
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 2u) << inference.events();
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{ids[1]});
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{ids[2], ids[3]}))
      << "back at the front, in its order";
  auto back = record(ids[2]);
  EXPECT_EQ(back.status, JobStatus::pending);
  EXPECT_TRUE(back.holder.empty());
  EXPECT_FALSE(back.started_at.has_value());
  EXPECT_FALSE(exists(keys_.lease(model_, ids[2])));
  // A second relay, free, runs it (and the last one) before the long job ends.
  auto other = start_relay(env, {"--max-jobs", "2"});
  ASSERT_EQ(other->wait_exit(30s), 0) << other->log();
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& id : ids) EXPECT_EQ(status(id), "completed") << id;
  EXPECT_LT(*record(ids[2]).finished_at, *record(ids[1]).finished_at);
  EXPECT_LT(*record(ids[3]).finished_at, *record(ids[1]).finished_at);
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 4u) << inference.events();
  EXPECT_NE(other->log().find(ids[2]), std::string::npos) << other->log();
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

TEST_F(RelayTakeAheadTest, SigtermGivesBackTheJobTakenAheadWithTheOneRunning) {
  InferenceServer inference({.delay_ms = 1500});
  auto relay = start_with_one_ahead(inference, "5m");
  ASSERT_FALSE(HasFailure());
  const auto& ids = ids_;
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  EXPECT_EQ(status(ids[0]), "completed");
  // Both back at the front, in their order, the last one never taken behind them.
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{ids[1], ids[2], ids[3]}));
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  for (const auto& id : {ids[1], ids[2]}) {
    auto rec = record(id);
    EXPECT_EQ(rec.status, JobStatus::pending) << id;
    EXPECT_TRUE(rec.holder.empty()) << id;
    EXPECT_FALSE(exists(keys_.lease(model_, id))) << id;
  }
}

TEST_F(RelayTakeAheadTest, MaxJobsCountsTheJobsTakenAhead) {
  InferenceServer inference({.delay_ms = 100});
  auto env = env_for(inference);
  auto st = storage_for(env);
  const auto ids = submit_n(*st, 7);
  auto relay = start_relay(env, {"--max-jobs", "4"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(status(ids[i]), "completed") << i;
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{ids[4], ids[5], ids[6]}))
      << "left for the next relay, in their order";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 4u) << inference.events();
}

// A relay killed with a job taken ahead leaves what any crash leaves: the job in processing
// under a lease that expires, for the gateway's reaper.
TEST_F(RelayTakeAheadTest, ACrashLeavesTheJobTakenAheadToTheReaper) {
  InferenceServer inference({.delay_ms = 1500});
  auto relay = start_with_one_ahead(inference);
  ASSERT_FALSE(HasFailure());
  const auto& ids = ids_;
  relay->signal(SIGKILL);
  relay->wait_exit(10s);
  auto processing = list(keys_.processing(model_));
  std::sort(processing.begin(), processing.end());
  auto expected = std::vector<std::string>{ids[1], ids[2]};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(processing, expected);
  for (const auto& id : expected) {
    EXPECT_EQ(record(id).status, JobStatus::processing) << id;
    EXPECT_GT(redis::as_integer(conn_.command({"PTTL", keys_.lease(model_, id)}).get()), 0) << id;
  }
  EXPECT_EQ(list(keys_.pending(model_)), std::vector<std::string>{ids[3]});
}

// The first job's result is stored at once (nothing waits behind it yet); from the second on,
// a job taken ahead goes to the model first and the result before it is stored meanwhile. The
// second result's upload is held by the store: the model has the third job while the second is
// still processing, its result not there (without the overlap the third reached the model
// only once the second was written).
TEST_F(RelayTakeAheadTest, TheModelGetsTheNextJobWhileTheLastResultIsStored) {
  S3Server s3({}, {"--hold-requests", "1", "--hold-match", "result.json", "--hold-method", "PUT",
                   "--hold-after", "1", "--hold-ms", "4000"});
  InferenceServer inference({.delay_ms = 50});
  auto env = env_for(inference, s3);
  const auto ids = submit_n(*storage_for(env), 4);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return s3.log().find("held 4000 ms") != std::string::npos; }, 20s))
      << s3.log() << relay->log();
  ASSERT_TRUE(
      wait_until([&] { return occurrences(inference.events(), "request /predict") >= 3; }, 3s))
      << "the third job waited for the second's result: " << inference.events();
  EXPECT_EQ(record(ids[1]).status, JobStatus::processing) << "its result is being stored";
  EXPECT_NE(s3.log().find(ids[1] + "/result.json held"), std::string::npos)
      << "the held upload is the second's: " << s3.log();
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    ASSERT_EQ(rec.status, JobStatus::completed) << i << " " << rec.error_message;
    // Each result is its own job's: the model's answer names the input it was given.
    EXPECT_EQ(file_part(s3.aws_cat("jobs/" + rec.result_key)).at("sha256").as_string(),
              sha256_hex("input " + std::to_string(i)))
        << i;
  }
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 4u) << inference.events();
  EXPECT_EQ(occurrences(relay->log(), "\"job finished\""), 4u) << relay->log();
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

// The input of the job taken ahead is read while the model runs the job before it: the store
// holds that read, and when it is held the model is still at work on the job before.
TEST_F(RelayTakeAheadTest, TheInputOfTheJobTakenAheadIsReadWhileTheModelWorks) {
  // GETs of inputs: the first job's, the second's (taken with the first's finish), the third's,
  // taken ahead while the second runs: that one is held.
  S3Server s3({}, {"--hold-requests", "1", "--hold-match", "/input", "--hold-method", "GET",
                   "--hold-after", "2", "--hold-ms", "1500"});
  InferenceServer inference({.delays_ms = {50, 3000, 50}});
  auto env = env_for(inference, s3);
  auto st = storage_for(env);
  // The third input is larger than one read: read whole all the same.
  std::string big(300 * 1024 + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 + i / 977);
  const std::vector<std::string> inputs = {"first", "second", big, "fourth"};
  std::vector<std::string> ids;
  for (const auto& in : inputs) ids.push_back(submit(*st, in));
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return s3.log().find("held 1500 ms") != std::string::npos; }, 20s))
      << s3.log() << relay->log();
  EXPECT_EQ(occurrences(inference.events(), "done /predict"), 1u)
      << "read while the model runs the second job: " << inference.events();
  // (The second's request was sent before the read began; the model's process may log it after
  // the storage's did.)
  EXPECT_TRUE(
      wait_until([&] { return occurrences(inference.events(), "request /predict") == 2; }, 2s))
      << inference.events();
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    ASSERT_EQ(rec.status, JobStatus::completed) << i << " " << rec.error_message;
    EXPECT_EQ(file_part(s3.aws_cat("jobs/" + rec.result_key)).at("sha256").as_string(),
              sha256_hex(inputs[i]))
        << i;
  }
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: GET"), 1u) << s3.log();
}

// The same with encryption on and an input of the largest size read ahead (1 MiB of plaintext,
// a little more sealed): it is read ahead too, and once. (Its ciphertext over the limit, the
// read ahead was dropped and the input read again: the relay's CPU per job for encrypted 1 MiB
// inputs was ~5× that of plain ones, with the decryption's own buffers.)
TEST_F(RelayTakeAheadTest, AnEncryptedInputOfTheLargestSizeReadAheadIsReadOnce) {
  S3Server s3({}, {"--hold-requests", "1", "--hold-match", "/input", "--hold-method", "GET",
                   "--hold-after", "2", "--hold-ms", "1500"});
  InferenceServer inference({.delays_ms = {50, 3000, 50}});
  auto env = env_for(inference, s3);
  std::string key(32, '\0');
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<char>(i);
  env["RELAY_ENCRYPTION_ENABLED"] = "true";
  env["RELAY_ENCRYPTION_ACTIVE_KEY"] = "k1";
  env["RELAY_ENCRYPTION_KEY_K1"] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";  // (key)
  auto st = storage_for(env);
  std::string big(1 << 20, '\0');  // the most read ahead (as an answer that size is spooled)
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 1013);
  const std::vector<std::string> inputs = {"first", "second", big, "fourth"};
  std::vector<std::string> ids;
  for (const auto& in : inputs) ids.push_back(submit(*st, in, {.key_id = "k1", .key = key}));
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return s3.log().find("held 1500 ms") != std::string::npos; }, 20s))
      << s3.log() << relay->log();
  EXPECT_EQ(occurrences(inference.events(), "done /predict"), 1u)
      << "read while the model runs the second job: " << inference.events();
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    ASSERT_EQ(rec.status, JobStatus::completed) << i << " " << rec.error_message;
    MemorySource sealed(s3.aws_cat("jobs/" + rec.result_key));
    crypto::DecryptingSource result(sealed, key, crypto::result_aad(ids[i]));
    std::string json, buf(65536, '\0');
    while (size_t n = result.read(buf)) json.append(buf.data(), n);
    EXPECT_EQ(file_part(json).at("sha256").as_string(), sha256_hex(inputs[i])) << i;
  }
  // The third job's input is the one held: read ahead, and not read again when the job ran.
  auto timings = boost::json::parse(record(ids[2]).timings).as_object();
  EXPECT_GE(timings.at("download").to_number<double>(), 1400) << record(ids[2]).timings;
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: GET"), 1u) << s3.log();
}

// A shutdown while the last job's result is being stored (the model at work on the next) lets
// that job finish — its model's work is not thrown away — and gives back the one running.
TEST_F(RelayTakeAheadTest, SigtermWhileAResultIsStoredFinishesThatJob) {
  S3Server s3({}, {"--hold-requests", "1", "--hold-match", "result.json", "--hold-method", "PUT",
                   "--hold-after", "1", "--hold-ms", "3000"});
  InferenceServer inference({.delays_ms = {50, 50, 5000}});
  auto env = env_for(inference, s3);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "5m";
  const auto ids = submit_n(*storage_for(env), 4);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return s3.log().find("held 3000 ms") != std::string::npos; }, 20s))
      << s3.log() << relay->log();
  ASSERT_TRUE(
      wait_until([&] { return occurrences(inference.events(), "request /predict") >= 3; }, 2s))
      << inference.events();
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(status(ids[0]), "completed");
  EXPECT_EQ(status(ids[1]), "completed") << "its result was being stored: " << relay->log();
  EXPECT_EQ(list(keys_.pending(model_)).front(), ids[2]) << "the one running, given back";
  auto back = record(ids[2]);
  EXPECT_EQ(back.status, JobStatus::pending);
  EXPECT_TRUE(back.holder.empty());
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

// Redis refusing the steps a slot sent ahead — out of memory here; loading, busy or failing over
// the same — ran neither. A job that failed has its outcome sent with the next take while the
// model runs the job taken ahead; refused, the outcome is written again the usual way (patiently
// while memory is short: the model's work is in hand) and the take is no job taken.
TEST_F(RelayTakeAheadTest, StepsSentAheadThatRedisRefusesAreWrittenOnceItTakesThem) {
  InferenceServer inference({.status = 500, .delay_ms = 900});
  auto relay = start_with_one_ahead(inference);
  ASSERT_FALSE(HasFailure());
  const auto& ids = ids_;
  const auto set_maxmemory = [&](const std::string& bytes) {
    for (int i = 0; i < std::max(redis_.nodes(), 1); ++i) {
      auto c =
          redis_.cluster() ? redis::Connection::open(redis_.node_endpoint(i)) : redis_.connect();
      c.command({"CONFIG", "SET", "maxmemory", bytes});
    }
  };
  // Full while the model runs the second job: when it fails, its outcome and the take of the
  // fourth are sent, and read while the model runs the third.
  set_maxmemory("1");
  ASSERT_TRUE(wait_until([&] { return relay->log().find("OOM") != std::string::npos; }, 20s))
      << relay->log();
  EXPECT_TRUE(relay->running()) << relay->log();
  set_maxmemory("0");
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& id : ids) EXPECT_EQ(status(id), "failed") << id;
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), ids.size()) << inference.events();
  EXPECT_EQ(events_count(), static_cast<long long>(ids.size()));
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
}

// Redis may refuse a job's finish and run the take sent with it: a busy spell (a long script)
// or a load ending between the two. The job taken is the relay's: it runs once the finish,
// retried alone, is written — not left in processing for the reaper (it was, until
// 2026-12-06: the refusal was thrown before the take's reply was read). Both ways a finish
// rides with a take: the next job's take (take-ahead off) and the one after (on). A proxy in
// front of Redis refuses the first finish sent with a take, BUSY, and runs the take.
TEST_F(RelayTakeAheadTest, AJobTakenWithARefusedFinishRunsAtOnce) {
  if (redis_.cluster() || RedisServer::tls_by_default())
    GTEST_SKIP() << "the proxy speaks to one plain-TCP Redis";
  for (const std::string take_ahead : {"0s", "10s"}) {
    SCOPED_TRACE("relay.take_ahead " + take_ahead);
    InferenceServer inference({.delay_ms = 200});
    auto env = env_for(inference);
    env["RELAY_RELAY_TAKE_AHEAD"] = take_ahead;
    env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
    env["RELAY_LEASE_TTL"] = "60s";  // a job left holding it would stay in processing
    const auto ids = submit_n(*storage_for(env), 4);
    const int port = free_port();
    TempDir dir;
    Process proxy(
        {"/usr/bin/python3", RELAY_TEST_REFUSE_STEP_PROXY, "--port", std::to_string(port),
         "--upstream-port", std::to_string(redis_.port()), "--refuse",
         std::string(redis::lua::finish.sha1), "--then", std::string(redis::lua::take.sha1)},
        Env{}, dir.path() + "/proxy.log");
    ASSERT_TRUE(wait_until([&] { return port_open(port); }, 10s));
    env["RELAY_REDIS_URL"] = "redis://127.0.0.1:" + std::to_string(port);
    auto relay = start_relay(env, {"--max-jobs", "0"});
    ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
    EXPECT_NE(proxy.log().find("refused"), std::string::npos) << "the fault was not injected";
    EXPECT_NE(relay->log().find("BUSY"), std::string::npos) << relay->log();
    for (const auto& id : ids) {
      EXPECT_EQ(status(id), "completed") << id;
      EXPECT_EQ(record(id).attempts, 0) << id << ": reaped";
    }
    EXPECT_TRUE(list(keys_.processing(model_)).empty()) << "a job left to the reaper";
    EXPECT_EQ(occurrences(inference.events(), "request /predict"), ids.size());
    EXPECT_EQ(events_count(), static_cast<long long>(ids.size()));
    conn_.command({"DEL", keys_.events(model_)});  // (counted anew by the next round)
  }
}

}  // namespace
}  // namespace relay::testing
