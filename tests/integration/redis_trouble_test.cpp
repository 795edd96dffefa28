// Redis in trouble under a running gateway and relays: down, restarting, loading, busy, a lost
// reply. Nothing is lost, clients see 503s with Retry-After, never a 4xx or a crash.

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

TEST_F(GatewayTest, RedisOutageIs503ThenRecovery) {
  start_gateway({{"RELAY_REDIS_RETRY_TIMEOUT", "1s"}});
  redis_.stop();
  auto r = submit("during the outage");  // retried for redis.retry_timeout, then refused
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(error_code(r), "redis_unavailable");
  EXPECT_FALSE(r.headers["retry-after"].empty()) << "every 503 says when to retry";
  auto ready = http("GET", url("/readyz"));
  EXPECT_EQ(ready.status, 503);
  EXPECT_FALSE(ready.headers["retry-after"].empty());
  // Unauthenticated: no address or path in the answer (the log has the cause).
  EXPECT_EQ(ready.body.find("127.0.0.1"), std::string::npos) << ready.body;
  EXPECT_EQ(ready.body.find(files_.path()), std::string::npos) << ready.body;
  EXPECT_EQ(http("GET", url("/healthz")).status, 200);
  // Metrics still answer, and say Redis is away (the queue gauges, read from it, are missing).
  auto metrics = http("GET", url("/metrics"));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metric_value(metrics.body, "relay_redis_up"), 0) << metrics.body;
  EXPECT_EQ(stored_files(), 0u) << "the input of a refused submission is removed";
  redis_.start();
  ASSERT_TRUE(wait_until([&] { return http("GET", url("/readyz")).status == 200; }, 20s));
  EXPECT_EQ(submit("after the outage").status, 202);
  EXPECT_EQ(metric_value(http("GET", url("/metrics")).body, "relay_redis_up"), 1);
}

// Readiness and metrics through an outage, with every request thread held by status reads that
// wait out redis.retry_timeout: answered at once, on a pool of their own, not behind those reads.
// Found by trying (2026-12-06): 40 clients polling a job's status through an outage kept /readyz
// and /metrics waiting 11-15 s, past a readiness probe's timeout and a scrape's.
TEST_F(GatewayTest, ReadinessAndMetricsDoNotWaitBehindReadsHeldByAnOutage) {
  start_gateway({{"RELAY_REDIS_RETRY_TIMEOUT", "30s"}, {"RELAY_SERVER_BLOCKING_THREADS", "2"}});
  const std::string id = submit_id("polled");
  redis_.stop();
  std::atomic<int> answered{0};
  std::vector<std::future<void>> polls;
  for (int i = 0; i < 6; ++i)
    polls.push_back(std::async(std::launch::async, [&] {
      http("GET", url("/jobs/echo/" + id));
      ++answered;
    }));
  // Both request threads wait on Redis (each logs its retries); the other reads queue.
  ASSERT_TRUE(wait_until(
      [&] { return occurrences(gateway_->log(), "redis unavailable, retrying") >= 4; }, 20s))
      << gateway_->log();
  auto ready = http("GET", url("/readyz"));
  auto metrics = http("GET", url("/metrics"));
  EXPECT_EQ(answered.load(), 0) << "readiness and metrics were answered behind the held reads";
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metric_value(metrics.body, "relay_redis_up"), 0) << metrics.body;
  redis_.start();  // the held reads end once Redis is back
  for (auto& p : polls) p.wait();
  EXPECT_EQ(answered.load(), 6);
}

// A Redis that stops answering without closing its connections (SIGSTOP: as one blocked by a
// slow command, a paused VM, a network dropping packets). Each request is answered once
// redis.retry_timeout passed — every wait on Redis within what is left of it —, readiness and
// metrics within their own bound; found by trying (2026-12-06): each waited kReadTimeout (30 s),
// a scrape past Prometheus's timeout. A submission refused then may have reached Redis, which
// runs it when it wakes: its answer names the job, and its input is kept — the job is there
// once Redis woke, with its input, and the GC, which holds the input meanwhile, leaves it. (The
// input was deleted at the refusal: a job without its input.)
constexpr long kBelowReadTimeout = 20'000;  // a client's patience, below kReadTimeout

