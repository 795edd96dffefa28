// The gateway's API and a job's life through it, end to end (fixture: gateway_fixture.hpp): one
// test per route and per lifecycle rule, hence its length.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "gateway_fixture.hpp"
#include "redis/lua_scripts.hpp"

namespace relay::testing {
namespace {

TEST_F(GatewayTest, SubmitRunFetch) {
  start_gateway();
  InferenceServer inference;
  auto r =
      submit("hello gateway", {}, {{"operation", "default"}, {"params", R"({"language":"en"})"}});
  ASSERT_EQ(r.status, 202) << r.body;
  auto j = parse(r);
  std::string id = str(j, "id");
  EXPECT_EQ(r.headers["location"], "/jobs/echo/" + id);
  EXPECT_EQ(str(j, "status"), "pending");
  EXPECT_EQ(str(j, "model"), "m1");
  EXPECT_EQ(str(j.at("input").as_object(), "filename"), "input.txt");
  EXPECT_EQ(j.at("input").as_object().at("size").as_int64(), 13);

  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto done = job(id);
  EXPECT_EQ(str(done, "status"), "completed");
  EXPECT_EQ(str(done, "result_url"), "/jobs/echo/" + id + "/result");
  EXPECT_TRUE(done.at("timings").as_object().contains("inference"));
  auto result = http("GET", url("/jobs/echo/" + id + "/result"));
  EXPECT_EQ(result.status, 200);
  EXPECT_NE(result.body.find(R"("value":"en")"), std::string::npos) << result.body;
  EXPECT_NE(result.body.find(R"("filename":"input.txt")"), std::string::npos);
}

TEST_F(GatewayTest, RawBodyWithQueryOptions) {
  start_gateway();
  auto r =
      http("POST", url("/jobs/echo?operation=transcribe&filename=a.wav&params=%7B%22k%22%3A1%7D"),
           {"Content-Type: audio/wav"}, std::string(5000, 'x'));
  ASSERT_EQ(r.status, 202) << r.body;
  auto rec = store_.get("m1", str(parse(r), "id"));
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->operation, "transcribe");
  EXPECT_EQ(rec->input_filename, "a.wav");
  EXPECT_EQ(rec->input_content_type, "audio/wav");
  EXPECT_EQ(rec->input_size, 5000u);
  EXPECT_EQ(rec->params, R"({"k":1})");
}

TEST_F(GatewayTest, LongPollAnswersWhenTheJobEnds) {
  start_gateway();
  InferenceServer inference({.delay_ms = 1000});
  auto id = submit_id("input");
  auto relay = start_relay(inference);
  auto t0 = std::chrono::steady_clock::now();
  auto r = http("GET", url("/jobs/echo/" + id + "?wait=30"));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(str(parse(r), "status"), "completed") << r.body;
  EXPECT_LT(took, 5s) << "a 30 s long-poll must come back as soon as the job ends";
}

// Every command the gateway (or anyone but a script) sends from now is logged: SLOWLOG.
void log_every_command(redis::Connection& conn) {
  conn.command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  conn.command({"CONFIG", "SET", "slowlog-max-len", "10000"});
  conn.command({"SLOWLOG", "RESET"});
}
// How many reads of the job's record the gateway made since: HGETALLs sent as commands, and
// watch steps (lua/watch.lua returns the record it flagged). A relay's are not counted: the
// record it begins is read by an HGETALL behind begin.lua, from a connection that moves jobs.
int reads_of(redis::Connection& conn, const std::string& job_key) {
  auto log = conn.command({"SLOWLOG", "GET", "10000"});
  conn.command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  std::set<std::string> relays;  // (client addresses)
  for (size_t i = 0; i < log->elements; ++i) {
    const auto* entry = log->element[i];
    const auto argv = redis::as_strings(entry->element[3]);
    if (!argv.empty() && (argv[0] == "BLMOVE" || (argv[0] == "EVALSHA" && argv.size() > 1 &&
                                                  (argv[1] == redis::lua::begin.sha1 ||
                                                   argv[1] == redis::lua::take.sha1))))
      relays.insert(redis::as_string(entry->element[4]));
  }
  int reads = 0;
  for (size_t i = 0; i < log->elements; ++i) {
    const auto* entry = log->element[i];
    const auto argv = redis::as_strings(entry->element[3]);
    const auto client = redis::as_string(entry->element[4]);
    if (client == "?:0" || relays.contains(client)) continue;  // (a script's own, a relay's)
    reads += argv.size() == 2 && argv[0] == "HGETALL" && argv[1] == job_key;
    reads += argv.size() > 3 && argv[0] == "EVALSHA" && argv[1] == redis::lua::watch.sha1 &&
             argv[3] == job_key;
  }
  return reads;
}

// The gateway serves while its notifier subscribes; a waiter registered before then is woken
// once it has (notices before it are lost) and reads its job again. Tests counting a waiter's
// reads wait for the subscription first.
void wait_for_job_notices(GatewayServer& gateway) {
  ASSERT_TRUE(wait_until(
      [&] { return gateway.log().find("\"msg\":\"job notices subscribed\"") != std::string::npos; },
      10s))
      << gateway.log();
}

// A long-poll reads its job once: the step that flags it watched returns it (lua/watch.lua)
// before it waits. No read again after registering with the notifier (an end announced in
// between is one the notifier kept), and none at the end: the relay's finish announces the end
// of a watched job with its record, and the answer is made from that — the same answer a read
// gives.
TEST_F(GatewayTest, ALongPollReadsItsJobOnceAndIsAnsweredFromTheEndsNotice) {
  if (redis_.cluster()) GTEST_SKIP() << "SLOWLOG is per node";
  start_gateway();
  wait_for_job_notices(*gateway_);
  InferenceServer inference({.delay_ms = 1000});
  auto id = submit_id("input");
  log_every_command(conn_);
  auto relay = start_relay(inference);
  auto r = http("GET", url("/jobs/echo/" + id + "?wait=30"));
  EXPECT_EQ(str(parse(r), "status"), "completed") << r.body;
  EXPECT_EQ(reads_of(conn_, keys_.job("m1", id)), 1);
  EXPECT_EQ(r.body, http("GET", url("/jobs/echo/" + id)).body) << "as a read shows the job";
}

// Prefer: wait (RFC 7240) on a submission: the answer is held until the job ends — 200 and the
// ended job, as a read shows it, with its Location — or until the wait does: 202 and the job as
// it is. The job is born watched, so the gateway never reads it: its end's notice is the answer.
TEST_F(GatewayTest, ASubmissionThatPrefersToWaitIsAnsweredWhenItsJobEnds) {
  if (redis_.cluster()) GTEST_SKIP() << "SLOWLOG is per node";
  start_gateway();
  wait_for_job_notices(*gateway_);
  InferenceServer inference({.delay_ms = 500});
  auto relay = start_relay(inference);  // (one job, then it exits)
  log_every_command(conn_);
  auto r = submit("input", {"Prefer: respond-async, wait=30"});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string id = str(parse(r), "id");
  EXPECT_EQ(str(parse(r), "status"), "completed");
  EXPECT_EQ(r.headers["location"], "/jobs/echo/" + id);
  EXPECT_EQ(reads_of(conn_, keys_.job("m1", id)), 0);
  EXPECT_EQ(r.body, http("GET", url("/jobs/echo/" + id)).body) << "as a read shows the job";
  // Its time is the job's: counted apart from the submissions answered at once.
  EXPECT_NE(http("GET", url("/metrics"))
                .body.find("relay_http_requests_total{route=\"POST /jobs/{service_type} "
                           "(waiting)\",status=\"200\"} 1"),
            std::string::npos);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  // A job that fails is answered the same way: it ended.
  InferenceServer broken({.status = 500});
  auto failing_relay = start_relay(broken);
  auto failing = submit("input", {"Prefer: wait=30"});
  EXPECT_EQ(failing.status, 200) << failing.body;
  EXPECT_EQ(str(parse(failing), "status"), "failed");
  failing_relay->wait_exit(20s);

  // Nobody runs it: the wait ends (cut to server.max_wait), and the job is as it is.
  const auto t0 = std::chrono::steady_clock::now();
  auto later = submit("input", {"Prefer: wait=1"});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  ASSERT_EQ(later.status, 202) << later.body;
  EXPECT_EQ(str(parse(later), "status"), "pending");
  EXPECT_EQ(later.headers["location"], "/jobs/echo/" + str(parse(later), "id"));
  // A preference that cannot be read is ignored (RFC 7240 §2): answered at once.
  for (const char* odd : {"Prefer: wait=soon", "Prefer: wait=0", "Prefer: waiting=5"}) {
    auto at_once = submit("input", {odd});
    EXPECT_EQ(at_once.status, 202) << odd;
    EXPECT_EQ(str(parse(at_once), "status"), "pending") << odd;
  }
}

// A retry of a waiting submission (same Idempotency-Key) waits for the first request's job, and
// makes none of its own.
TEST_F(GatewayTest, AWaitingRetryWaitsForTheFirstRequestsJob) {
  start_gateway();
  const std::string key = "Idempotency-Key: wait-" + new_job_id();
  auto first = submit("input", {key});
  ASSERT_EQ(first.status, 202) << first.body;
  const std::string id = str(parse(first), "id");
  InferenceServer inference({.delay_ms = 500});
  auto relay = start_relay(inference);
  auto retry = submit("input", {key, "Prefer: wait=30"});
  EXPECT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(str(parse(retry), "id"), id);
  EXPECT_EQ(str(parse(retry), "status"), "completed");
  EXPECT_EQ(retry.headers["idempotent-replayed"], "true");
  // Ended already: answered at once.
  auto again = submit("input", {key, "Prefer: wait=30"});
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(str(parse(again), "id"), id);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_TRUE(list(keys_.pending("m1")).empty()) << "one job";
}

// A notice on a job's done channel that is not its end — a record of another tenant, of another
// job, not ended, or not a record — answers nobody: the long-poll reads its job (once per
// notice), sees it still pending and waits on.
TEST_F(GatewayTest, ANoticeThatIsNotTheJobsEndAnswersNoLongPoll) {
  if (redis_.cluster()) GTEST_SKIP() << "INFO is per node";
  start_gateway();
  auto id = submit_id("input");
  auto rec = store_.get("m1", id);
  ASSERT_TRUE(rec);
  std::optional<HttpResult> answer;
  std::thread poll([&] { answer = http("GET", url("/jobs/echo/" + id + "?wait=5")); });
  ASSERT_TRUE(wait_until([&] { return flagged_watched(id); }, 10s));
  auto notice = [&](const std::string& tenant, const std::string& job, const char* status) {
    json::array a{"id",         job.c_str(), "service_type", "echo",   "model",
                  "m1",         "tenant",    tenant.c_str(), "status", status,
                  "input_size", "0",         "attempts",     "0"};
    return json::serialize(a);
  };
  // (No relay runs: every HGETALL is the long-poll's. Counted by INFO, as SLOWLOG would fill
  // with this test's own polling.)
  conn_.command({"CONFIG", "RESETSTAT"});
  auto reads = [&] {
    const std::string info = redis::as_string(conn_.command({"INFO", "commandstats"}).get());
    const auto at = info.find("cmdstat_hgetall:calls=");
    return at == std::string::npos ? 0 : std::atoi(info.c_str() + at + 22);
  };
  const std::string forged[] = {notice("someone-else", id, "completed"),
                                notice(rec->tenant, new_job_id(), "completed"),
                                notice(rec->tenant, id, "processing"), "[1,2]", "completed"};
  for (int n = 1; const auto& text : forged) {
    conn_.command({"PUBLISH", keys_.job_done_channel(id), text});
    // (Read, one notice at a time: each is judged alone.)
    ASSERT_TRUE(wait_until([&] { return reads() == n; }, 5s)) << text << ": " << reads();
    ++n;
  }
  poll.join();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(str(parse(*answer), "status"), "pending") << answer->body;
}

// The notifier's subscription is lost and renewed while a long-poll waits: every waiter is woken
// to read its job again (a notice may have been missed), and one whose job has not ended waits
// on for its end rather than answering early.
TEST_F(GatewayTest, ALongPollWokenWithoutTheEndWaitsOn) {
  start_gateway();
  InferenceServer inference({.delay_ms = 3000});
  auto id = submit_id("input");
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until(
      [&] {
        return redis::as_optional_string(
                   conn_.command({"HGET", keys_.job("m1", id), "status"}).get()) == "processing";
      },
      10s));
  std::optional<HttpResult> answer;
  std::thread poll([&] { answer = http("GET", url("/jobs/echo/" + id + "?wait=30")); });
  ASSERT_TRUE(wait_until([&] { return flagged_watched(id); }, 10s));
  // Every pub/sub client of every node is disconnected: the notifier resubscribes.
  for (int i = 0; i < redis_.nodes(); ++i) {
    auto node = redis::Connection::open(redis_.node_endpoint(i));
    node.command({"CLIENT", "KILL", "TYPE", "pubsub"});
  }
  poll.join();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(str(parse(*answer), "status"), "completed") << answer->body;
}

