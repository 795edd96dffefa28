// relay.concurrency: one relay process with several jobs in hand at once, each its own request
// to the model. What must hold is what holds for one: every job runs once, cancels stop only
// the job they name, a shutdown gives every job in hand back, max_jobs counts them all, and the
// relay leaves on an empty queue only when none of its jobs is still running.

#include <algorithm>
#include <set>
#include <sstream>

#include "redis/lua_scripts.hpp"
#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

// The most POSTs the model had in flight at once ("in-flight <n>" lines).
long most_in_flight(const std::string& events) {
  std::istringstream in(events);
  long most = 0;
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("in-flight ")) most = std::max(most, std::stol(line.substr(10)));
  return most;
}

class RelayConcurrencyTest : public RelayTest {
 protected:
  Env env_for(const InferenceServer& inference, int concurrency) {
    Env env = base_env(inference);
    env["RELAY_RELAY_CONCURRENCY"] = std::to_string(concurrency);
    return env;
  }
  // n jobs ("input 0", "input 1", ...); their ids in submission order.
  std::vector<std::string> submit_n(storage::Storage& st, int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(submit(st, "input " + std::to_string(i)));
    return ids;
  }
};

TEST_F(RelayConcurrencyTest, RunsThatManyJobsAtOnceAndNoMore) {
  // The model holds each answer until three requests have been in flight together.
  InferenceServer inference({.meet = 3});
  auto env = env_for(inference, 3);
  auto st = storage_for(env);
  const auto ids = submit_n(*st, 7);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(60s), 0);
  for (const auto& id : ids) EXPECT_EQ(status(id), "completed") << id;
  const auto events = inference.events();
  EXPECT_EQ(occurrences(events, "request /predict"), 7u) << events;
  EXPECT_EQ(most_in_flight(events), 3) << events;
  EXPECT_EQ(occurrences(events, "meet timed out"), 0u) << events;
  EXPECT_EQ(events_count(), 7);
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_NE(relay->log().find("\"concurrency\":3"), std::string::npos);
}

TEST_F(RelayConcurrencyTest, ACancelStopsOnlyTheJobItNamesAndSigtermGivesTheRestBack) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = env_for(inference, 3);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "5m";
  auto st = storage_for(env);
  const auto a = submit(*st, "a"), b = submit(*st, "b"), c = submit(*st, "c");
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(
      wait_until([&] { return occurrences(inference.events(), "request /predict") == 3; }, 20s))
      << inference.events();
  conn_.command({"HSET", keys_.job(model_, b), "cancel_requested", "1"});
  conn_.command({"PUBLISH", keys_.cancel_channel(model_), b});
  ASSERT_TRUE(wait_until([&] { return status(b) == "cancelled"; }, 10s)) << relay->log();
  // (The model notices a dropped request on its own time: waited for, not assumed.)
  const auto dropped = [&](size_t n) {
    return wait_until([&] { return occurrences(inference.events(), "dropped /predict") >= n; },
                      10s);
  };
  EXPECT_TRUE(dropped(1)) << inference.events();
  EXPECT_EQ(occurrences(inference.events(), "dropped /predict"), 1u) << inference.events();
  EXPECT_EQ(status(a), "processing");
  EXPECT_EQ(status(c), "processing");
  // The freed slot waits on the empty queue beside the two running jobs; SIGTERM ends all three.
  ASSERT_TRUE(wait_for_blocked_client());
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  auto pending = list(keys_.pending(model_));
  std::sort(pending.begin(), pending.end());
  auto expected = std::vector<std::string>{a, c};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(pending, expected) << "both given back";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  for (const auto& id : {a, c}) {
    auto rec = record(id);
    EXPECT_EQ(rec.status, JobStatus::pending);
    EXPECT_TRUE(rec.holder.empty());
    EXPECT_FALSE(exists(keys_.lease(model_, id)));
  }
  EXPECT_EQ(events_count(), 1) << "only the cancel";
  EXPECT_TRUE(dropped(3)) << inference.events();
  EXPECT_EQ(occurrences(inference.events(), "dropped /predict"), 3u) << inference.events();
}