std::string job_id_of_refusal(const HttpResult& r) {
  auto body = json::parse(r.body).as_object();
  const auto* id = body.at("error").as_object().if_contains("job_id");
  return id ? std::string(id->as_string()) : "";
}

TEST_F(GatewayTest, AFrozenRedisIsAnsweredInTimeAndARefusedJobThatRanKeepsItsInput) {
  start_gateway({{"RELAY_REDIS_RETRY_TIMEOUT", "2s"},
                 {"RELAY_GC_INTERVAL", "200ms"},
                 {"RELAY_IDEMPOTENCY_RESERVATION", "1s"}});
  const std::string id = submit_id("before");
  const auto before = stored_files();
  redis_.freeze();
  // First, while the gateway knows of no failure (in cluster mode, a failure marks the slot map
  // stale, and a step that must refresh it first is not sent to a silent node: refused unsent).
  auto refused = http("POST", url("/jobs/echo"), {}, {},
                      {{"file", "during", "in.txt", "text/plain"}}, kBelowReadTimeout);
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_FALSE(refused.headers["retry-after"].empty());
  const std::string ghost = job_id_of_refusal(refused);
  ASSERT_FALSE(ghost.empty()) << "a refusal whose job may exist names it: " << refused.body;
  EXPECT_EQ(stored_files(), before + 1) << "the input is kept while the job may exist";
  auto status = http("GET", url("/jobs/echo/" + id), {}, {}, {}, kBelowReadTimeout);
  EXPECT_EQ(status.status, 503) << status.body;
  EXPECT_FALSE(status.headers["retry-after"].empty());
  auto ready = http("GET", url("/readyz"), {}, {}, {}, 10'000);
  EXPECT_EQ(ready.status, 503) << ready.body;
  auto metrics = http("GET", url("/metrics"), {}, {}, {}, 10'000);
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metric_value(metrics.body, "relay_redis_up"), 0) << metrics.body;
  redis_.thaw();
  ASSERT_TRUE(
      wait_until([&] { return http("GET", url("/jobs/echo/" + ghost)).status == 200; }, 20s))
      << "the submission Redis held ran when it woke";
  ASSERT_TRUE(
      wait_until([&] { return occurrences(gateway_->log(), "held input's job exists") >= 1; }, 20s))
      << gateway_->log();
  EXPECT_EQ(stored_files(), before + 1) << "the job's input stays";
  EXPECT_EQ(http("GET", url("/readyz")).status, 200);
}

// The other way: a submission refused while Redis was frozen, and Redis killed before it woke
// (what it held never ran): once Redis is back, the GC holds the input kept for it and deletes it
// when that falls due, as no job has it.
TEST_F(GatewayTest, AnInputKeptForAJobThatNeverCameIsDeletedByTheGc) {
  start_gateway({{"RELAY_REDIS_RETRY_TIMEOUT", "2s"},
                 {"RELAY_GC_INTERVAL", "200ms"},
                 {"RELAY_IDEMPOTENCY_RESERVATION", "1s"}});
  submit_id("before");  // (the submissions' connection is open: the next is sent on it)
  const auto before = stored_files();
  redis_.freeze();
  auto refused = http("POST", url("/jobs/echo"), {}, {},
                      {{"file", "during", "in.txt", "text/plain"}}, kBelowReadTimeout);
  ASSERT_EQ(refused.status, 503) << refused.body;
  const std::string ghost = job_id_of_refusal(refused);
  ASSERT_FALSE(ghost.empty()) << refused.body;
  EXPECT_EQ(stored_files(), before + 1) << "the input is kept while the job may exist";
  redis_.stop();  // (SIGKILL: what the frozen Redis held is gone)
  redis_.start();
  // (The GC logs the deletion once done: the line, not the file's absence, is what to wait for.)
  ASSERT_TRUE(wait_until(
      [&] { return occurrences(gateway_->log(), "whose job was never created") >= 1; }, 30s))
      << "the GC deletes the input once it knows no job has it\n"
      << gateway_->log();
  EXPECT_EQ(stored_files(), before);
  EXPECT_EQ(occurrences(gateway_->log(), "whose job was never created"), 1u) << gateway_->log();
  EXPECT_EQ(http("GET", url("/jobs/echo/" + ghost)).status, 404);
}

// A job notice subscription whose server fell silent without a word (a crashed node, a
// partition): the notifier pings it after Subscription::kQuiet of quiet and, with no pong
// kQuiet later, subscribes again — so a long-poll on a job that ends meanwhile is answered, not
// only when its wait runs out. (It waited for ever until 2026-12-06: TCP keepalive ends such a
// connection after ~2 h, and event streams and long-polls heard nothing meanwhile.) Through a
// proxy that lets the subscription's connection fall silent; plain Redis only (not in the TLS
// and cluster runs: the proxy reads the commands).
class SilentRedisTest : public GatewayTest {};

TEST_F(SilentRedisTest, AJobNoticeSubscriptionGoneSilentIsMadeAgain) {
  const int port = free_port();
  TempDir dir;
  Process proxy({"/usr/bin/python3", RELAY_TEST_SILENT_PROXY, "--port", std::to_string(port),
                 "--upstream-port", std::to_string(redis_.port()), "--match", "PSUBSCRIBE"},
                Env{}, dir.path() + "/proxy.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 10s));
  start_gateway({{"RELAY_REDIS_URL", "redis://127.0.0.1:" + std::to_string(port)}});
  ASSERT_TRUE(wait_until([&] { return proxy.log().find("silent") != std::string::npos; }, 10s))
      << "the fault was not injected";
  InferenceServer inference({.delay_ms = 3000});
  const std::string id = submit_id("input");
  auto relay = start_relay(inference);  // straight to Redis: its notice is published there
  // A wait longer than the client's: answered only if the job's end reaches the gateway.
  auto r = http("GET", url("/jobs/echo/" + id + "?wait=60"), {}, {}, {}, 40'000);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(parse(r), "status"), "completed") << r.body;
  EXPECT_GE(occurrences(gateway_->log(), "job notice subscription lost"), 1u) << gateway_->log();
}

// A large upload holds its input for deletion once past 1 MiB (see
// AGatewayKilledBetweenStoringAnInputAndCreatingItsJobLeavesNothing); with Redis away at that
// moment the upload goes on without the hold, and its job is created once Redis is back.
TEST_F(GatewayTest, ALargeUploadOutlivesARedisOutageMidBody) {
  start_gateway();
  int fd = raw_connect(gateway_->url());
  const std::string chunk(512 * 1024, 'x');
  const std::string head =
      "POST /jobs/echo?filename=big.bin HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/octet-stream\r\nContent-Length: " +
      std::to_string(6 * chunk.size()) + "\r\n\r\n";
  ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
  ASSERT_GT(::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL), 0);
  ASSERT_TRUE(wait_until([&] { return temporaries() == 1; }, 10s)) << "under way";
  redis_.stop();
  for (int i = 0; i < 4; ++i) ASSERT_GT(::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        return gateway_->log().find("cannot hold a large upload's input") != std::string::npos;
      },
      30s))
      << "past 1 MiB with Redis away";
  redis_.start();
  ASSERT_GT(::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL), 0);
  const std::string answer = recv_some(fd, 30);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 202")) << answer;
  ::close(fd);
}

