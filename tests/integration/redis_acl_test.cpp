// Relay's Redis users, least privilege, as deploy/redis/*.acl give them (README, "Redis users"):
// every step of the gateway and the relay runs with them, and Redis refuses none.

#include <fstream>
#include <set>
#include <sstream>

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

// The rules of a deploy/redis/*.acl file: its words, comments left out.
std::vector<std::string> acl_rules(const std::string& name) {
  std::ifstream in(std::string(RELAY_TEST_SOURCE_DIR) + "/deploy/redis/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<std::string> rules;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("#")) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;) rules.push_back(w);
  }
  return rules;
}

// What Redis's ACL LOG holds (each entry's object: the command, key or channel refused), on every
// node; CONFIG GET, which the gateway's user is not given on purpose (it reads secrets too),
// aside.
std::vector<std::string> refusals(RedisServer& redis) {
  std::vector<std::string> out;
  for (int i = 0; i < redis.nodes(); ++i) {
    auto node = redis::Connection::open(redis.node_endpoint(i));
    auto log = node.command({"ACL", "LOG"});
    for (std::size_t e = 0; e < log->elements; ++e) {
      const auto* entry = log->element[e];
      std::string reason, object, user;
      for (std::size_t f = 0; f + 1 < entry->elements; f += 2) {
        const std::string name = redis::as_string(entry->element[f]);
        if (name == "reason") reason = redis::as_string(entry->element[f + 1]);
        if (name == "object") object = redis::as_string(entry->element[f + 1]);
        if (name == "username") user = redis::as_string(entry->element[f + 1]);
      }
      if (object != "config|get") out.push_back(user + ": " + reason + " " + object);
    }
  }
  return out;
}

