// The operator API behind the dashboard (/admin/api): its own keys and roles, the views across
// tenants, and pausing a model's intake — a paused model's jobs wait in its held list, out of
// pending (what the scaler counts), whatever puts them back in the queue, until it is resumed.

#include <cstdio>
#include <fstream>

#include "common/sha256.hpp"
#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

class AdminTest : public GatewayTest {
 protected:
  void start(Env extra = {}) {
    extra.insert({{"RELAY_AUTH_ENABLED", "true"},
                  {"RELAY_SERVER_PRIORITY_HEADER", "X-Priority"},
                  {"RELAY_AUTH_API_KEYS", sha256_hex("tenant-key") + "=acme"},
                  {"RELAY_ADMIN_API_KEYS",
                   sha256_hex("op-admin") + "=admin," + sha256_hex("op-read") + "=read"}});
    start_gateway(std::move(extra));
  }
  HttpResult admin(const std::string& method, const std::string& path,
                   const std::string& key = "op-admin") {
    return http(method, url("/admin/api/" + path), {"Authorization: Bearer " + key});
  }
  std::string submit_as_tenant(const std::string& content, std::vector<std::string> headers = {}) {
    headers.push_back("Authorization: Bearer tenant-key");
    auto r = submit(content, headers);
    EXPECT_EQ(r.status, 202) << r.body;
    return str(parse(r), "id");
  }
  long long llen(const std::string& key) {
    return redis::as_integer(conn_.command({"LLEN", key}).get());
  }
};