// Redis restarting, loading, busy, or losing a reply: nothing is lost, no request is answered 4xx
// for it, no relay exits non-zero.
class RedisTroubleTest : public GatewayTest {
 protected:
  // AOF on (a restart keeps the data); DEBUG for POPULATE (a data set that takes a while to load);
  // scripts count as "busy" after 100 ms (BUSY replies to everyone else).
  RedisTroubleTest()
      : GatewayTest(true, {"--enable-debug-command", "yes", "--busy-reply-threshold", "100"}) {}

  // Fills Redis with padding and rewrites the AOF, so that a restart spends a while in LOADING.
  void make_loading_slow() {
    conn_.command({"DEBUG", "POPULATE", "1500000", "pad", "64"});
    conn_.command({"BGREWRITEAOF"});
    ASSERT_TRUE(wait_until(
        [&] {
          auto info = redis::as_string(conn_.command({"INFO", "persistence"}).get());
          return info.find("aof_rewrite_in_progress:0") != std::string::npos &&
                 info.find("aof_rewrite_scheduled:0") != std::string::npos;
        },
        60s));
  }
};

TEST_F(RedisTroubleTest, RestartWhileLoadingCostsNoJobNo4xxAndNoRelayExit) {
  make_loading_slow();
  start_gateway();
  InferenceServer inference;
  // Two relays idle in BLMOVE when Redis goes away, as under KEDA between jobs.
  auto relay_a = start_relay(inference, {{"RELAY_QUEUE_POP_TIMEOUT", "120s"}}, {"--max-jobs", "0"});
  auto relay_b = start_relay(inference, {{"RELAY_QUEUE_POP_TIMEOUT", "120s"}}, {"--max-jobs", "0"});
  auto before = submit_id("before the restart");
  ASSERT_TRUE(wait_until([&] { return str(job(before), "status") == "completed"; }, 20s));

  redis_.stop();  // SIGKILL: AOF (fsync always) keeps every acknowledged write
  // Submissions while Redis is down and then loading: each is retried, none refused.
  std::atomic<bool> restarted{false};
  auto submitter = std::async(std::launch::async, [&] {
    std::vector<HttpResult> results;
    for (int i = 0; i < 8 || !restarted; ++i)
      results.push_back(submit("during " + std::to_string(i)));
    return results;
  });
  redis_.start();
  // The restart really passed through LOADING (otherwise this test proves nothing).
  bool saw_loading = false;
  wait_until(
      [&] {
        try {
          redis_.connect().command({"PING"});
          return true;
        } catch (const redis::TransientError&) {
          saw_loading = true;
          return false;
        } catch (const redis::IoError&) {
          return false;
        }
      },
      30s);
  restarted = true;
  auto results = submitter.get();
  EXPECT_TRUE(saw_loading) << "Redis loaded too fast to test the LOADING window";

  conn_ = redis_.connect();
  std::vector<std::string> ids;
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 202) << r.body;  // not 400 (LOADING was one), not 503 within the window
    if (r.status == 202) ids.push_back(str(parse(r), "id"));
  }
  for (const auto& id : ids)
    EXPECT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 30s)) << id;
  EXPECT_TRUE(relay_a->running()) << "a relay exited because Redis restarted";
  EXPECT_TRUE(relay_b->running()) << "a relay exited because Redis restarted";
  relay_a->signal(SIGTERM);
  relay_b->signal(SIGTERM);
  EXPECT_EQ(relay_a->wait_exit(10s), 0);
  EXPECT_EQ(relay_b->wait_exit(10s), 0);
}

