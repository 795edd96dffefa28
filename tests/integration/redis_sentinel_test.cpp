// Redis with Sentinel (a master, a replica, three sentinels from Debian's redis-server): the
// gateway and a relay find the master through the sentinels, and ride out a failover with
// submissions in flight — every submission accepted, every job completed once, no relay exit.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <future>
#include <set>
#include <thread>

#include "harness.hpp"
#include "http_client.hpp"

namespace relay::testing {
namespace {

// "graceful": SENTINEL FAILOVER; "crash": the master is SIGKILLed and the sentinels promote the
// replica once they agree it is down; "graceful_passwords": the first, with the master and the
// sentinels each requiring a password of their own (redis.password, redis.sentinel_password);
// "graceful_tls_passwords": that again with every link TLS only (rediss://, one CA), as a
// production Sentinel with TLS is set up (Bitnami's chart with tls.enabled).
class SentinelFailover : public ::testing::TestWithParam<std::string> {};

// The gateway's environment and a relay's, for a stack on these sentinels.
std::pair<Env, Env> stack_env(const SentinelRedis& redis, const TempDir& files,
                              const InferenceServer& inference) {
  Env env = redis.env();
  env["RELAY_STORAGE_URL"] = "file://" + files.path();
  Env gateway = env, relay = env;
  gateway["RELAY_SERVICE_TYPES"] = "echo=m1";
  gateway["RELAY_AUTH_ENABLED"] = "false";
  relay["RELAY_MODEL"] = "m1";
  relay["RELAY_INFERENCE_URL"] = inference.url();
  return {gateway, relay};
}

TEST_P(SentinelFailover, WithJobsInFlightLosesNothing) {
  const bool passwords = GetParam().ends_with("passwords");
  SentinelRedis redis(passwords, GetParam().find("tls") != std::string::npos);
  TempDir files, logs;
  InferenceServer inference;
  auto [gw_env, relay_env] = stack_env(redis, files, inference);
  gw_env["RELAY_REDIS_WAIT_REPLICAS"] = "1";  // acknowledged = on the replica too
  gw_env["RELAY_REDIS_RETRY_TIMEOUT"] = "30s";
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  relay_env["RELAY_QUEUE_POP_TIMEOUT"] = "120s";
  relay_env["RELAY_LEASE_TTL"] = "5s";
  relay_env["RELAY_REDIS_WAIT_REPLICAS"] = "1";  // an outcome counts once the replica has it
  Process relay({relay_binary(), "--max-jobs", "0"}, relay_env, logs.path() + "/relay.log");

  auto submit = [&](int i) {
    return http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "job " + std::to_string(i), "in.txt", "text/plain"}});
  };
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = submit(i);
    ASSERT_EQ(r.status, 202) << r.body;
    ids.push_back(field(r, "id"));
  }

  // Submissions keep coming while the master changes.
  std::atomic<bool> failed_over{false};
  auto during = std::async(std::launch::async, [&] {
    std::vector<HttpResult> out;
    // Paced (a steady client, not a flood): the relay must be able to finish them all.
    for (int i = 100; out.size() < 10 || !failed_over; ++i) {
      out.push_back(submit(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return out;
  });
  int before = redis.master_port();
  {
    struct Done {  // the submitter stops even if the failover throws
      std::atomic<bool>& flag;
      ~Done() { flag = true; }
    } done{failed_over};
    if (!GetParam().starts_with("crash"))
      redis.failover();
    else
      redis.kill_master();
  }
  for (const auto& r : during.get()) {
    EXPECT_EQ(r.status, 202) << r.body;  // a failover is waited out, never a 4xx
    if (r.status == 202) ids.push_back(field(r, "id"));
  }
  EXPECT_NE(redis.master_port(), before);
  for (int i = 200; i < 203; ++i) {
    auto r = submit(i);
    EXPECT_EQ(r.status, 202) << r.body;
    ids.push_back(field(r, "id"));
  }

  // Every accepted job completes, once, on the new master.
  size_t completed = 0;
  wait_until(
      [&] {
        completed = 0;
        for (const auto& id : ids)
          if (field(http("GET", gateway.url() + "/jobs/echo/" + id), "status") == "completed")
            ++completed;
        return completed == ids.size();
      },
      60s);
  if (completed != ids.size()) {
    for (int n = 0; n < 2; ++n) {
      try {
        auto c = redis.node(n).connect();
        std::cerr << "node " << n << " port " << redis.node(n).port() << " role "
                  << redis::as_string(c.command({"ROLE"})->element[0]) << " jobs "
                  << c.command({"KEYS", "job:*"})->elements << "\n";
      } catch (const std::exception& e) {
        std::cerr << "node " << n << ": " << e.what() << "\n";
      }
    }
    std::cerr << "master now " << redis.master_port() << " was " << before << "\n";
  }
  ASSERT_EQ(completed, ids.size())
      << "relay:\n"
      << relay.log().substr(relay.log().size() > 6000 ? relay.log().size() - 6000 : 0)
      << "\ngateway:\n"
      << gateway.log().substr(gateway.log().size() > 6000 ? gateway.log().size() - 6000 : 0);
  auto master = redis::Connection::open(redis.endpoint());  // the new one
  EXPECT_EQ(redis::as_integer(master.command({"XLEN", "jobs:m1:events"}).get()),
            static_cast<long long>(ids.size()))
      << "one terminal event per job";
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
  EXPECT_TRUE(relay.running()) << "the relay exited because of the failover\n" << relay.log();
  // Each process's watch on +switch-master stayed subscribed (with passwords: it authenticated).
  EXPECT_EQ(relay.log().find("sentinel watch lost"), std::string::npos) << relay.log();
  EXPECT_EQ(gateway.log().find("sentinel watch lost"), std::string::npos) << gateway.log();
  relay.signal(SIGTERM);
  EXPECT_EQ(relay.wait_exit(10s), 0);
}

INSTANTIATE_TEST_SUITE_P(Sentinel, SentinelFailover,
                         ::testing::Values("graceful", "crash", "graceful_passwords",
                                           "graceful_tls_passwords"));

// A master that stops answering and keeps its connections open — a node gone without a word, a
// partition: no reset ever comes — is replaced by the sentinels. A relay waiting idle for a job
// on it (BLMOVE, for the default queue_pop_timeout of 5 minutes) is on the new master within
// seconds and runs the jobs submitted there; the gateway's requests go there too, its job
// notices (a long-poll hears of its job's end), its completion consumer and its webhook sender
// (each had waited 30 s on the silent master: every job's end and webhook came that late). Woken,
// the old master is made a replica, and the record is the new master's: one terminal event per
// job.
TEST(RedisSentinel, ARelayWaitingOnAMasterThatFellSilentMovesToTheNewOne) {
  SentinelRedis redis;
  TempDir files, logs;
  InferenceServer inference({.delay_ms = 2000});
  WebhookReceiver receiver;
  receiver.start();
  auto [gw_env, relay_env] = stack_env(redis, files, inference);
  gw_env["RELAY_REDIS_RETRY_TIMEOUT"] = "30s";
  gw_env["RELAY_WEBHOOKS_SECRET"] = WebhookReceiver::kSecret;
  gw_env["RELAY_WEBHOOKS_ALLOW_PRIVATE"] = "true";  // the receiver is on loopback
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  Process relay({relay_binary(), "--max-jobs", "0"}, relay_env, logs.path() + "/relay.log");
  auto submit = [&](int i) {
    return http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "job " + std::to_string(i), "in.txt", "text/plain"},
                 {"callback_url", receiver.url()}});
  };
  std::vector<std::string> ids;
  auto all_completed = [&] {
    for (const auto& id : ids)
      if (field(http("GET", gateway.url() + "/jobs/echo/" + id), "status") != "completed")
        return false;
    return true;
  };
  auto r = submit(0);
  ASSERT_EQ(r.status, 202) << r.body;
  ids.push_back(field(r, "id"));
  ASSERT_TRUE(wait_until(all_completed, 30s)) << relay.log();

  // The relay waits for the next job on the master, which has everything on its replica.
  const int before = redis.master_port();
  RedisServer& old = redis.node(redis.node(0).port() == before ? 0 : 1);
  ASSERT_TRUE(wait_until([&] { return old.has_blocked_client(); }, 20s)) << relay.log();
  ASSERT_TRUE(redis.replica_caught_up());
  redis.freeze_master();

  std::future<HttpResult> poll;
  for (int i = 1; i <= 3; ++i) {
    r = submit(i);
    ASSERT_EQ(r.status, 202) << r.body;
    ids.push_back(field(r, "id"));
    // A wait longer than the client's: answered only if the job's end reaches the gateway.
    if (i == 1)
      poll = std::async(std::launch::async, [&, id = ids.back()] {
        return http("GET", gateway.url() + "/jobs/echo/" + id + "?wait=60", {}, {}, {}, 20'000);
      });
  }
  // (Before, the relay's one BLMOVE held it on the silent master for its 5 minutes.)
  EXPECT_TRUE(wait_until(all_completed, 60s)) << relay.log();
  // The completion consumer has each end, on the new master, and each job's webhook went out.
  EXPECT_TRUE(wait_until(
      [&] {
        const auto log = gateway.log();
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
          return log.find("\"job finished\",\"job_id\":\"" + id) != std::string::npos;
        });
      },
      15s))
      << gateway.log();
  EXPECT_TRUE(wait_until(
      [&] {
        std::string all;
        for (const auto& line : receiver.lines()) all += line;
        return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
          return all.find(id) != std::string::npos;
        });
      },
      15s))
      << receiver.lines().size() << " webhooks\n"
      << gateway.log();
  EXPECT_TRUE(relay.running()) << relay.log();
  const auto polled = poll.get();
  EXPECT_EQ(polled.status, 200) << polled.body << gateway.log();
  EXPECT_EQ(field(polled, "status"), "completed") << polled.body;

  redis.thaw();
  auto master = redis::Connection::open(redis.endpoint());
  EXPECT_NE(redis.master_port(), before);
  EXPECT_EQ(redis::as_integer(master.command({"XLEN", "jobs:m1:events"}).get()),
            static_cast<long long>(ids.size()))
      << "one terminal event per job";
  relay.signal(SIGTERM);
  EXPECT_EQ(relay.wait_exit(10s), 0) << relay.log();
}