TEST_F(AdminTest, OperatorKeysAndRoles) {
  start();
  EXPECT_EQ(admin("GET", "overview", "").status, 401);
  EXPECT_EQ(admin("GET", "overview", "tenant-key").status, 401)
      << "a tenant key is not an operator's";
  EXPECT_EQ(http("GET", url("/jobs/echo"), {"Authorization: Bearer op-admin"}).status, 401)
      << "nor the other way round";
  auto read = admin("GET", "overview", "op-read");
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(str(parse(read), "role"), "read");
  EXPECT_EQ(admin("POST", "models/m1/pause", "op-read").status, 403);
  EXPECT_EQ(admin("GET", "models/m1/jobs?state=nonsense").status, 400);
  EXPECT_EQ(admin("GET", "models/nope/jobs?state=pending").status, 404);
  auto page = http("GET", url("/dashboard"));
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_NE(page.headers["content-security-policy"].find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "nothing loaded from elsewhere";
  EXPECT_EQ(page.body.find("https://"), std::string::npos);
}

// admin.api_keys_file, as the chart mounts the dashboard's Secret: operators' keys are added,
// promoted and revoked without a restart, a file alone makes the dashboard, and a tenant's key
// put in it is refused (the keys before stay).
TEST_F(AdminTest, OperatorKeysInAFileChangeWithoutARestart) {
  TempDir secret;
  const std::string file = secret.path() + "/admin-api-keys";
  auto publish = [&](const std::string& text) {  // a new file renamed over the old, as the kubelet
    std::ofstream(file + ".tmp") << text;
    ASSERT_EQ(std::rename((file + ".tmp").c_str(), file.c_str()), 0);
  };
  publish(sha256_hex("op-1") + "=read\n");
  start_gateway({{"RELAY_AUTH_ENABLED", "true"},
                 {"RELAY_AUTH_API_KEYS", sha256_hex("tenant-key") + "=acme"},
                 {"RELAY_ADMIN_API_KEYS_FILE", file}});
  EXPECT_EQ(http("GET", url("/dashboard")).status, 200);
  EXPECT_EQ(admin("GET", "overview", "op-1").status, 200);
  EXPECT_EQ(admin("POST", "models/m1/pause", "op-1").status, 403);
  EXPECT_EQ(admin("GET", "overview", "op-2").status, 401);

  publish(sha256_hex("op-1") + "=admin\n" + sha256_hex("op-2") + "=read\n");
  ASSERT_TRUE(wait_until([&] { return admin("GET", "overview", "op-2").status == 200; }, 20s))
      << gateway_->log();
  EXPECT_EQ(admin("POST", "models/m1/pause", "op-1").status, 200) << "promoted";
  EXPECT_EQ(admin("POST", "models/m1/resume", "op-1").status, 200);

  publish(sha256_hex("op-2") + "=read\n" + sha256_hex("tenant-key") + "=admin\n");
  ASSERT_TRUE(wait_until(
      [&] {
        return gateway_->log().find("an operator key may not be a tenant's") != std::string::npos;
      },
      20s))
      << gateway_->log();
  EXPECT_EQ(admin("GET", "overview", "tenant-key").status, 401) << "refused whole";
  EXPECT_EQ(admin("GET", "overview", "op-1").status, 200) << "the keys before it stay";

  publish(sha256_hex("op-2") + "=read\n");  // op-1 revoked
  ASSERT_TRUE(wait_until([&] { return admin("GET", "overview", "op-1").status == 401; }, 20s))
      << gateway_->log();
  EXPECT_EQ(admin("GET", "overview", "op-2").status, 200);
  EXPECT_EQ(submit_as_tenant("still a tenant").empty(), false);
}

TEST_F(GatewayTest, WithoutOperatorKeysThereIsNoDashboard) {
  start_gateway();
  EXPECT_EQ(http("GET", url("/dashboard")).status, 404);
  EXPECT_EQ(http("GET", url("/admin/api/overview")).status, 404);
}

TEST_F(AdminTest, ViewsAcrossTenantsAndSearch) {
  start();
  const std::string a = submit_as_tenant("a", {"Idempotency-Key: order-7"});
  const std::string b = submit_as_tenant("b");
  auto overview = parse(admin("GET", "overview"));
  auto m1 = overview.at("models").as_array()[0].as_object();
  EXPECT_EQ(str(m1, "model"), "m1");
  EXPECT_EQ(m1.at("pending").as_int64(), 2);
  EXPECT_FALSE(m1.at("paused").as_bool());
  auto pending = parse(admin("GET", "models/m1/jobs?state=pending")).at("jobs").as_array();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(str(pending[0].as_object(), "id"), a) << "the next to run first";
  EXPECT_EQ(str(pending[0].as_object(), "tenant"), "acme");
  // Search by id, and by the tenant's Idempotency-Key.
  auto by_id = parse(admin("GET", "search?q=" + b)).at("jobs").as_array();
  ASSERT_EQ(by_id.size(), 1u);
  EXPECT_EQ(str(by_id[0].as_object(), "id"), b);
  auto by_key = parse(admin("GET", "search?q=order-7")).at("jobs").as_array();
  ASSERT_EQ(by_key.size(), 1u);
  EXPECT_EQ(str(by_key[0].as_object(), "id"), a);
  EXPECT_TRUE(parse(admin("GET", "search?q=nothing")).at("jobs").as_array().empty());
  // A tenant's listing, and a job's detail; cancel from the dashboard.
  auto listed = parse(admin("GET", "jobs?tenant=acme")).at("jobs").as_array();
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_EQ(str(parse(admin("GET", "jobs/m1/" + a)), "tenant"), "acme");
  auto cancelled = admin("POST", "jobs/m1/" + a + "/cancel");
  EXPECT_EQ(cancelled.status, 200) << cancelled.body;
  EXPECT_EQ(str(parse(cancelled), "status"), "cancelled");
  EXPECT_EQ(admin("POST", "jobs/m1/" + a + "/cancel").status, 409);
}

// A model's throughput on the overview: counted from its completion stream, exactly while few
// jobs finish; past the sample the gateway reads (1,000 entries) extrapolated and marked so (it
// read every entry of each window, up to 10,000, and stopped there).
TEST_F(AdminTest, ThroughputIsExactWhenQuietAndSaysWhenItIsEstimated) {
  start();
  for (const auto& id : {submit_as_tenant("a"), submit_as_tenant("b")})
    ASSERT_EQ(admin("POST", "jobs/m1/" + id + "/cancel").status, 200);
  auto m1 = parse(admin("GET", "overview")).at("models").as_array()[0].as_object();
  EXPECT_EQ(m1.at("finished_last_minute").as_int64(), 2);
  EXPECT_EQ(m1.at("finished_last_15_minutes").as_int64(), 2);
  EXPECT_FALSE(m1.at("finished_last_minute_estimated").as_bool());
  EXPECT_FALSE(m1.at("finished_last_15_minutes_estimated").as_bool());
  // A burst of 1,500 more entries (without a job id: the consumer passes over them).
  for (int i = 0; i < 1500; ++i) conn_.command({"XADD", keys_.events("m1"), "*", "noise", "1"});
  m1 = parse(admin("GET", "overview")).at("models").as_array()[0].as_object();
  EXPECT_TRUE(m1.at("finished_last_minute_estimated").as_bool());
  EXPECT_GE(m1.at("finished_last_minute").as_int64(), 1000);
  EXPECT_TRUE(m1.at("finished_last_15_minutes_estimated").as_bool());
}

TEST_F(AdminTest, APausedModelHoldsItsJobsOutOfPendingUntilResumed) {
  start();
  const std::string before = submit_as_tenant("before");
  auto paused = admin("POST", "models/m1/pause");
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_EQ(parse(paused).at("moved").as_int64(), 1);
  const std::string during = submit_as_tenant("during");
  const std::string urgent = submit_as_tenant("urgent", {"X-Priority: 1"});
  EXPECT_EQ(llen(keys_.pending("m1")), 0) << "the scaler sees nothing";
  EXPECT_EQ(llen(keys_.held("m1")), 3);
  EXPECT_TRUE(parse(admin("GET", "overview"))
                  .at("models")
                  .as_array()[0]
                  .as_object()
                  .at("paused")
                  .as_bool());
  // A relay started now finds nothing to take, and exits on its queue timeout.
  InferenceServer inference;
  auto idle = start_relay(inference, {{"RELAY_QUEUE_POP_TIMEOUT", "300ms"}});
  EXPECT_EQ(idle->wait_exit(20s), 0);
  EXPECT_FALSE(inference.saw("request /predict"));
  // A held job can be cancelled; a cancelled one leaves the held list.
  EXPECT_EQ(
      http("DELETE", url("/jobs/echo/" + during), {"Authorization: Bearer tenant-key"}).status,
      200);
  EXPECT_EQ(llen(keys_.held("m1")), 2);
  // Resumed: the held jobs go back in order, then run.
  auto resumed = admin("POST", "models/m1/resume");
  EXPECT_EQ(parse(resumed).at("moved").as_int64(), 2);
  const auto order = list(keys_.pending("m1"));
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], urgent) << "a priority job is still first";
  EXPECT_EQ(order[1], before);
  auto relay = start_relay(inference, {}, {"--max-jobs", "2"});
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  for (const auto& id : {before, urgent})
    EXPECT_EQ(str(parse(http("GET", url("/jobs/echo/" + id), {"Authorization: Bearer tenant-key"})),
                  "status"),
              "completed");
}