TEST_F(RedisTroubleTest, BusyRedisIsWaitedOutMidJobAndAtSubmit) {
  start_gateway();
  InferenceServer inference({.delay_ms = 1500});
  // A lease that outlives the busy spell: heartbeats fail meanwhile and are retried.
  auto relay = start_relay(inference, {{"RELAY_LEASE_TTL", "4s"}});
  auto id = submit_id("a job whose heartbeats meet a busy Redis");
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
  // A script that keeps Redis busy for 2 s: everyone else gets BUSY after 100 ms.
  auto busy = std::async(std::launch::async, [ep = redis_.endpoint()] {
    auto c = redis::Connection::open(ep);
    c.command({"EVAL",
               "local t = redis.call('TIME') local s = t[1] + t[2] / 1e6 "
               "while true do local n = redis.call('TIME') "
               "if n[1] + n[2] / 1e6 - s > 2 then return 1 end end",
               "0"});
  });
  ASSERT_TRUE(wait_until(
      [&] {
        try {
          conn_.command({"PING"});
          return false;
        } catch (const redis::TransientError&) {
          return true;
        }
      },
      5s))
      << "Redis never answered BUSY";
  auto during = submit("submitted while Redis is busy");
  busy.get();
  EXPECT_EQ(during.status, 202) << during.body;
  EXPECT_EQ(relay->wait_exit(30s), 0);
  EXPECT_EQ(str(job(id), "status"), "completed") << "the lease outlived the busy spell";
}