// Submit (priority, Idempotency-Key, every webhook event, an events stream), long-poll, result,
// listing, cancel, pause and resume, quotas, a relay killed mid-job reaped and dead-lettered, the
// dead letter requeued, retention and GC, metrics: each with the users deploy/redis gives.
TEST_F(GatewayTest, TheReadmesRedisUsersRunEveryStep) {
  for (int i = 0; i < redis_.nodes(); ++i) {
    auto node = redis::Connection::open(redis_.node_endpoint(i));
    for (const auto& [user, file] :
         {std::pair{"relay-gateway", "relay-gateway.acl"}, std::pair{"relay", "relay.acl"}}) {
      std::vector<std::string> argv{"ACL",   "SETUSER", user,
                                    "reset", "on",      std::string(">") + user + "-secret"};
      for (auto& rule : acl_rules(file)) argv.push_back(rule);
      node.command(argv);
    }
    node.command({"ACL", "LOG", "RESET"});
  }
  const Env as_gateway{{"RELAY_REDIS_USERNAME", "relay-gateway"},
                       {"RELAY_REDIS_PASSWORD", "relay-gateway-secret"}};
  const Env as_relay{{"RELAY_REDIS_USERNAME", "relay"}, {"RELAY_REDIS_PASSWORD", "relay-secret"}};
  WebhookReceiver receiver;
  receiver.start();
  Env env = as_gateway;
  env.merge(Env{{"RELAY_WEBHOOKS_SECRET", WebhookReceiver::kSecret},
                {"RELAY_WEBHOOKS_ALLOW_PRIVATE", "true"},
                {"RELAY_SERVER_PRIORITY_HEADER", "X-Priority"},
                {"RELAY_ADMIN_API_KEYS", sha256_hex("op") + "=admin"},
                {"RELAY_QUOTAS_MAX_PENDING", "100"},
                {"RELAY_GC_MAX_REAP_ATTEMPTS", "1"},
                {"RELAY_GC_JOB_RETENTION", "3s"},
                {"RELAY_GC_INTERVAL", "200ms"}});
  start_gateway(env);
  const std::vector<std::string> op{"Authorization: Bearer op"};
  InferenceServer inference({.delay_ms = 300, .progress_steps = 2});

  auto hooked =
      submit("with webhooks", {},
             {{"callback_url", receiver.url()}, {"webhook_events", "started,progress,terminal"}});
  ASSERT_EQ(hooked.status, 202) << hooked.body;
  const std::string first = str(parse(hooked), "id");
  EventStream stream(url("/jobs/echo/" + first + "/events"));
  const std::vector<std::string> keyed{"X-Priority: 1", "Idempotency-Key: k-1"};
  const std::string second = submit_id("priority, with a key", keyed);
  EXPECT_EQ(submit_id("priority, with a key", keyed), second);
  Env relay_env = as_relay;
  relay_env.merge(Env{{"RELAY_RELAY_PROGRESS_INTERVAL", "50ms"}});
  auto relay = start_relay(inference, relay_env, {"--max-jobs", "0"});
  EXPECT_EQ(str(job(first, "?wait=20"), "status"), "completed");
  EXPECT_EQ(http("GET", url("/jobs/echo/" + first + "/result")).status, 200);
  ASSERT_TRUE(wait_until([&] { return str(job(second), "status") == "completed"; }, 20s));
  ASSERT_TRUE(wait_until([&] { return stream.ended(); }, 20s)) << stream.raw();
  EXPECT_EQ(stream.events().back().name, "completed") << stream.raw();
  EXPECT_EQ(http("GET", url("/jobs/echo?limit=5")).status, 200);
  EXPECT_EQ(http("GET", url("/jobs?status=completed")).status, 200);

  ASSERT_EQ(http("POST", url("/admin/api/models/m1/pause"), op).status, 200);
  const std::string cancelled = submit_id("cancelled while paused");
  EXPECT_EQ(str(parse(http("DELETE", url("/jobs/echo/" + cancelled))), "status"), "cancelled");
  const std::string held = submit_id("held while paused");
  // One cancelled deep in a long queue (cancel.lua): ended where it lies, dropped by a take.
  // (The queue's other ids have no records: takes drop them the same way.)
  std::vector<std::string> filler{"RPUSH", keys_.held("m1")};
  for (int i = 0; i < 600; ++i) filler.push_back("gone-" + std::to_string(i));
  conn_.command(filler);
  const std::string deep = submit_id("cancelled deep in the queue");
  conn_.command(filler);
  EXPECT_EQ(str(parse(http("DELETE", url("/jobs/echo/" + deep))), "status"), "cancelled");
  EXPECT_EQ(redis::as_integer(conn_.command({"SCARD", keys_.dropped("m1")}).get()), 1);
  // One in pending as well (an older binary's): the resume joins the lists (pause.lua).
  conn_.command({"RPUSH", keys_.pending("m1"), "gone-older"});
  ASSERT_EQ(http("POST", url("/admin/api/models/m1/resume"), op).status, 200);
  EXPECT_EQ(str(job(held, "?wait=20"), "status"), "completed");
  EXPECT_TRUE(wait_until(
      [&] {
        return conn_.command({"LLEN", keys_.pending("m1")})->integer == 0;
      },
      20s));
  EXPECT_EQ(redis::as_integer(conn_.command({"SCARD", keys_.dropped("m1")}).get()), 0);
  EXPECT_EQ(http("GET", url("/admin/api/overview"), op).status, 200);
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait_exit(20s), 0) << relay->log();

  // A relay killed mid-job: reaped, dead-lettered (one attempt), requeued, then run.
  InferenceServer slow({.delay_ms = 60'000});
  const std::string crashed = submit_id("its relay is killed");
  Env short_lease = as_relay;
  short_lease.merge(Env{{"RELAY_LEASE_TTL", "1s"}});
  auto doomed = start_relay(slow, short_lease);
  ASSERT_TRUE(wait_until([&] { return str(job(crashed), "status") == "processing"; }, 20s));
  doomed->signal(SIGKILL);
  doomed->wait_exit(10s);
  ASSERT_TRUE(wait_until([&] { return str(job(crashed), "status") == "failed"; }, 30s));
  ASSERT_EQ(http("POST", url("/admin/api/models/m1/deadletter/requeue"), op).status, 200);
  auto last = start_relay(inference, as_relay);
  EXPECT_EQ(last->wait_exit(20s), 0) << last->log();
  EXPECT_EQ(str(job(crashed), "status"), "completed");

  EXPECT_EQ(http("GET", url("/metrics")).status, 200);
  // started, progress and the end's (completed) webhooks, signed and delivered.
  std::set<std::string> events;
  EXPECT_TRUE(wait_until(
      [&] {
        for (const auto& line : receiver.lines()) {
          auto d = boost::json::parse(line).as_object();
          if (d.at("valid").as_bool()) events.insert(str(d, "event"));
        }
        return events.size() == 3;
      },
      20s))
      << receiver.lines().size() << " deliveries\n"
      << gateway_->log();
  // Retention passes: the records expire and the GC deletes their objects.
  EXPECT_TRUE(wait_until([&] { return stored_files() == 0; }, 30s)) << stored_files();
  EXPECT_EQ(refusals(redis_), std::vector<std::string>{});
  EXPECT_EQ(gateway_->log().find("NOPERM"), std::string::npos) << gateway_->log();
}

}  // namespace
}  // namespace relay::testing