// Slots outnumbering the jobs: each job reaches a slot waiting in BLMOVE, and a slot whose finish
// saw the queue empty waits again at once, with no look at pending first (a take's LRANGE, a
// round trip for nothing per job while the queue stays empty; issue 14).
TEST_F(RelayConcurrencyTest, ASlotThatSawTheQueueEmptyWaitsWithoutLookingAgain) {
  InferenceServer inference;
  auto env = env_for(inference, 3);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "5m";
  auto st = storage_for(env);
  auto relay = start_relay(env, {"--max-jobs", "0"});
  auto node = queue_node();
  auto all_waiting = [&] {
    return wait_until(
        [&] {
          auto info = redis::as_string(node.command({"INFO", "clients"}).get());
          return info.find("blocked_clients:3\r") != std::string::npos;
        },
        20s);
  };
  ASSERT_TRUE(all_waiting()) << relay->log();
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  node.command({"CONFIG", "SET", "slowlog-max-len", "10000"});
  node.command({"SLOWLOG", "RESET"});
  for (int i = 0; i < 4; ++i) {
    const auto id = submit(*st, "one at a time");
    ASSERT_TRUE(wait_until([&] { return status(id) == "completed"; }, 20s)) << relay->log();
    ASSERT_TRUE(all_waiting()) << relay->log();
  }
  // Every command the server ran, a script's own too ("?:0" as its client): the relay's own.
  auto log = node.command({"SLOWLOG", "GET", "10000"});
  // The look sent behind each job's finish (the queue empty then) is the only one: none before
  // a BLMOVE.
  int blmoves = 0, looks = 0, finishes = 0;
  for (size_t i = 0; i < log->elements; ++i) {
    const auto* entry = log->element[i];
    const auto argv = redis::as_strings(entry->element[3]);
    if (argv.empty() || redis::as_string(entry->element[4]) == "?:0") continue;
    blmoves += argv[0] == "BLMOVE" || argv[0] == "blmove";
    looks += argv[0] == "LRANGE" || argv[0] == "lrange";
    finishes += (argv[0] == "EVALSHA" || argv[0] == "evalsha") && argv.size() > 1 &&
                argv[1] == redis::lua::finish.sha1;
  }
  EXPECT_EQ(finishes, 4);
  EXPECT_EQ(looks, finishes);
  EXPECT_GE(blmoves, 4);
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait_exit(10s), 0);
}

// Many slots at work move the head of pending further between one slot's takes than its
// candidates reach (TakeCandidates::far()): its takes become pops (LMOVE with the finish, then
// begin.lua). Every job still runs once and ends once, and none is left in processing.
TEST_F(RelayConcurrencyTest, ManyRelaysMovingTheHeadFarPopAndRunEachJobOnce) {
  InferenceServer inference({.delay_ms = 20});
  auto env = env_for(inference, 8);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
  env["RELAY_LOG_LEVEL"] = "info";
  auto st = storage_for(env);
  constexpr int kJobs = 600, kRelays = 6;
  const auto ids = submit_n(*st, kJobs);
  auto node = queue_node();
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  node.command({"CONFIG", "SET", "slowlog-max-len", "100000"});
  node.command({"SLOWLOG", "RESET"});
  std::vector<std::unique_ptr<Process>> relays;
  for (int i = 0; i < kRelays; ++i) relays.push_back(start_relay(env, {"--max-jobs", "0"}));
  for (auto& relay : relays) ASSERT_EQ(relay->wait_exit(120s), 0) << relay->log();
  int completed = 0;
  for (const auto& id : ids) completed += status(id) == "completed";
  EXPECT_EQ(completed, kJobs);
  EXPECT_EQ(events_count(), kJobs) << "one end each";
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), static_cast<size_t>(kJobs));
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_TRUE(list(keys_.pending(model_)).empty());
  // A pop is an LMOVE sent as a command (take.lua's own is a script's: "?:0" as its client).
  auto log = node.command({"SLOWLOG", "GET", "100000"});
  node.command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  int pops = 0;
  for (size_t i = 0; i < log->elements; ++i) {
    const auto argv = redis::as_strings(log->element[i]->element[3]);
    pops += !argv.empty() && (argv[0] == "LMOVE" || argv[0] == "lmove") &&
            redis::as_string(log->element[i]->element[4]) != "?:0";
  }
  EXPECT_GT(pops, 0) << "no take became a pop";
}