// Redis at maxmemory (noeviction, as a queue's Redis should be) refuses writes that need memory,
// not reads nor a lease's extension. A submission then is refused with a 503 once
// redis.retry_timeout passed, its input removed; a relay whose job ends meanwhile keeps its lease
// and the outcome (the model's work) until memory is freed, then writes it: not reaped, not run
// twice, even if the relay is told to stop meanwhile. (Until 2026-12-06 the relay exited 1 at the
// refusal and the job ran again after a reap.)
TEST_F(RedisTroubleTest, OutOfMemoryHoldsAFinishedJobsOutcomeUntilMemoryIsFreed) {
  start_gateway({{"RELAY_REDIS_RETRY_TIMEOUT", "1s"}, {"RELAY_GC_REAP_INTERVAL", "300ms"}});
  InferenceServer inference({.delay_ms = 4000});  // (ends once Redis is full)
  constexpr auto kLease = 1500ms;
  auto relay = start_relay(inference, {{"RELAY_LEASE_TTL", "1500ms"}});
  auto id = submit_id("a job that ends while Redis is full");
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
  const auto long_poll = [&] { return http("GET", url("/jobs/echo/" + id + "?wait=1")); };
  EXPECT_EQ(long_poll().status, 200);                  // (flags the record: watched)
  conn_.command({"CONFIG", "SET", "maxmemory", "1"});  // below what it holds: full
  const auto again = long_poll();
  EXPECT_EQ(again.status, 200) << "a long-poll again writes nothing: " << again.body;
  auto refused = submit("refused while Redis is full");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(error_code(refused), "redis_unavailable");
  EXPECT_FALSE(refused.headers["retry-after"].empty());
  EXPECT_EQ(stored_files(), 1u) << "the refused submission's input is removed";
  const auto metrics = http("GET", url("/metrics")).body;
  EXPECT_GT(metric_value(metrics, "relay_redis_refusals_total{reason=\"oom\"}"), 0) << metrics;
  ASSERT_TRUE(wait_until([&] { return relay->log().find("OOM") != std::string::npos; }, 20s))
      << "the finish was never refused";
  // Three leases' time with the outcome refused: the lease is there throughout.
  const auto until = std::chrono::steady_clock::now() + 3 * kLease;
  const std::string lease = keys_.lease("m1", id);
  bool held = true;
  wait_until(
      [&] {
        held = held && redis::as_integer(conn_.command({"EXISTS", lease}).get()) == 1;
        return !held || std::chrono::steady_clock::now() >= until;
      },
      10s);
  EXPECT_TRUE(held) << "the lease lapsed while the outcome waited\n" << relay->log();
  EXPECT_TRUE(relay->running());
  // A SIGTERM meanwhile (the pod stopped) does not throw the outcome away either: the relay
  // goes on trying until the pod's grace period ends it. (It exited 1 until 2026-12-06.)
  relay->signal(SIGTERM);
  ASSERT_TRUE(wait_until(
      [&] {
        return relay->log().find("stopping once the job's outcome is written") != std::string::npos;
      },
      10s))
      << relay->log();
  EXPECT_TRUE(relay->running());
  conn_.command({"CONFIG", "SET", "maxmemory", "0"});
  EXPECT_EQ(relay->wait_exit(30s), 0) << relay->log();
  auto done = job(id);
  EXPECT_EQ(str(done, "status"), "completed");
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u) << inference.events();
  EXPECT_EQ(submit("after memory was freed").status, 202);
}