TEST_F(GatewayTest, LongPollEndsWithTheCurrentStateAtTheDeadline) {
  start_gateway();
  auto id = submit_id("no relay runs");
  auto r = http("GET", url("/jobs/echo/" + id + "?wait=1"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(str(parse(r), "status"), "pending");
  EXPECT_EQ(http("GET", url("/jobs/echo/" + id + "?wait=3600")).status, 400)
      << "wait is bounded by server.max_wait";
}

TEST_F(GatewayTest, PriorityHeaderJumpsTheQueue) {
  start_gateway({{"RELAY_SERVER_PRIORITY_HEADER", "X-Priority"}});
  InferenceServer inference;
  auto a = submit_id("a");
  auto b = submit_id("b");
  auto urgent = submit_id("urgent", {"X-Priority: 1"});
  EXPECT_EQ(list(keys_.pending("m1")), (std::vector<std::string>{urgent, a, b}));
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(str(job(urgent), "status"), "completed");
  EXPECT_EQ(str(job(a), "status"), "pending");
  EXPECT_TRUE(job(urgent).at("priority").as_bool());
}

TEST_F(GatewayTest, CancelPendingProcessingAndTerminal) {
  start_gateway();
  // Pending: removed from the queue and cancelled at once.
  auto pending = submit_id("p");
  auto r = http("DELETE", url("/jobs/echo/" + pending));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(parse(r), "status"), "cancelled");
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  // Terminal: 409, nothing changes.
  r = http("DELETE", url("/jobs/echo/" + pending));
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(error_code(r), "job_finished");
  // Processing: 202, the relay aborts inference, the job ends cancelled.
  InferenceServer inference({.delay_ms = 30'000});
  auto running = submit_id("r");
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  r = http("DELETE", url("/jobs/echo/" + running));
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_TRUE(parse(r).at("cancel_requested").as_bool());
  auto final_state = job(running, "?wait=10");
  EXPECT_EQ(str(final_state, "status"), "cancelled");
  // (The model notices the dropped request on its own time: waited for, not assumed.)
  EXPECT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 10s));
  EXPECT_EQ(relay->wait_exit(10s), 0);
}

TEST_F(GatewayTest, RelayKilledMidJobIsReapedAndFinishedByAnother) {
  start_gateway();
  auto id = submit_id("survives a crash");
  {
    InferenceServer slow({.delay_ms = 30'000});
    auto doomed = start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}});
    ASSERT_TRUE(wait_until([&] { return slow.saw("request /predict"); }, 20s));
    doomed->signal(SIGKILL);
    doomed->wait_exit(5s);
  }
  // The lease expires, the reaper sees it twice a grace apart and requeues the job.
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "pending"; }, 20s))
      << gateway_->log();
  EXPECT_EQ(list(keys_.pending("m1")), std::vector<std::string>{id});
  InferenceServer healthy;
  auto second = start_relay(healthy);
  ASSERT_EQ(second->wait_exit(20s), 0);
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "completed");
  EXPECT_EQ(j.at("attempts").as_int64(), 1);
}

