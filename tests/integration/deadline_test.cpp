// Deadlines end to end: a queue deadline (ttl: not started within it, a job never runs and fails
// `expired`) and an execution limit (timeout: running longer, it is stopped as for a cancel and
// fails `timed_out`), per submission or by the service type's default.

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

std::string error_of(const json::object& job) {
  auto it = job.find("error");
  if (it == job.end() || !it->value().is_object()) return "";
  return str(it->value().as_object(), "code");
}

// The gateway's sweep fails a job whose ttl passed while it waited, and takes it out of pending
// (the scaler counts nothing for it); a relay started afterwards runs only the job without one.
TEST_F(GatewayTest, AJobWhoseTtlPassesInTheQueueNeverRuns) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "100ms"}});
  auto r = submit("short-lived", {}, {{"ttl", "1s"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string short_lived = str(parse(r), "id");
  const std::string lasting = submit_id("lasting");
  EXPECT_TRUE(job(short_lived).at("expires_at").is_string());
  EXPECT_TRUE(job(lasting).at("expires_at").is_null());
  ASSERT_TRUE(wait_until([&] { return str(job(short_lived), "status") == "failed"; }, 10s))
      << gateway_->log();
  EXPECT_EQ(error_of(job(short_lived)), "expired");
  EXPECT_EQ(list(keys_.pending("m1")), std::vector<std::string>{lasting});
  // Counted once the sweep's step returns, a moment after the record shows it.
  EXPECT_TRUE(wait_until(
      [&] {
        return http("GET", url("/metrics")).body.find("relay_jobs_expired_total{model=\"m1\"} 1") !=
               std::string::npos;
      },
      5s));

  InferenceServer inference;
  auto relay = start_relay(inference, {{"RELAY_QUEUE_POP_TIMEOUT", "300ms"}}, {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(str(job(lasting), "status"), "completed");
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u) << inference.events();
}

// Taken before the sweep reached it, an expired job is failed by the relay itself, before the
// model is contacted.
TEST_F(GatewayTest, ARelayFailsAnExpiredJobWithoutCallingTheModel) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "1h"}});
  auto r = submit("late", {}, {{"ttl", "300ms"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = str(parse(r), "id");
  const auto expires = parse_rfc3339(str(job(id), "expires_at"));
  ASSERT_TRUE(expires);
  ASSERT_TRUE(wait_until([&] { return wall_now() > *expires; }, 5s));
  EXPECT_EQ(list(keys_.pending("m1")), std::vector<std::string>{id}) << "the sweep waits an hour";
  InferenceServer inference;
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "failed");
  EXPECT_EQ(error_of(j), "expired");
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 0u) << inference.events();
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
}

// A model slower than the job's timeout is cut off (it sees the request dropped) and the job
// fails timed_out, with its webhook-bearing terminal event like any failure.
TEST_F(GatewayTest, AJobRunningPastItsTimeoutFailsTimedOut) {
  start_gateway();
  InferenceServer inference({.delay_ms = 30'000});
  auto r = submit("slow", {}, {{"timeout", "1s"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = str(parse(r), "id");
  EXPECT_EQ(job(id).at("timeout").to_number<double>(), 1.0);
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "failed"; }, 20s)) << relay->log();
  EXPECT_EQ(error_of(job(id)), "timed_out");
  EXPECT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 5s))
      << inference.events();
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
}

// A job's time limit and the model request's timeout are the job's own: when the job ends in
// time they are disarmed, and nothing rings on the next job the same relay runs past that
// instant (the relay keeps one alarm clock for its life).
TEST_F(GatewayTest, ATimeoutNeverLandsOnTheNextJob) {
  start_gateway();
  InferenceServer inference({.delay_ms = 1000});
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = i == 0 ? submit("first", {}, {{"timeout", "2s"}}) : submit("next");
    ASSERT_EQ(r.status, 202) << r.body;
    ids.push_back(str(parse(r), "id"));
  }
  // A second per job, one after another: the first job's limits (at 2 s and 2.5 s from its
  // start, a second or more to spare) fall while the later ones run.
  auto relay = start_relay(inference, {{"RELAY_INFERENCE_TIMEOUT", "2500ms"}}, {"--max-jobs", "3"});
  ASSERT_EQ(relay->wait_exit(30s), 0) << relay->log();
  for (const auto& id : ids) EXPECT_EQ(str(job(id), "status"), "completed") << relay->log();
  EXPECT_EQ(occurrences(inference.events(), "dropped /predict"), 0u) << inference.events();
}

// Deadlines that are not durations, not positive or beyond 30 days are refused, and nothing is
// stored or queued.
TEST_F(GatewayTest, BadDeadlinesAreRefused) {
  start_gateway();
  for (auto [name, value] : {std::pair{"ttl", "soon"}, std::pair{"ttl", "0"},
                             std::pair{"timeout", "-5s"}, std::pair{"timeout", "800h"}}) {
    auto r = submit("x", {}, {{name, value}});
    EXPECT_EQ(r.status, 400) << name << "=" << value;
    EXPECT_EQ(error_code(r), std::string("invalid_") + name) << r.body;
  }
  auto raw = http("POST", url("/jobs/echo?ttl=forever"), {"Content-Type: text/plain"}, "x");
  EXPECT_EQ(raw.status, 400);
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  EXPECT_EQ(stored_files(), 0u);
}

// The service type's defaults apply when a submission sets none; a submission's own value wins.
TEST_F(GatewayTest, ServiceTypeDeadlinesAreDefaults) {
  Env env = gateway_env();
  env.erase("RELAY_SERVICE_TYPES");
  const int port = free_port();
  env["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(port);
  TempDir dir;
  std::ofstream(dir.path() + "/gateway.yaml")
      << "service_types:\n  echo: {model: m1, ttl: 10m, timeout: 90s}\n";
  Process gw({gateway_binary(), "--config", dir.path() + "/gateway.yaml"}, env,
             dir.path() + "/gw.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 20s)) << gw.log();
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  auto by_default = parse(http("POST", base + "/jobs/echo", {"Content-Type: text/plain"}, "x"));
  auto own = parse(
      http("POST", base + "/jobs/echo?ttl=30s&timeout=5m", {"Content-Type: text/plain"}, "x"));
  auto age = [](const json::object& j) {
    auto created = parse_rfc3339(str(j, "created_at")),
         expires = parse_rfc3339(str(j, "expires_at"));
    return created && expires
               ? std::chrono::duration_cast<std::chrono::seconds>(*expires - *created)
               : std::chrono::seconds(-1);
  };
  EXPECT_EQ(age(by_default), std::chrono::seconds(600));
  EXPECT_EQ(by_default.at("timeout").to_number<double>(), 90.0);
  EXPECT_EQ(age(own), std::chrono::seconds(30));
  EXPECT_EQ(own.at("timeout").to_number<double>(), 300.0);
  gw.signal(SIGTERM);
  EXPECT_EQ(gw.wait_exit(20s), 0) << gw.log();
}

}  // namespace
}  // namespace relay::testing