// A fleet of relays scaled up at once can meet Redis's maxclients: each new connection is
// answered "ERR max number of clients reached" and closed. A relay starting then waits for a
// connection as for a Redis that is away, and runs its job once one frees (it exited 1).
TEST_F(RedisTroubleTest, ARelayMeetingMaxclientsWaitsForAConnection) {
  start_gateway();
  InferenceServer inference;
  auto id = submit_id("a job for a relay that cannot connect yet");
  const auto clients = [&] {
    auto info = redis::as_string(conn_.command({"INFO", "clients"}).get());
    auto at = info.find("connected_clients:");
    return std::stol(info.substr(at + 18));
  };
  conn_.command({"CONFIG", "SET", "maxclients", std::to_string(clients())});
  auto relay = start_relay(inference);
  // (Over TLS, Redis closes such a connection before the handshake ends: a broken connection,
  // retried the same way.)
  ASSERT_TRUE(wait_until(
      [&] {
        const auto log = relay->log();
        return log.find(RedisServer::tls_by_default()
                            ? "TLS handshake"
                            : "max number of clients") != std::string::npos;
      },
      20s))
      << relay->log();
  EXPECT_TRUE(relay->running());
  conn_.command({"CONFIG", "SET", "maxclients", "10000"});
  EXPECT_EQ(relay->wait_exit(30s), 0) << relay->log();
  EXPECT_EQ(str(job(id), "status"), "completed");
}

TEST_F(RedisTroubleTest, LostSubmitReplyIsAnsweredByWhatHappened) {
  // The gateway reaches Redis through a proxy that loses the reply of the first submit step:
  // the job was created, the gateway saw a broken connection.
  // The script is loaded, so the step is one EVALSHA (no NOSCRIPT round first) and the lost
  // reply is the step's own.
  conn_.command({"SCRIPT", "LOAD", std::string(redis::lua::submit.source)});
  int port = free_port();
  TempDir dir;
  Process proxy({"/usr/bin/python3", RELAY_TEST_DROP_REPLY_PROXY, "--port", std::to_string(port),
                 "--upstream-port", std::to_string(redis_.port()), "--match",
                 std::string(redis::lua::submit.sha1)},
                Env{}, dir.path() + "/proxy.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 10s));
  start_gateway({{"RELAY_REDIS_URL", "redis://127.0.0.1:" + std::to_string(port)}});
  auto r = submit("once only");
  ASSERT_EQ(r.status, 202) << r.body;
  EXPECT_NE(proxy.log().find("dropped"), std::string::npos) << "the fault was not injected";
  auto id = str(parse(r), "id");
  EXPECT_EQ(job_records(), 1) << "one job, not two";
  EXPECT_EQ(list(keys_.pending("m1")), std::vector<std::string>{id});
  EXPECT_EQ(str(job(id), "status"), "pending");
}

TEST_F(RedisTroubleTest, PooledConnectionOfARestartedRedisIsReplacedBeforeUse) {
  redis::LazyConnection lazy(redis_.endpoint());
  lazy.get().command({"SET", "k", "v"});
  redis_.stop();
  redis_.start();
  ASSERT_TRUE(wait_until([&] { return port_open(redis_.port()); }, 10s));
  // The old socket is closed by the dead server: seen before use, replaced, no error.
  ASSERT_TRUE(wait_until([&] {
    try {
      return redis::as_string(lazy.get().command({"GET", "k"}).get()) == "v";
    } catch (const redis::TransientError&) {
      return false;  // still loading
    }
  }));
}

}  // namespace
}  // namespace relay::testing