// A relay with several jobs in hand (relay.concurrency) killed: every one of its leases runs out,
// every job is reaped once and finished by the next relay.
TEST_F(GatewayTest, AConcurrentRelayKilledMidJobsLosesNoneOfThem) {
  start_gateway();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(submit_id("survives a crash " + std::to_string(i)));
  {
    InferenceServer slow({.delay_ms = 30'000});
    auto doomed =
        start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}, {"RELAY_RELAY_CONCURRENCY", "3"}},
                    {"--max-jobs", "0"});
    ASSERT_TRUE(wait_until(
        [&] {
          for (const auto& id : ids)
            if (str(job(id), "status") != "processing") return false;
          return true;
        },
        20s));
    doomed->signal(SIGKILL);
    doomed->wait_exit(5s);
  }
  ASSERT_TRUE(wait_until([&] { return list(keys_.pending("m1")).size() == 3; }, 20s))
      << gateway_->log();
  InferenceServer healthy;
  auto next = start_relay(healthy, {{"RELAY_RELAY_CONCURRENCY", "2"}}, {"--max-jobs", "0"});
  ASSERT_EQ(next->wait_exit(30s), 0);
  for (const auto& id : ids) {
    auto j = job(id);
    EXPECT_EQ(str(j, "status"), "completed") << id;
    EXPECT_EQ(j.at("attempts").as_int64(), 1) << id;
  }
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events("m1")}).get()), 3);
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
}

// Relays taking jobs ahead (relay.take_ahead), killed one after another at varied points of
// their work: every job still ends once, completed — a job taken ahead and lost with its relay
// is reaped like the one it ran.
TEST_F(GatewayTest, RelaysTakingJobsAheadKilledOneAfterAnotherLoseNoJob) {
  start_gateway({{"RELAY_GC_MAX_REAP_ATTEMPTS", "1000"}});
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(submit_id("job " + std::to_string(i)));
  InferenceServer model({.delay_ms = 40});
  const Env env{{"RELAY_LEASE_TTL", "600ms"},
                {"RELAY_RELAY_TAKE_AHEAD", "1s"},
                {"RELAY_QUEUE_POP_TIMEOUT", "30s"}};
  const auto requests = [&] { return occurrences(model.events(), "request /predict"); };
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int kill = 0; kill < 5; ++kill) {
    // Killed after two to five requests: the first job's length is unknown, the later ones are
    // taken ahead, and the kill lands wherever the relay then is.
    const auto after = requests() + 2 + rng() % 4;
    auto relay = start_relay(model, env, {"--max-jobs", "0"});
    ASSERT_TRUE(wait_until([&] { return requests() >= after; }, 20s)) << relay->log();
    relay->signal(SIGKILL);
    relay->wait_exit(5s);
  }
  auto last = start_relay(model, env, {"--max-jobs", "0"});
  const auto all_completed = [&] {
    for (const auto& id : ids)
      if (str(job(id), "status") != "completed") return false;
    return true;
  };
  ASSERT_TRUE(wait_until(all_completed, 90s)) << last->log();
  last->signal(SIGTERM);
  EXPECT_EQ(last->wait_exit(10s), 0);
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events("m1")}).get()), 40)
      << "one end per job";
  // Each kill cost the job running a lease, and the one taken ahead too when the relay had
  // taken it by then (its first take ahead follows its second request, and on a slow machine a
  // kill right after that request can come first: a ThreadSanitizer build counted 9 reaps for
  // 5 kills): all were reaped, and at least one kill lost a job taken ahead.
  std::int64_t reaped = 0;
  for (const auto& id : ids) reaped += job(id).at("attempts").as_int64();
  EXPECT_GT(reaped, 5);
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
}