// A job running when its master falls silent keeps its lease: the heartbeat thread's steps (its
// beats, the model's progress reports it records, each second here) wait a sixth of the lease for
// a reply (at least 2 s) and a failed beat is tried again a second later, so the lease is renewed
// on the new master before it runs out, and the job runs once. (Each waited 30 s on the silent
// master: the beats came too late, the lease lapsed, and the job was stopped.)
TEST(RedisSentinel, AJobRunningWhenItsMasterFellSilentKeepsItsLease) {
  SentinelRedis redis;
  TempDir files, logs;
  InferenceServer inference({.delay_ms = 28'000, .progress_steps = 28});  // outliving its lease
  auto [gw_env, relay_env] = stack_env(redis, files, inference);
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  relay_env["RELAY_LEASE_TTL"] = "24s";
  Process relay({relay_binary(), "--max-jobs", "1"}, relay_env, logs.path() + "/relay.log");
  auto r = http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "a long job", "in.txt", "text/plain"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = field(r, "id");
  // Its first report recorded: the heartbeat thread's connection is open, on the master.
  ASSERT_TRUE(wait_until(
      [&] {
        auto j = http("GET", gateway.url() + "/jobs/echo/" + id);
        return j.status == 200 && boost::json::parse(j.body).at("progress").is_object();
      },
      20s))
      << relay.log();
  ASSERT_TRUE(redis.replica_caught_up());
  redis.freeze_master();

  ASSERT_EQ(relay.wait_exit(60s), 0) << relay.log();  // after its one job
  EXPECT_EQ(field(http("GET", gateway.url() + "/jobs/echo/" + id), "status"), "completed");
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u) << inference.events();
  EXPECT_EQ(relay.log().find("lease lost"), std::string::npos) << relay.log();
  redis.thaw();
}

// The gateway's reaper and due sweep leave a master gone silent within seconds, as its other
// loops do (each step's reply waited for kReplyWait, 5 s): a job whose relay died shortly before
// is requeued, and a job whose ttl ran out in pending is failed `expired`, on the new master soon
// after the failover. (Each loop's step had waited 30 s on the silent master, holding crash
// recovery and every deadline that long.)
TEST(RedisSentinel, TheReaperAndTheDueSweepLeaveAMasterThatFellSilent) {
  SentinelRedis redis;
  TempDir files, logs;
  InferenceServer inference({.delay_ms = 60'000});  // the relay dies holding its job
  auto [gw_env, relay_env] = stack_env(redis, files, inference);
  gw_env["RELAY_GC_REAP_INTERVAL"] = "500ms";
  gw_env["RELAY_GC_REAP_GRACE"] = "1s";
  gw_env["RELAY_GC_EXPIRE_INTERVAL"] = "500ms";
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  relay_env["RELAY_LEASE_TTL"] = "4s";
  Process relay({relay_binary(), "--max-jobs", "1"}, relay_env, logs.path() + "/relay.log");
  auto r = http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "crashed", "in.txt", "text/plain"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string crashed = field(r, "id");
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s)) << relay.log();
  relay.signal(SIGKILL);
  ASSERT_NE(relay.wait_exit(10s), 0);
  // Nothing takes it now: it fails `expired` once its ttl runs out, after the failover.
  r = http("POST", gateway.url() + "/jobs/echo?ttl=5s", {"Content-Type: text/plain"}, "late");
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string late = field(r, "id");
  auto status = [&](const std::string& id) {
    return http("GET", gateway.url() + "/jobs/echo/" + id);
  };
  ASSERT_TRUE(redis.replica_caught_up());
  // Neither is due yet: each loop's next pass finds the master silent.
  ASSERT_EQ(field(status(crashed), "status"), "processing");
  ASSERT_EQ(field(status(late), "status"), "pending");
  redis.freeze_master();  // returns once the replica is the master

  // Both by one deadline (each loop's pass had waited 30 s on the silent master).
  bool requeued = false, expired = false;
  wait_until(
      [&] {
        auto j = status(crashed);
        requeued =
            field(j, "status") == "pending" && boost::json::parse(j.body).at("attempts") == 1;
        j = status(late);
        expired = field(j, "status") == "failed" &&
                  boost::json::parse(j.body).at("error").at("code") == "expired";
        return requeued && expired;
      },
      15s);
  EXPECT_TRUE(requeued) << status(crashed).body << gateway.log();
  EXPECT_TRUE(expired) << status(late).body << gateway.log();
  redis.thaw();
}

// Sentinels that require a password (their requirepass; Bitnami's chart sets one by default)
// answer NOAUTH to a client that does not give it, the master's password being another: without
// redis.sentinel_password the relay finds no master (and says why); with it, the job runs.
TEST(RedisSentinel, SentinelsWithAPasswordOfTheirOwnAreGivenIt) {
  SentinelRedis redis(/*passwords=*/true);
  TempDir files, logs;
  InferenceServer inference;
  auto [gw_env, relay_env] = stack_env(redis, files, inference);
  GatewayServer gateway(gw_env);
  auto r = http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "through password-protected sentinels", "in.txt", "text/plain"}});
  ASSERT_EQ(r.status, 202) << r.body << gateway.log();
  const std::string id = field(r, "id");
  relay_env["RELAY_QUEUE_POP_TIMEOUT"] = "1s";
  Env without = relay_env;
  without.erase("RELAY_REDIS_SENTINEL_PASSWORD");
  Process blind({relay_binary(), "--max-jobs", "1"}, without, logs.path() + "/blind.log");
  ASSERT_TRUE(wait_until([&] { return blind.log().find("NOAUTH") != std::string::npos; }, 20s))
      << blind.log();
  blind.signal(SIGTERM);
  blind.wait_exit(10s);
  EXPECT_EQ(field(http("GET", gateway.url() + "/jobs/echo/" + id), "status"), "pending");
  Process relay({relay_binary(), "--max-jobs", "1"}, relay_env, logs.path() + "/relay.log");
  EXPECT_EQ(relay.wait_exit(30s), 0) << relay.log();
  EXPECT_EQ(field(http("GET", gateway.url() + "/jobs/echo/" + id), "status"), "completed");
  // And the settings are checked: a sentinel password outside sentinel mode is a mistake.
  Process misplaced({relay_binary()},
                    {{"RELAY_MODEL", "m1"}, {"RELAY_REDIS_SENTINEL_PASSWORD", "x"}},
                    logs.path() + "/misplaced.log");
  EXPECT_EQ(misplaced.wait_exit(10s), 2);
  EXPECT_NE(misplaced.log().find("redis.sentinel_password"), std::string::npos) << misplaced.log();
}

