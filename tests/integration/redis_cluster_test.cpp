// Redis Cluster (three masters from Debian's redis-server): the gateway and relays route each
// step to the master of its model's slot, and ride out what a cluster does while it runs — a
// slot migrating to another master (resharding: ASK, then MOVED), a CLUSTER FAILOVER, and a
// master that stops answering (its replica takes over) — with submissions in flight: every
// submission accepted, every job completed once, no relay exit.
// The gateway and relay suites also run whole against a cluster (ctest prefix "cluster:").

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <boost/json.hpp>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "harness.hpp"
#include "http_client.hpp"
#include "redis/keys.hpp"
#include "redis/slot.hpp"

namespace relay::testing {
namespace {

std::string tail(const std::string& log) {
  return log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
}

// Two models whose slots live on different masters (so that cross-node routing is exercised);
// m1's slot is the one that moves. "frozen": m1's master is SIGSTOPped — it keeps every
// connection open and says nothing, as a node gone without a word or a partition — and the
// cluster fails it over after cluster-node-timeout; relays waiting for a job on it (BLMOVE,
// queue_pop_timeout 120 s) and requests sent to it move to the new master within seconds.
class ClusterChange : public ::testing::TestWithParam<std::string> {};

TEST_P(ClusterChange, WithJobsInFlightLosesNothing) {
  RedisServer redis(false, {}, RedisServer::tls_by_default(), true);
  const redis::Keys keys("", true);
  const int slot = redis::key_slot(keys.pending("m1"));
  ASSERT_NE(redis.node_of_slot(slot), redis.node_of_slot(redis::key_slot(keys.pending("m2"))));
  const bool frozen = GetParam() == "frozen";
  if (GetParam() == "failover" || frozen) redis.add_replicas();

  TempDir files, logs;
  InferenceServer inference;
  Env env = redis.env();
  env["RELAY_STORAGE_URL"] = "file://" + files.path();
  env["RELAY_LOG_LEVEL"] = "debug";  // redirects are logged at debug: the test checks there were
  // With replicas, submissions and outcomes count once a replica has them (else a failover may
  // drop the last ones). (Not when the master freezes: its replica, promoted, has none then;
  // the submissions stop while the test makes sure the replica has everything, and freezes it.)
  if (GetParam() == "failover") env["RELAY_REDIS_WAIT_REPLICAS"] = "1";
  Env gw_env = env;
  gw_env["RELAY_SERVICE_TYPES"] = "echo=m1,other=m2";
  gw_env["RELAY_AUTH_ENABLED"] = "false";
  gw_env["RELAY_REDIS_RETRY_TIMEOUT"] = "30s";
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  std::vector<std::unique_ptr<Process>> relays;
  for (const char* model : {"m1", "m1", "m2"}) {
    Env relay_env = env;
    relay_env["RELAY_MODEL"] = model;
    relay_env["RELAY_INFERENCE_URL"] = inference.url();
    relay_env["RELAY_QUEUE_POP_TIMEOUT"] = "120s";
    relay_env["RELAY_LEASE_TTL"] = "5s";
    relays.push_back(std::make_unique<Process>(
        std::vector<std::string>{relay_binary(), "--max-jobs", "0"}, relay_env,
        logs.path() + "/relay-" + std::to_string(relays.size()) + ".log"));
  }

  struct Submitted {
    std::string service, id;
  };
  std::vector<Submitted> ids;
  auto submit = [&](int i) {
    const std::string svc = i % 3 == 2 ? "other" : "echo";
    auto r = http("POST", gateway.url() + "/jobs/" + svc, {}, {},
                  {{"file", "job " + std::to_string(i), "in.txt", "text/plain"}});
    return std::make_pair(svc, r);
  };
  for (int i = 0; i < 6; ++i) {
    auto [svc, r] = submit(i);
    ASSERT_EQ(r.status, 202) << r.body;
    ids.push_back({svc, field(r, "id")});
  }

  // Submissions keep coming (paced, like a steady client) while the cluster changes.
  std::atomic<bool> changed{false};
  std::mutex submitting;  // held by each submission; by the test while it freezes a master
  auto during = std::async(std::launch::async, [&] {
    std::vector<std::pair<std::string, HttpResult>> out;
    for (int i = 100; out.size() < 20 || !changed; ++i) {
      {
        std::lock_guard lock(submitting);
        out.push_back(submit(i));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return out;
  });
  const int before = redis.node_of_slot(slot);
  {
    struct Done {  // the submitter stops even if the change throws
      std::atomic<bool>& flag;
      ~Done() { flag = true; }
    } done{changed};
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (GetParam() == "reshard") {
      // Key by key, slowly: for a while some of m1's keys are on each node (ASK, TRYAGAIN).
      redis.migrate_slot(slot, (before + 1) % 3, 1, std::chrono::milliseconds(20));
    } else if (frozen) {
      {
        std::lock_guard lock(submitting);
        // A write of its own in m1's slot, then WAIT: the replica has everything before it.
        auto master = redis::Connection::open(redis.node_endpoint(before));
        master.command({"SET", keys.pending("m1") + ":probe", "1"});
        ASSERT_EQ(redis::as_integer(master.command({"WAIT", "1", "5000"}).get()), 1);
        redis.freeze_and_fail_over(before);
      }
    } else {
      redis.failover(before);
    }
  }
  for (const auto& [svc, r] : during.get()) {
    EXPECT_EQ(r.status, 202) << r.body;  // waited out, never a 4xx
    if (r.status == 202) ids.push_back({svc, field(r, "id")});
  }
  EXPECT_NE(redis.node_of_slot(slot), before);
  for (int i = 200; i < 203; ++i) {
    auto [svc, r] = submit(i);
    EXPECT_EQ(r.status, 202) << r.body;
    ids.push_back({svc, field(r, "id")});
  }

  size_t completed = 0;
  wait_until(
      [&] {
        completed = 0;
        for (const auto& j : ids)
          if (field(http("GET", gateway.url() + "/jobs/" + j.service + "/" + j.id), "status") ==
              "completed")
            ++completed;
        return completed == ids.size();
      },
      90s);
  std::string relay_logs;
  for (auto& r : relays) relay_logs += tail(r->log()) + "\n----\n";
  ASSERT_EQ(completed, ids.size()) << "relays:\n"
                                   << relay_logs << "\ngateway:\n"
                                   << tail(gateway.log());
  if (frozen) redis.thaw();  // (it rejoins as a replica)
  // Resharding was seen by the clients mid-way, not only after: they were redirected both
  // ways. (After a failover they may learn the new master from a refreshed map instead.)
  if (GetParam() == "reshard") {
    std::string all_logs = gateway.log();
    for (auto& r : relays) all_logs += r->log();
    EXPECT_NE(all_logs.find("\"MOVED\""), std::string::npos);
    EXPECT_NE(all_logs.find("\"ASK\""), std::string::npos);
  }
  std::set<std::string> unique;
  for (const auto& j : ids) unique.insert(j.id);
  EXPECT_EQ(unique.size(), ids.size());
  // One terminal event per job, per model's stream.
  auto conn = redis.connect();
  long long events = 0;
  for (const char* m : {"m1", "m2"})
    events += redis::as_integer(conn.command({"XLEN", keys.events(m)}).get());
  EXPECT_EQ(events, static_cast<long long>(ids.size()));
  for (auto& r : relays) {
    EXPECT_TRUE(r->running()) << "a relay exited because of the change\n" << tail(r->log());
    r->signal(SIGTERM);
    EXPECT_EQ(r->wait_exit(10s), 0) << tail(r->log());
  }
}

INSTANTIATE_TEST_SUITE_P(Cluster, ClusterChange,
                         ::testing::Values("reshard", "failover", "frozen"));

// relayctl queues finds every model on every master, and reads each one's queues there.
// A pipeline whose calls share a node (a model's steps: one hash tag) goes there in one write;
// one spanning nodes runs call by call; and while the slot migrates, a call redirected by ASK
// is sent again where it belongs — every step still runs exactly once.
TEST(RedisCluster, PipelinesGoToTheSlotsNodeInOneWriteAndFollowRedirects) {
  RedisServer redis(false, {}, RedisServer::tls_by_default(), true);
  const redis::Keys keys("", true);
  auto conn = redis.connect();
  const std::string a = keys.pending("m1");
  const int slot = redis::key_slot(a);
  const int owner = redis.node_of_slot(slot);
  auto node = redis::Connection::open(redis.node_endpoint(owner));
  auto reads = [&] {
    auto info = redis::as_string(node.command({"INFO", "stats"}).get());
    return std::stoll(info.substr(info.find("total_reads_processed:") + 22));
  };
  conn.command({"LLEN", a});  // (the cluster connection's link to that node, opened)
  const auto before = reads();
  auto replies = conn.pipeline({{nullptr, {}, {"RPUSH", a, "x"}},
                                {nullptr, {}, {"RPUSH", keys.processing("m1"), "y"}},
                                {nullptr, {}, {"LLEN", a}}});
  EXPECT_EQ(redis::as_integer(replies[2].get()), 1);
  EXPECT_EQ(reads() - before, 2) << "the INFO, and the three calls in one read";
  // Across nodes: each call on its own node.
  std::string other;
  for (const char* m : {"m2", "asr", "ocr", "tts", "llm"})
    if (redis.node_of_slot(redis::key_slot(keys.pending(m))) != owner) other = keys.pending(m);
  ASSERT_FALSE(other.empty());
  replies =
      conn.pipeline({{nullptr, {}, {"RPUSH", a, "x2"}}, {nullptr, {}, {"RPUSH", other, "z"}}});
  EXPECT_EQ(redis::as_integer(replies[0].get()), 2);
  EXPECT_EQ(redis::as_integer(replies[1].get()), 1);
  // The slot moves to another master, a key at a time, while pipelines run: ASK, then MOVED.
  std::atomic<bool> moving{true};
  std::thread mover([&] {
    redis.migrate_slot(slot, (owner + 1) % redis.nodes(), 1, std::chrono::milliseconds(20));
    moving = false;
  });
  int pushed = 2;
  try {
    while (moving.load() || pushed < 40) {
      auto r = conn.pipeline({{nullptr, {}, {"RPUSH", a, "p"}}, {nullptr, {}, {"LLEN", a}}});
      ++pushed;
      EXPECT_EQ(redis::as_integer(r[0].get()), pushed);
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "pipeline threw after " << pushed << ": " << e.what();
  }
  mover.join();
  EXPECT_EQ(redis::as_integer(conn.command({"LLEN", a}).get()), pushed) << "each push ran once";
}

// send() and receive() in cluster mode: calls of one node are written and their replies read
// later, as on a plain connection (a relay taking ahead reads them while the model works) —
// shown by a BLPOP sent, then served by a push made after send() returned; calls spanning nodes
// run at once; a redirect found at receive() is followed there.
TEST(RedisCluster, CallsOfOneNodeSentNowAreReadLater) {
  RedisServer redis(false, {}, RedisServer::tls_by_default(), true);
  const redis::Keys keys("", true);
  auto conn = redis.connect();
  auto other_conn = redis.connect();
  const std::string a = keys.pending("m1");
  conn.send({{nullptr, {}, {"LLEN", a}}, {nullptr, {}, {"BLPOP", a, "10"}}});
  other_conn.command({"RPUSH", a, "pushed after the send"});
  auto replies = conn.receive();
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(redis::as_integer(replies[0].get()), 0);
  ASSERT_EQ(replies[1]->type, REDIS_REPLY_ARRAY) << "the BLPOP waited on the node, not in send()";
  EXPECT_EQ(redis::as_string(replies[1]->element[1]), "pushed after the send");
  // Across nodes: run in send(), handed over by receive().
  std::string other;
  const int owner = redis.node_of_slot(redis::key_slot(a));
  for (const char* m : {"m2", "asr", "ocr", "tts", "llm"})
    if (redis.node_of_slot(redis::key_slot(keys.pending(m))) != owner) other = keys.pending(m);
  ASSERT_FALSE(other.empty());
  conn.send({{nullptr, {}, {"RPUSH", a, "x"}}, {nullptr, {}, {"RPUSH", other, "z"}}});
  replies = conn.receive();
  EXPECT_EQ(redis::as_integer(replies[0].get()), 1);
  EXPECT_EQ(redis::as_integer(replies[1].get()), 1);
  // The slot moved meanwhile: the call answered MOVED at receive() is sent again to its owner.
  conn.send({{nullptr, {}, {"RPUSH", a, "y"}}});
  EXPECT_THROW(conn.send({{nullptr, {}, {"LLEN", a}}}), redis::IoError) << "one send at a time";
  replies = conn.receive();
  EXPECT_EQ(redis::as_integer(replies[0].get()), 2);
  redis.migrate_slot(redis::key_slot(a), (owner + 1) % redis.nodes(), 1000,
                     std::chrono::milliseconds(0));
  conn.send({{nullptr, {}, {"RPUSH", a, "z"}}});
  replies = conn.receive();
  EXPECT_EQ(redis::as_integer(replies[0].get()), 3);
  EXPECT_EQ(redis::as_integer(conn.command({"LLEN", a}).get()), 3) << "each push ran once";
}

// A slot's new owner told after its old one (or gossip reaching them in that order): for a moment
// the old owner answers MOVED to the new one, which answers MOVED back. A command caught in it
// waits for the nodes to agree, then runs once.
TEST(RedisCluster, ACommandCaughtBetweenTwoOwnersWaitsForThemToAgree) {
  RedisServer redis(false, {}, RedisServer::tls_by_default(), true);
  const redis::Keys keys("", true);
  auto conn = redis.connect();
  const std::string a = keys.pending("m1");
  const int slot = redis::key_slot(a);
  const int from = redis.node_of_slot(slot), to = (from + 1) % redis.nodes();
  auto src = redis::Connection::open(redis.node_endpoint(from));
  auto dst = redis::Connection::open(redis.node_endpoint(to));
  const std::string s = std::to_string(slot);
  const std::string src_id = redis::as_string(src.command({"CLUSTER", "MYID"}).get());
  const std::string dst_id = redis::as_string(dst.command({"CLUSTER", "MYID"}).get());
  conn.command({"LLEN", a});  // the slot map loaded, pointing at the old owner
  dst.command({"CLUSTER", "SETSLOT", s, "IMPORTING", src_id});
  src.command({"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id});
  src.command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});  // the old owner first: ping-pong
  auto moved = [](redis::Connection& node) {
    auto info = redis::as_string(node.command({"INFO", "errorstats"}).get());
    auto at = info.find("errorstat_MOVED:count=");
    return at == std::string::npos ? 0LL : std::stoll(info.substr(at + 22));
  };
  const auto moved_before = moved(src);
  auto push = std::async(std::launch::async, [&] { return conn.command({"RPUSH", a, "x"}); });
  EXPECT_TRUE(wait_until([&] { return moved(src) - moved_before >= 3; }))
      << "the command should be sent back and forth";
  for (int n = 0; n < redis.nodes(); ++n)
    if (n != from)
      redis::Connection::open(redis.node_endpoint(n))
          .command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
  EXPECT_EQ(redis::as_integer(push.get().get()), 1);
  EXPECT_EQ(redis::as_integer(dst.command({"LLEN", a}).get()), 1)
      << "it ran once, on the new owner";
}

TEST(RedisCluster, RelayctlQueuesScansEveryMaster) {
  RedisServer redis(false, {}, RedisServer::tls_by_default(), true);
  const redis::Keys keys("", true);
  auto conn = redis.connect();
  std::set<int> nodes;
  const std::vector<std::string> models{"m1", "m2", "asr", "ocr"};
  for (size_t i = 0; i < models.size(); ++i) {
    nodes.insert(redis.node_of_slot(redis::key_slot(keys.pending(models[i]))));
    for (size_t n = 0; n <= i; ++n) conn.command({"RPUSH", keys.pending(models[i]), "id"});
  }
  ASSERT_GE(nodes.size(), 2u) << "the models should spread over the masters";
  TempDir logs;
  Env env = redis.env();
  Process ctl({RELAY_TEST_RELAYCTL_BIN, "--json", "queues"}, env, logs.path() + "/ctl.log");
  ASSERT_EQ(ctl.wait_exit(20s), 0) << ctl.log();
  auto out = boost::json::parse(ctl.log().substr(ctl.log().find('['))).as_array();
  std::map<std::string, long long> pending;
  for (auto& v : out)
    pending[std::string(v.at("model").as_string())] = v.at("pending").to_number<long long>();
  for (size_t i = 0; i < models.size(); ++i)
    EXPECT_EQ(pending[models[i]], static_cast<long long>(i + 1)) << models[i] << ctl.log();
}

}  // namespace
}  // namespace relay::testing