TEST_F(GatewayTest, JobWhoseRelayAlwaysDiesIsDeadLettered) {
  start_gateway({{"RELAY_GC_MAX_REAP_ATTEMPTS", "2"}});
  auto id = submit_id("poison");
  InferenceServer slow({.delay_ms = 30'000});
  for (int run = 1; run <= 2; ++run) {
    auto doomed = start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}});
    ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
    doomed->signal(SIGKILL);
    doomed->wait_exit(5s);
    if (run == 1) {
      ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "pending"; }, 20s));
    }
  }
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "failed"; }, 20s));
  auto j = job(id);
  EXPECT_EQ(str(j.at("error").as_object(), "code"), "dead_lettered");
  EXPECT_EQ(j.at("attempts").as_int64(), 2);
  EXPECT_EQ(list(keys_.deadletter("m1")), std::vector<std::string>{id});
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
  // Its terminal event was written, so that its webhook fires.
  auto events = conn_.command({"XLEN", keys_.events("m1")});
  EXPECT_EQ(redis::as_integer(events.get()), 1);
}

TEST_F(GatewayTest, GatewayDownWhileARelayCompletesCatchesUpOnRestart) {
  start_gateway();
  InferenceServer inference;
  auto id = submit_id("completed while the gateway is down");
  ASSERT_EQ(gateway_->stop(), 0);
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  gateway_->start();
  // The event written while no gateway ran is consumed and acknowledged.
  ASSERT_TRUE(wait_until(
      [&] {
        return gateway_->log().find("\"job finished\",\"job_id\":\"" + id) != std::string::npos;
      },
      20s))
      << gateway_->log();
  auto pending = conn_.command({"XPENDING", keys_.events("m1"), "relay-gateway"});
  EXPECT_EQ(redis::as_integer(pending->element[0]), 0);
  EXPECT_EQ(str(job(id), "status"), "completed");
}

TEST_F(GatewayTest, ApiKeysAndTenantIsolation) {
  start_gateway({{"RELAY_AUTH_ENABLED", "true"},
                 {"RELAY_AUTH_API_KEYS",
                  sha256_hex("key-a") + "=tenant-a," + sha256_hex("key-b") + "=tenant-b"}});
  EXPECT_EQ(submit("x").status, 401);
  EXPECT_EQ(submit("x", {"Authorization: Bearer wrong"}).status, 401);
  auto r = submit("x", {"Authorization: Bearer key-a"});
  ASSERT_EQ(r.status, 202);
  std::string id = str(parse(r), "id");
  EXPECT_EQ(http("GET", url("/jobs/echo/" + id), {"X-API-Key: key-a"}).status, 200);
  EXPECT_EQ(http("GET", url("/jobs/echo/" + id), {"X-API-Key: key-b"}).status, 404);
  EXPECT_EQ(http("DELETE", url("/jobs/echo/" + id), {"Authorization: Bearer key-b"}).status, 404);
  EXPECT_EQ(str(job(id), "status"), "") << "no key, no job";
  EXPECT_EQ(store_.get("m1", id)->status, JobStatus::pending)
      << "tenant b's cancel changed nothing";
  EXPECT_EQ(http("GET", url("/healthz")).status, 200) << "probes need no key";
}