TEST(RedisSentinel, ConfigNamesTheMasterAndTheMode) {
  TempDir logs;
  Process no_master({relay_binary()},
                    {{"RELAY_MODEL", "m1"},
                     {"RELAY_REDIS_MODE", "sentinel"},
                     {"RELAY_REDIS_URL", "redis://127.0.0.1:26379"}},
                    logs.path() + "/a.log");
  EXPECT_EQ(no_master.wait_exit(10s), 2);
  EXPECT_NE(no_master.log().find("redis.sentinel_master"), std::string::npos) << no_master.log();
  Process typo({relay_binary()}, {{"RELAY_MODEL", "m1"}, {"RELAY_REDIS_MODE", "clustered"}},
               logs.path() + "/b.log");
  EXPECT_EQ(typo.wait_exit(10s), 2);
  EXPECT_NE(typo.log().find("redis.mode"), std::string::npos) << typo.log();
  // Cluster mode has database 0 only: a database in the URL is a config error, not a surprise.
  Process db({relay_binary()},
             {{"RELAY_MODEL", "m1"},
              {"RELAY_REDIS_MODE", "cluster"},
              {"RELAY_REDIS_URL", "redis://127.0.0.1:7000/3"}},
             logs.path() + "/c.log");
  EXPECT_EQ(db.wait_exit(10s), 2);
  EXPECT_NE(db.log().find("database 0 only"), std::string::npos) << db.log();
}

}  // namespace
}  // namespace relay::testing