// Whatever puts a job back in the queue while its model is paused puts it in the held list: a
// relay giving its job back at SIGTERM, the reaper's requeue, a dead letter requeued.
TEST_F(AdminTest, RequeuesWhilePausedAreHeldToo) {
  start();
  const std::string id = submit_as_tenant("long");
  InferenceServer slow({.delay_ms = 30'000});
  auto relay = start_relay(slow);
  ASSERT_TRUE(wait_until([&] { return slow.saw("request /predict"); }, 20s));
  ASSERT_EQ(admin("POST", "models/m1/pause").status, 200);
  relay->signal(SIGTERM);  // gives the job back
  EXPECT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(llen(keys_.pending("m1")), 0);
  EXPECT_EQ(list(keys_.held("m1")), std::vector<std::string>{id});
  // A dead letter requeued from the dashboard while paused waits in the held list as well.
  conn_.command({"LMOVE", keys_.held("m1"), keys_.deadletter("m1"), "LEFT", "RIGHT"});
  conn_.command({"HSET", keys_.job("m1", id), "status", "failed", "error_code", "dead_lettered"});
  auto requeued = admin("POST", "models/m1/deadletter/requeue?id=" + id);
  EXPECT_EQ(parse(requeued).at("requeued").as_int64(), 1) << requeued.body;
  EXPECT_EQ(llen(keys_.pending("m1")), 0);
  EXPECT_EQ(list(keys_.held("m1")), std::vector<std::string>{id});
  EXPECT_EQ(admin("POST", "models/m1/deadletter/requeue?id=" + id).status, 404);
}

// A requeue whose reply was lost (the step ran, the gateway saw a broken connection) is retried
// and answered by what happened: 200, the job requeued once. It answered 404 ("no job in the
// dead letter": its own first attempt had taken it out) until 2026-12-06.
TEST_F(AdminTest, ARequeueWhoseReplyWasLostIsAnsweredByWhatHappened) {
  // Loaded, so the step is one EVALSHA (no NOSCRIPT round first) and the lost reply its own.
  conn_.command({"SCRIPT", "LOAD", std::string(redis::lua::requeue_deadletter.source)});
  const int port = free_port();
  TempDir dir;
  Process proxy({"/usr/bin/python3", RELAY_TEST_DROP_REPLY_PROXY, "--port", std::to_string(port),
                 "--upstream-port", std::to_string(redis_.port()), "--match",
                 std::string(redis::lua::requeue_deadletter.sha1)},
                Env{}, dir.path() + "/proxy.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 10s));
  start({{"RELAY_REDIS_URL", "redis://127.0.0.1:" + std::to_string(port)}});
  const std::string id = submit_as_tenant("dead");
  conn_.command({"LMOVE", keys_.pending("m1"), keys_.deadletter("m1"), "LEFT", "RIGHT"});
  conn_.command({"HSET", keys_.job("m1", id), "status", "failed", "error_code", "dead_lettered",
                 "attempts", "3"});
  auto requeued = admin("POST", "models/m1/deadletter/requeue?id=" + id);
  EXPECT_EQ(requeued.status, 200) << requeued.body;
  EXPECT_NE(proxy.log().find("dropped"), std::string::npos) << "the fault was not injected";
  EXPECT_EQ(parse(requeued).at("requeued").as_int64(), 1) << requeued.body;
  EXPECT_EQ(list(keys_.pending("m1")), std::vector<std::string>{id}) << "queued once";
  EXPECT_TRUE(list(keys_.deadletter("m1")).empty());
  EXPECT_EQ(str(parse(admin("GET", "jobs/m1/" + id)), "status"), "pending");
  // Another request is another operator's: the job is not in the dead letter for it.
  EXPECT_EQ(admin("POST", "models/m1/deadletter/requeue?id=" + id).status, 404);
}

}  // namespace
}  // namespace relay::testing