// auth.api_keys_file, a mounted Secret the kubelet updates in place: a key added is let in and a
// key revoked is refused without a restart; a version that is not valid leaves the keys as they
// were; a file not valid at start is a configuration error naming the setting.
TEST_F(GatewayTest, KeysInAKeysFileAreAddedAndRevokedWithoutARestart) {
  constexpr auto npos = std::string::npos;
  TempDir secret;
  const std::string file = secret.path() + "/api-keys";
  auto publish = [&](const std::string& text) {  // a new file renamed over the old, as the kubelet
    std::ofstream(file + ".tmp") << text;
    ASSERT_EQ(std::rename((file + ".tmp").c_str(), file.c_str()), 0);
  };
  publish("# tenants\n" + sha256_hex("key-a") + "=tenant-a\n");
  start_gateway({{"RELAY_AUTH_ENABLED", "true"},
                 {"RELAY_AUTH_API_KEYS", sha256_hex("key-fixed") + "=tenant-f"},
                 {"RELAY_AUTH_API_KEYS_FILE", file}});
  auto status_with = [&](const std::string& key) {
    return submit("x", {"Authorization: Bearer " + key}).status;
  };
  EXPECT_EQ(status_with("key-a"), 202);
  EXPECT_EQ(status_with("key-fixed"), 202);
  EXPECT_EQ(status_with("key-b"), 401);

  publish(sha256_hex("key-b") + "=tenant-b\n");  // b added, a revoked
  EXPECT_TRUE(wait_until([&] { return status_with("key-b") == 202; }, 20s)) << gateway_->log();
  EXPECT_EQ(status_with("key-a"), 401);
  EXPECT_EQ(status_with("key-fixed"), 202) << "the configuration's keys stay";

  publish("key-c=tenant-c\n");  // a key in clear: not valid
  EXPECT_TRUE(wait_until(
      [&] { return gateway_->log().find("a keys file changed but is not valid") != npos; }, 20s))
      << gateway_->log();
  EXPECT_EQ(status_with("key-b"), 202) << "the keys before it stay in use";
  EXPECT_EQ(gateway_->log().find("key-c"), npos) << "no key in the log";

  Env env = gateway_env({{"RELAY_AUTH_ENABLED", "true"}, {"RELAY_AUTH_API_KEYS_FILE", file}});
  env["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(free_port());
  Process refused({gateway_binary()}, env, secret.path() + "/refused.log");
  ASSERT_EQ(refused.wait_exit(10s), 2);
  EXPECT_NE(refused.log().find("auth.api_keys_file"), npos) << refused.log();
  EXPECT_NE(refused.log().find("line 1"), npos) << refused.log();
}

TEST_F(GatewayTest, BadInputIsRefusedAndNothingIsStored) {
  start_gateway({{"RELAY_SERVER_MAX_BODY_SIZE", "1000"},
                 {"RELAY_WEBHOOKS_SECRET", WebhookReceiver::kSecret}});
  struct Case {
    std::string description;
    std::function<HttpResult()> request;
    long status;
    std::string code;
  } cases[] = {
      {"too large (Content-Length)", [&] { return submit(std::string(5000, 'x')); }, 413,
       "too_large"},
      {"too large (chunked)",
       [&] {
         return http("POST", url("/jobs/echo"), {"Transfer-Encoding: chunked"},
                     std::string(5000, 'x'));
       },
       413, "too_large"},
      {"malformed multipart",
       [&] {
         return http("POST", url("/jobs/echo"), {"Content-Type: multipart/form-data; boundary=zz"},
                     "--zz\r\nnonsense");
       },
       400, "malformed_multipart"},
      {"multipart without a boundary",
       [&] { return http("POST", url("/jobs/echo"), {"Content-Type: multipart/form-data"}, "x"); },
       415, "unsupported_media_type"},
      {"multipart without a file part",
       [&] {
         return http("POST", url("/jobs/echo"), {}, {}, {{"operation", "x"}});
       },
       400, "missing_input"},
      {"params not JSON",
       [&] {
         return submit("x", {}, {{"params", "{not json"}});
       },
       400, "invalid_params"},
      {"params not an object",
       [&] {
         return submit("x", {}, {{"params", "[1,2]"}});
       },
       400, "invalid_params"},
      {"callback to a private address",
       [&] {
         return submit("x", {}, {{"callback_url", "http://10.0.0.1/hook"}});
       },
       400, "invalid_callback_url"},
      {"callback to loopback",
       [&] {
         return submit("x", {}, {{"callback_url", "http://127.0.0.1:9/hook"}});
       },
       400, "invalid_callback_url"},
      {"callback not http",
       [&] {
         return submit("x", {}, {{"callback_url", "ftp://example.com/x"}});
       },
       400, "invalid_callback_url"},
      {"unknown service type", [&] { return submit("x", {}, {}, "nope"); }, 404,
       "unknown_service_type"},
      {"bad job id", [&] { return http("GET", url("/jobs/echo/not-an-id")); }, 400, "invalid_id"},
      {"bad job id (path tricks)", [&] { return http("GET", url("/jobs/echo/..%2F..%2Fetc")); },
       400, "invalid_id"},
      {"unknown job",
       [&] { return http("GET", url("/jobs/echo/11111111-1111-4111-8111-111111111111")); }, 404,
       "job_not_found"},
      {"no such route", [&] { return http("GET", url("/nope")); }, 404, "not_found"},
      {"wrong method", [&] { return http("PUT", url("/jobs/echo")); }, 405, "method_not_allowed"},
      {"result of an unknown job",
       [&] { return http("GET", url("/jobs/echo/11111111-1111-4111-8111-111111111111/result")); },
       404, "job_not_found"},
  };
  for (const auto& c : cases) {
    auto r = c.request();
    EXPECT_EQ(r.status, c.status) << c.description << ": " << r.body;
    EXPECT_EQ(error_code(r), c.code) << c.description << ": " << r.body;
  }
  EXPECT_EQ(stored_files(), 0u) << "no input kept for a refused submission";
  EXPECT_EQ(job_records(), 0);
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  EXPECT_EQ(http("GET", url("/healthz")).status, 200) << "the gateway is still up";
}

// A route asked with a method it does not have says which it has (405 with Allow), the probes'
// routes included.
TEST_F(GatewayTest, AWrongMethodIsToldTheRoutesMethods) {
  start_gateway();
  const std::string job = "/jobs/echo/11111111-1111-4111-8111-111111111111";
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {"PUT", "/jobs/echo", "GET, HEAD, POST, OPTIONS"},
      {"DELETE", "/jobs", "GET, HEAD, OPTIONS"},
      {"PATCH", job, "GET, HEAD, DELETE, OPTIONS"},
      {"DELETE", job + "/result", "GET, HEAD, OPTIONS"},
      {"POST", job + "/events", "GET, HEAD, OPTIONS"},
      {"POST", "/healthz", "GET, HEAD, OPTIONS"},
  };
  for (const auto& [method, path, allow] : cases) {
    auto r = http(method, url(path));
    EXPECT_EQ(r.status, 405) << method << " " << path << ": " << r.body;
    EXPECT_EQ(error_code(r), "method_not_allowed") << method << " " << path;
    EXPECT_EQ(r.headers["allow"], allow) << method << " " << path;
  }
}