TEST_F(RelayConcurrencyTest, MaxJobsCountsTheJobsOfEverySlot) {
  InferenceServer inference;
  auto env = env_for(inference, 3);
  auto st = storage_for(env);
  const auto ids = submit_n(*st, 6);
  auto relay = start_relay(env, {"--max-jobs", "4"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  int completed = 0;
  for (const auto& id : ids) completed += status(id) == "completed";
  EXPECT_EQ(completed, 4);
  EXPECT_EQ(list(keys_.pending(model_)).size(), 2u) << "left for the next relay";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 4u) << inference.events();
}

// A slot whose queue wait times out while another slot runs a job does not end the relay: a
// job submitted then is still taken.
TEST_F(RelayConcurrencyTest, AnIdleSlotKeepsWaitingWhileAnotherRunsAJob) {
  // The first job's answer waits until a second request is in flight.
  InferenceServer inference({.meet = 2});
  auto env = env_for(inference, 2);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
  auto st = storage_for(env);
  const auto first = submit(*st, "first");
  const auto before = calls_of("blmove");
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  // The idle slot's BLMOVE has timed out at least twice (its third is waiting).
  ASSERT_TRUE(wait_until([&] { return calls_of("blmove") - before >= 3; }, 20s)) << relay->log();
  const auto second = submit(*st, "second");
  ASSERT_EQ(relay->wait_exit(30s), 0);
  EXPECT_EQ(status(first), "completed");
  EXPECT_EQ(status(second), "completed");
  EXPECT_EQ(occurrences(inference.events(), "meet timed out"), 0u) << inference.events();
  EXPECT_EQ(occurrences(relay->log(), "queue empty"), 1u);
}

// One heartbeat keeps every lease in hand alive: three jobs each outlive the lease four times.
// (A lease let lapse fails its finish: the job would stay processing, unwritten.)
TEST_F(RelayConcurrencyTest, EveryJobInHandKeepsItsLease) {
  InferenceServer inference({.delay_ms = 2000, .meet = 3});
  auto env = env_for(inference, 3);
  env["RELAY_LEASE_TTL"] = "500ms";
  auto st = storage_for(env);
  const auto ids = submit_n(*st, 3);
  auto relay = start_relay(env, {"--max-jobs", "3"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  for (const auto& id : ids) EXPECT_EQ(status(id), "completed") << id;
  EXPECT_EQ(most_in_flight(inference.events()), 3) << inference.events();
  EXPECT_EQ(relay->log().find("lease lost"), std::string::npos);
}

// A Redis restart with three jobs in hand: the heartbeat and every slot reconnect, every job
// completes once.
TEST_F(RelayConcurrencyTest, ARedisRestartWithJobsInHandIsSurvived) {
  RedisServer durable(true);  // AOF: the restart loses nothing
  auto conn = durable.connect();
  redis::JobStore store(conn, keys_);
  InferenceServer inference({.delay_ms = 2500, .meet = 3});
  auto env = env_for(inference, 3);
  for (auto& [k, v] : durable.env()) env[k] = v;
  env["RELAY_LEASE_TTL"] = "3s";
  auto st = storage_for(env);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    MemorySource src("input " + std::to_string(i));
    ids.push_back(submit(*st, src, {}, store));
  }
  auto relay = start_relay(env, {"--max-jobs", "3"});
  ASSERT_TRUE(
      wait_until([&] { return occurrences(inference.events(), "request /predict") == 3; }, 20s));
  durable.stop();
  durable.start();
  ASSERT_EQ(relay->wait_exit(30s), 0);
  auto conn2 = durable.connect();
  redis::JobStore store2(conn2, keys_);
  for (const auto& id : ids) {
    auto rec = store2.get(model_, id);
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->status, JobStatus::completed) << rec->error_message;
  }
  EXPECT_EQ(redis::as_integer(conn2.command({"XLEN", keys_.events(model_)}).get()), 3);
}

// Each job in hand reports progress to its own URL.
TEST_F(RelayConcurrencyTest, EachJobReportsProgressToItsOwnUrl) {
  InferenceServer inference({.delay_ms = 600, .progress_steps = 3, .meet = 2});
  auto env = env_for(inference, 2);
  env["RELAY_RELAY_PROGRESS_INTERVAL"] = "10ms";
  auto st = storage_for(env);
  const auto a = submit(*st, "a"), b = submit(*st, "b");
  auto relay = start_relay(env, {"--max-jobs", "2"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  const auto events = inference.events();
  EXPECT_EQ(occurrences(events, " 204"), 6u) << events;
  std::set<std::string> urls;
  std::istringstream in(events);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("progress-url ")) urls.insert(line.substr(13));
  EXPECT_EQ(urls.size(), 2u) << events;
  for (const auto& id : {a, b}) {
    EXPECT_EQ(status(id), "completed");
    auto msg =
        redis::as_string(conn_.command({"HGET", keys_.job(model_, id), "progress_message"}).get());
    // (The last report may be held back by the throttle when the job ends: advisory.)
    EXPECT_TRUE(msg.starts_with("step ")) << id << ": " << msg;
  }
}

}  // namespace
}  // namespace relay::testing