// A retry with the same key returns the first job — also once the upload's short reservation
// would have lapsed: creating the job gave the key the job's retention (in the same batch as the
// job's record; a reservation left to lapse would let a late retry make a second job).
TEST_F(GatewayTest, IdempotencyKeyReturnsTheFirstJob) {
  start_gateway({{"RELAY_IDEMPOTENCY_RESERVATION", "2s"}});
  auto first = submit("once", {"Idempotency-Key: order-42"});
  ASSERT_EQ(first.status, 202);
  const std::string key = keys_.idempotency("m1", "default", sha256_hex("order-42"));
  EXPECT_EQ(redis::as_optional_string(conn_.command({"GET", key}).get()),
            std::optional<std::string>(str(parse(first), "id")))
      << key;
  EXPECT_GT(redis::as_integer(conn_.command({"PTTL", key}).get()), 60'000)
      << "the job's retention, not the 2 s reservation";
  auto again = submit("once", {"Idempotency-Key: order-42"});
  ASSERT_EQ(again.status, 202);
  EXPECT_EQ(str(parse(first), "id"), str(parse(again), "id"));
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(list(keys_.pending("m1")).size(), 1u);
  EXPECT_EQ(stored_files(), 1u);
  auto other = submit("once", {"Idempotency-Key: order-43"});
  EXPECT_NE(str(parse(other), "id"), str(parse(first), "id"));
}

// Submissions with one key at once make one job. A body received whole claims its key in the
// step that makes the job — no round trip of its own before its input is stored (issue 14) —
// so of requests racing, the first step to run makes the job and the others answer with it,
// their inputs deleted. A body still to come reserves the key first: a retry meanwhile gets 409.
TEST_F(GatewayTest, SubmissionsWithOneIdempotencyKeyAtOnceMakeOneJob) {
  start_gateway();
  const bool standalone = !redis_.cluster();  // (SLOWLOG is per node)
  if (standalone) {
    conn_.command({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
    conn_.command({"SLOWLOG", "RESET"});
  }
  std::vector<HttpResult> answers(8);
  {
    std::vector<std::jthread> threads;
    for (auto& a : answers)
      threads.emplace_back([&] { a = submit("at once", {"Idempotency-Key: burst-1"}); });
  }
  std::set<std::string> ids;
  int made = 0;
  for (const auto& a : answers) {
    ASSERT_EQ(a.status, 202) << a.body;
    ids.insert(str(parse(a), "id"));
    made += a.headers.count("idempotent-replayed") ? 0 : 1;
  }
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(list(keys_.pending("m1")).size(), 1u);
  EXPECT_EQ(stored_files(), 1u) << "the replays' inputs are deleted";
  if (standalone) {
    conn_.command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
    // Every command run (a script's own too): no reservation (SET NX) among them.
    auto log = conn_.command({"SLOWLOG", "GET", "1000"});
    ASSERT_GT(log->elements, 8u);
    for (size_t i = 0; i < log->elements; ++i) {
      const auto argv = redis::as_strings(log->element[i]->element[3]);
      EXPECT_FALSE(argv.size() > 3 && argv[0] == "SET" &&
                   std::find(argv.begin(), argv.end(), "NX") != argv.end())
          << "a key reserved in a round trip of its own: " << argv[1];
    }
  }

  // A body still to come (larger than the gateway waits for before it answers): the key is
  // reserved before it is stored.
  int fd = raw_connect(gateway_->url());
  const std::string half(100'000, 'x');
  const std::string head =
      "POST /jobs/echo?filename=a.bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Idempotency-Key: slow-1\r\nContent-Length: 200000\r\n\r\n" +
      half;
  ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
  const std::string key = keys_.idempotency("m1", "default", sha256_hex("slow-1"));
  ASSERT_TRUE(wait_until(
      [&] {
        return redis::as_integer(conn_.command({"EXISTS", key}).get()) == 1;
      },
      10s));
  auto early = submit("a retry", {"Idempotency-Key: slow-1"});
  EXPECT_EQ(early.status, 409) << early.body;
  EXPECT_EQ(error_code(early), "idempotency_in_progress");
  ASSERT_GT(::send(fd, half.data(), half.size(), MSG_NOSIGNAL), 0);
  const std::string answer = recv_some(fd, 10);
  ::close(fd);
  ASSERT_NE(answer.find("202 Accepted"), std::string::npos) << answer;
  std::smatch id;
  ASSERT_TRUE(std::regex_search(answer, id, std::regex(R"re("id":"([^"]+)")re"))) << answer;
  const std::string slow_id = id[1];
  auto late = submit("a retry", {"Idempotency-Key: slow-1"});
  ASSERT_EQ(late.status, 202) << late.body;
  EXPECT_EQ(str(parse(late), "id"), slow_id);
  EXPECT_EQ(late.headers["idempotent-replayed"], "true");
}

TEST_F(GatewayTest, OpenApiDocumentsEveryRoute) {
  start_gateway();
  auto doc = parse(http("GET", url("/openapi.json")));
  ASSERT_EQ(str(doc, "openapi"), "3.0.3");
  auto& paths = doc.at("paths").as_object();
  struct Route {
    const char* path;
    const char* method;
    std::string probe;  // a request the server answers on this route (not 404/405)
    const char* probe_method;
  } routes[] = {
      {"/jobs/{service_type}", "post", "/jobs/echo", "POST"},
      {"/jobs/{service_type}", "get", "/jobs/echo", "GET"},
      {"/jobs", "get", "/jobs", "GET"},
      {"/jobs/{service_type}/{id}", "get", "/jobs/echo/11111111-1111-4111-8111-111111111111",
       "GET"},
      {"/jobs/{service_type}/{id}", "delete", "/jobs/echo/11111111-1111-4111-8111-111111111111",
       "DELETE"},
      {"/jobs/{service_type}/{id}/result", "get",
       "/jobs/echo/11111111-1111-4111-8111-111111111111/result", "GET"},
      {"/jobs/{service_type}/{id}/events", "get",
       "/jobs/echo/11111111-1111-4111-8111-111111111111/events", "GET"},
      {"/healthz", "get", "/healthz", "GET"},
      {"/readyz", "get", "/readyz", "GET"},
      {"/metrics", "get", "/metrics", "GET"},
      {"/openapi.json", "get", "/openapi.json", "GET"},
  };
  for (const auto& r : routes) {
    ASSERT_TRUE(paths.contains(r.path)) << r.path;
    EXPECT_TRUE(paths.at(r.path).as_object().contains(r.method)) << r.path << " " << r.method;
    auto res = http(r.probe_method, url(r.probe));
    // The documented statuses of this operation include what the server answered.
    auto& responses =
        paths.at(r.path).as_object().at(r.method).as_object().at("responses").as_object();
    EXPECT_TRUE(responses.contains(std::to_string(res.status)))
        << r.probe << " answered " << res.status;
  }
  EXPECT_EQ(paths.size(), 9u) << "every documented path is served";
}

// relay_queue_oldest_age_seconds is the wait of the job waiting longest — the one at the left of
// pending, where relays take, behind priority jobs that jumped in there — not of the newest (it
// read the right end: ~0 s under steady submissions, so an alert on it never fired).
TEST_F(GatewayTest, TheOldestWaitIsTheLongestWaitingJobs) {
  start_gateway({{"RELAY_SERVER_PRIORITY_HEADER", "X-Priority"}});
  auto oldest = [&] {
    const auto m = http("GET", url("/metrics")).body;
    const std::string name = "relay_queue_oldest_age_seconds{model=\"m1\"} ";
    const auto at = m.find(name);
    return at == std::string::npos ? -1.0 : std::atof(m.c_str() + at + name.size());
  };
  EXPECT_EQ(oldest(), 0) << "nothing waiting";
  const std::string first = submit_id("first");
  submit_id("second");
  // The first job came ten minutes ago (its record says so: no waiting in a test).
  conn_.command({"HSET", keys_.job("m1", first), "created_at",
                 format_rfc3339(wall_now() - std::chrono::minutes(10))});
  submit_id("third");
  ASSERT_EQ(submit("urgent", {"X-Priority: 1"}).status, 202);
  const double age = oldest();
  EXPECT_GE(age, 600) << "the first job's wait";
  EXPECT_LT(age, 660);
}

TEST_F(GatewayTest, MetricsExposeQueuesAndCounters) {
  start_gateway();
  submit_id("counted");
  auto m = http("GET", url("/metrics"));
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("relay_jobs_submitted_total{service_type=\"echo\"} 1"), std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("relay_queue_depth{model=\"m1\",queue=\"pending\"} 1"), std::string::npos);
  EXPECT_NE(m.body.find(
                "relay_http_requests_total{route=\"POST /jobs/{service_type}\",status=\"202\"} 1"),
            std::string::npos);
  EXPECT_NE(m.body.find("relay_queue_oldest_age_seconds{model=\"m1\"}"), std::string::npos);
  // The process's memory: resident, and its heap in use (never nothing: a gateway holds its
  // pools, buffers and configuration; ~300 KiB at start under AddressSanitizer, ~2 MiB without).
  for (const char* name : {"process_resident_memory_bytes", "relay_gateway_heap_in_use_bytes"})
    EXPECT_GT(metric_value(m.body, name), 64 << 10) << name;
}

// The Grafana dashboard (the chart's files/relay-dashboard.json) queries only metrics the gateway
// exports.
TEST_F(GatewayTest, TheGrafanaDashboardUsesExportedMetrics) {
  start_gateway();
  const std::string metrics = http("GET", url("/metrics")).body;
  std::ifstream f(std::string(RELAY_TEST_SOURCE_DIR) +
                  "/deploy/helm/relay/files/relay-dashboard.json");
  const std::string dashboard((std::istreambuf_iterator<char>(f)), {});
  ASSERT_FALSE(dashboard.empty());
  json::parse(dashboard);  // valid JSON
  std::set<std::string> names;
  const std::regex metric("relay_[a-z_]+");
  for (std::sregex_iterator it(dashboard.begin(), dashboard.end(), metric), end; it != end; ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (name.ends_with(suffix)) name.resize(name.size() - std::string(suffix).size());
    names.insert(name);
  }
  EXPECT_GE(names.size(), 10u);
  for (const auto& name : names)
    EXPECT_NE(metrics.find("# TYPE " + name + " "), std::string::npos) << name;
}

// The alerting rules (the chart's files/relay-alerts.yaml; promtool tests their logic in
// deploy/check) name only metrics the gateway exports, and each label value they match on is one
// the gateway writes: a misspelt metric or value would leave an alert that never fires.
TEST_F(GatewayTest, TheAlertRulesUseExportedMetrics) {
  start_gateway();
  InferenceServer ok;
  submit_id("completes");
  ASSERT_EQ(start_relay(ok)->wait_exit(20s), 0);
  InferenceServer refusing({.status = 422});
  submit_id("fails");
  ASSERT_EQ(start_relay(refusing)->wait_exit(20s), 0);
  std::string metrics;
  ASSERT_TRUE(wait_until([&] {
    metrics = http("GET", url("/metrics")).body;
    return metrics.find("relay_jobs_finished_total{model=\"m1\",status=\"failed\"} 1") !=
           std::string::npos;
  })) << metrics;
  EXPECT_NE(metrics.find("\nrelay_redis_up 1\n"), std::string::npos) << metrics;

  std::ifstream f(std::string(RELAY_TEST_SOURCE_DIR) +
                  "/deploy/helm/relay/files/relay-alerts.yaml");
  std::string rules, line;
  while (std::getline(f, line))
    if (!line.starts_with("#")) rules += line + "\n";
  ASSERT_FALSE(rules.empty());
  // The sample lines of a metric: "name{labels} value" or "name value".
  auto samples = [&](const std::string& name) {
    std::vector<std::string> out;
    std::istringstream in(metrics);
    for (std::string l; std::getline(in, l);)
      if (l.starts_with(name + "{") || l.starts_with(name + " ")) out.push_back(l);
    return out;
  };
  const std::regex selector(R"((relay_[a-z_]+)(\{([^}]*)\})?)");
  const std::regex matcher(R"(([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)\")");
  std::set<std::string> names;
  for (std::sregex_iterator it(rules.begin(), rules.end(), selector), end; it != end; ++it) {
    const std::string name = (*it)[1];
    names.insert(name);
    EXPECT_NE(metrics.find("# TYPE " + name + " "), std::string::npos) << name;
    const std::string matchers = (*it)[3];
    for (std::sregex_iterator m(matchers.begin(), matchers.end(), matcher); m != end; ++m) {
      const std::string label = (*m)[1], op = (*m)[2], value = (*m)[3];
      const auto lines = samples(name);
      if (op == "=") {
        const std::string pair = label + "=\"" + value + "\"";
        EXPECT_TRUE(
            std::ranges::any_of(lines, [&](auto& l) { return l.find(pair) != std::string::npos; }))
            << name << "{" << pair << "} is never written";
      } else if (!lines.empty()) {  // (a counter nothing has counted yet has no samples)
        EXPECT_TRUE(lines.front().find(label + "=\"") != std::string::npos)
            << name << " has no label " << label;
      }
    }
  }
  EXPECT_GE(names.size(), 8u);
}

TEST_F(GatewayTest, FinishedJobsExpireAndTheirObjectsAreDeleted) {
  start_gateway({{"RELAY_GC_JOB_RETENTION", "500ms"}, {"RELAY_GC_INTERVAL", "100ms"}});
  InferenceServer inference;
  auto id = submit_id("short-lived");
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(stored_files(), 2u) << "input and result";
  ASSERT_TRUE(wait_until([&] { return http("GET", url("/jobs/echo/" + id)).status == 404; }, 20s));
  ASSERT_TRUE(wait_until([&] { return stored_files() == 0; }, 20s));
  EXPECT_EQ(job_records(), 0);
}

TEST_F(GatewayTest, KeepObjectsLeavesStorageAlone) {
  start_gateway({{"RELAY_GC_JOB_RETENTION", "300ms"},
                 {"RELAY_GC_INTERVAL", "100ms"},
                 {"RELAY_GC_KEEP_OBJECTS", "true"}});
  InferenceServer inference;
  auto id = submit_id("kept");
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  ASSERT_TRUE(wait_until([&] { return http("GET", url("/jobs/echo/" + id)).status == 404; }, 20s));
  ASSERT_TRUE(wait_until(
      [&] {
        return redis::as_integer(conn_.command({"ZCARD", keys_.gc_due("m1")}).get()) == 0;
      },
      20s));
  EXPECT_EQ(stored_files(), 2u);
}

// SPEC §4.2's race: between a relay's BLMOVE and its lease the id sits in processing without a
// lease. The reap step must not take it then — provoked deterministically with the real step.
TEST_F(GatewayTest, TheDequeueToLeaseWindowIsNeverReaped) {
  auto id = [&] {
    JobRecord r;
    r.id = new_job_id();
    r.service_type = "echo";
    r.model = "m1";
    r.created_at = parse_rfc3339("2026-11-30T00:00:00.000Z");
    store_.submit(r, false);
    return r.id;
  }();
  ASSERT_EQ(store_.pop("m1", 1s), id);  // the relay's BLMOVE; no lease yet
  using redis::ReapOutcome;
  EXPECT_EQ(store_.reap("m1", id, 10s, 3), ReapOutcome::marked) << "first lease-less sighting";
  EXPECT_EQ(store_.reap("m1", id, 10s, 3), ReapOutcome::waiting)
      << "second sighting within the grace";
  EXPECT_EQ(list(keys_.processing("m1")), std::vector<std::string>{id});
  // The relay takes its lease: the mark is dropped, the job is alive.
  ASSERT_EQ(store_.begin("m1", id, "tok", 5s).outcome, redis::BeginOutcome::ok);
  EXPECT_EQ(store_.reap("m1", id, 0s, 3), ReapOutcome::alive);
  EXPECT_TRUE(store_.hash_keys(keys_.suspects("m1")).empty());
  EXPECT_EQ(store_.get("m1", id)->status, JobStatus::processing);
  // And with the real loop running beside a real relay, jobs keep completing un-reaped.
  start_gateway({{"RELAY_GC_REAP_GRACE", "0ms"}});
  InferenceServer inference;
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(submit_id("j"));
  auto relay = start_relay(inference, {}, {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  for (auto& j : ids) {
    auto rec = store_.get("m1", j);
    EXPECT_EQ(rec->status, JobStatus::completed);
    EXPECT_EQ(rec->attempts, 0) << "never reaped";
  }
}

// Client-chosen names appear in job JSON, which must stay valid UTF-8: raw bytes become U+FFFD
// and a long name is cut on a character boundary (at most 255 bytes).
// The gateway's threads carry names an operator can tell apart (top -H, ps -L, perf): each
// pool and loop its own, not forty threads all called relay-gateway.
TEST_F(GatewayTest, ThreadsAreNamedForWhatTheyDo) {
  start_gateway();
  std::multiset<std::string> names;
  auto read_names = [&] {
    names.clear();
    for (const auto& task : std::filesystem::directory_iterator(
             "/proc/" + std::to_string(gateway_->pid()) + "/task")) {
      std::ifstream f(task.path() / "comm");
      std::string name;
      std::getline(f, name);
      names.insert(name);
    }
  };
  const std::vector<std::string> expected{
      "requests",       "storage",  "probes", "redis-batcher", "completions", "notifier",
      "webhook-claims", "webhooks", "reaper", "due-sweep",     "gc"};
  // (The loops name themselves as they start, the listening socket may be open before.)
  EXPECT_TRUE(wait_until(
      [&] {
        read_names();
        return names.count("webhooks") == 16 &&
               std::all_of(expected.begin(), expected.end(),
                           [&](const std::string& n) { return names.count(n) > 0; });
      },
      10s));
  for (const auto& name : expected) EXPECT_TRUE(names.count(name)) << name;
  EXPECT_EQ(names.count("webhooks"), 16u) << "webhooks.concurrency workers";
  EXPECT_LE(names.count("relay-gateway"), 2u) << "the main thread (and at most one more)";
}

TEST_F(GatewayTest, FilenamesBecomeValidUtf8) {
  start_gateway();
  auto raw = http("POST", url("/jobs/echo?filename=a%FFb.txt"), {"Content-Type: text/plain"}, "x");
  ASSERT_EQ(raw.status, 202) << raw.body;
  EXPECT_EQ(str(parse(raw).at("input").as_object(), "filename"),
            "a\xEF\xBF\xBD"
            "b.txt");
  std::string long_name;
  for (int i = 0; i < 150; ++i) long_name += "%C3%A9";  // 300 bytes of "é"
  auto cut =
      http("POST", url("/jobs/echo?filename=" + long_name), {"Content-Type: text/plain"}, "x");
  ASSERT_EQ(cut.status, 202) << cut.body;
  std::string expected;
  for (int i = 0; i < 127; ++i) expected += "\xC3\xA9";  // 254 bytes: the 128th would pass 255
  EXPECT_EQ(str(parse(cut).at("input").as_object(), "filename"), expected);
  EXPECT_EQ(str(job(str(parse(cut), "id")).at("input").as_object(), "filename"), expected);
}

// A result is served with the Content-Type the model answered with, not passed off as JSON; and
// sandboxed, so that HTML a model answered (shaped by whoever sent the input) never runs in the
// gateway's origin, which is the dashboard's.
TEST_F(GatewayTest, AResultKeepsTheModelsContentType) {
  start_gateway();
  InferenceServer html({.content_type = "text/html; charset=utf-8"});
  auto id = submit_id("plain");
  ASSERT_EQ(start_relay(html)->wait_exit(20s), 0);
  auto r = http("GET", url("/jobs/echo/" + id + "/result"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(r.headers["content-security-policy"], "sandbox; default-src 'none'");
  EXPECT_EQ(r.headers["x-content-type-options"], "nosniff");
  InferenceServer json;
  auto id2 = submit_id("json");
  ASSERT_EQ(start_relay(json)->wait_exit(20s), 0);
  EXPECT_EQ(http("GET", url("/jobs/echo/" + id2 + "/result")).headers["content-type"],
            "application/json");
}

}  // namespace
}  // namespace relay::testing
