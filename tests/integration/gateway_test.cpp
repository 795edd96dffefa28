// The gateway end to end: the real binary over HTTP, real redis-server, filesystem storage,
// real relays against the no-op inference server.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "common/hex.hpp"
#include "common/job_id.hpp"
#include "common/time.hpp"
#include "harness.hpp"
#include "http_client.hpp"
#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"
#include "storage/object_keys.hpp"

namespace relay::testing {
namespace {

namespace json = boost::json;

std::string sha256_hex(const std::string& s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return to_hex(d, sizeof d);
}

json::object parse(const HttpResult& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  if (ec || !v.is_object()) return {};
  return v.as_object();
}

std::string str(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
}

int raw_connect(const std::string& gateway_url) {
  auto port = std::stoi(gateway_url.substr(gateway_url.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  return fd;
}

std::string error_code(const HttpResult& r) {
  auto o = parse(r);
  if (auto it = o.find("error"); it != o.end() && it->value().is_object())
    return str(it->value().as_object(), "code");
  return "";
}

class GatewayTest : public ::testing::Test {
 protected:
  GatewayTest() : GatewayTest(false, {}) {}
  GatewayTest(bool persistent_redis, std::vector<std::string> redis_args)
      : redis_(persistent_redis, std::move(redis_args)),
        conn_(redis_.connect()),
        store_(conn_, keys_) {}

  void TearDown() override {
    if (HasFailure() && gateway_) std::cerr << "---- gateway log ----\n" << gateway_->log() << "\n";
  }

  Env gateway_env(Env extra = {}) {
    Env env{{"RELAY_REDIS_URL", redis_.url()},
            {"RELAY_STORAGE_URL", "file://" + files_.path()},
            {"RELAY_SERVICE_TYPES", "echo=m1,other=m2"},
            {"RELAY_AUTH_ENABLED", "false"},
            {"RELAY_GC_REAP_INTERVAL", "100ms"},
            {"RELAY_GC_REAP_GRACE", "300ms"},
            {"RELAY_EVENTS_CLAIM_IDLE", "1s"},
            {"RELAY_WEBHOOKS_ALLOW_PRIVATE", "false"},
            {"RELAY_LOG_LEVEL", "debug"}};
    for (auto& [k, v] : redis_.env()) env[k] = v;
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }
  void start_gateway(Env extra = {}) {
    gateway_ = std::make_unique<GatewayServer>(gateway_env(std::move(extra)));
  }
  std::string url(const std::string& path) const { return gateway_->url() + path; }

  std::unique_ptr<Process> start_relay(const InferenceServer& inference, Env extra = {},
                                       std::vector<std::string> args = {}) {
    Env env{{"RELAY_MODEL", "m1"},
            {"RELAY_REDIS_URL", redis_.url()},
            {"RELAY_STORAGE_URL", "file://" + files_.path()},
            {"RELAY_INFERENCE_URL", inference.url()},
            {"RELAY_RELAY_HEALTH_INTERVAL", "50ms"},
            {"RELAY_QUEUE_POP_TIMEOUT", "2s"}};
    for (auto& [k, v] : redis_.env()) env[k] = v;
    for (auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv{relay_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, env,
                                     logs_.path() + "/relay-" + std::to_string(++relays_) + ".log");
  }

  HttpResult submit(const std::string& content, std::vector<std::string> headers = {},
                    std::vector<FormPart> extra = {}, const std::string& svc = "echo") {
    std::vector<FormPart> form{{"file", content, "input.txt", "text/plain"}};
    form.insert(form.end(), extra.begin(), extra.end());
    return http("POST", url("/jobs/" + svc), headers, {}, form);
  }
  std::string submit_id(const std::string& content, std::vector<std::string> headers = {}) {
    auto r = submit(content, std::move(headers));
    EXPECT_EQ(r.status, 202) << r.body;
    return str(parse(r), "id");
  }
  json::object job(const std::string& id, const std::string& query = "") {
    return parse(http("GET", url("/jobs/echo/" + id + query)));
  }
  std::vector<std::string> list(const std::string& key) { return store_.list(key); }
  // Files under the storage root (all, or only the temporaries of uploads in progress), read
  // while the gateway may be removing folders: a vanished entry ends the walk, not the test.
  std::vector<std::filesystem::path> storage_files(bool only_temporaries = false) {
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    for (std::filesystem::recursive_directory_iterator it(files_.path(), ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code e;
      if (!it->is_regular_file(e)) continue;
      if (!only_temporaries || it->path().filename().string().find(".tmp-") != std::string::npos)
        out.push_back(it->path());
    }
    return out;
  }
  size_t stored_files() { return storage_files().size(); }
  size_t temporaries() { return storage_files(true).size(); }
  long long job_records() {
    auto r = conn_.command({"KEYS", "job:*"});
    return static_cast<long long>(r->elements);
  }

  RedisServer redis_;
  TempDir files_, logs_;
  redis::Connection conn_;
  redis::Keys keys_{"", RedisServer::cluster_by_default()};  // cluster mode tags keys
  redis::JobStore store_;
  std::unique_ptr<GatewayServer> gateway_;
  int relays_ = 0;
};

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
  EXPECT_TRUE(inference.saw("dropped /predict"));
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

TEST_F(GatewayTest, JobWhoseRelayAlwaysDiesIsDeadLettered) {
  start_gateway({{"RELAY_GC_MAX_REAP_ATTEMPTS", "2"}});
  auto id = submit_id("poison");
  InferenceServer slow({.delay_ms = 30'000});
  for (int run = 1; run <= 2; ++run) {
    auto doomed = start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}});
    ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
    doomed->signal(SIGKILL);
    doomed->wait_exit(5s);
    if (run == 1) ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "pending"; }, 20s));
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

TEST_F(GatewayTest, MalformedHttpGetsA400AndTheServerStaysUp) {
  start_gateway();
  // Raw bytes over a socket: not HTTP at all.
  int fd = raw_connect(gateway_->url());
  ASSERT_GE(fd, 0);
  std::string junk = "GARBAGE \x01\x02 nonsense\r\n\r\n";
  ASSERT_GT(::write(fd, junk.data(), junk.size()), 0);
  char buf[512] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf).find("400"), std::string::npos) << buf;
  EXPECT_EQ(http("GET", url("/healthz")).status, 200);
}

TEST_F(GatewayTest, IdempotencyKeyReturnsTheFirstJob) {
  start_gateway();
  auto first = submit("once", {"Idempotency-Key: order-42"});
  auto again = submit("once", {"Idempotency-Key: order-42"});
  ASSERT_EQ(first.status, 202);
  ASSERT_EQ(again.status, 202);
  EXPECT_EQ(str(parse(first), "id"), str(parse(again), "id"));
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(list(keys_.pending("m1")).size(), 1u);
  EXPECT_EQ(stored_files(), 1u);
  auto other = submit("once", {"Idempotency-Key: order-43"});
  EXPECT_NE(str(parse(other), "id"), str(parse(first), "id"));
}

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
  EXPECT_EQ(stored_files(), 0u) << "the input of a refused submission is removed";
  redis_.start();
  ASSERT_TRUE(wait_until([&] { return http("GET", url("/readyz")).status == 200; }, 20s));
  EXPECT_EQ(submit("after the outage").status, 202);
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
      {"/jobs/{service_type}/{id}", "get", "/jobs/echo/11111111-1111-4111-8111-111111111111",
       "GET"},
      {"/jobs/{service_type}/{id}", "delete", "/jobs/echo/11111111-1111-4111-8111-111111111111",
       "DELETE"},
      {"/jobs/{service_type}/{id}/result", "get",
       "/jobs/echo/11111111-1111-4111-8111-111111111111/result", "GET"},
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
  EXPECT_EQ(paths.size(), 7u) << "every documented path is served";
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
}

TEST_F(GatewayTest, SigtermStopsCleanly) {
  start_gateway();
  EXPECT_EQ(gateway_->stop(), 0);
}

// SIGTERM with uploads stalled mid-body: they get server.shutdown_timeout to finish, then are
// cut, and the process exits 0 within that time and a second (it used to wait for ever on the
// pool threads blocked reading them).
TEST_F(GatewayTest, SigtermWithStalledUploadsExitsInTime) {
  start_gateway({{"RELAY_SERVER_SHUTDOWN_TIMEOUT", "2s"}, {"RELAY_SERVER_BLOCKING_THREADS", "2"}});
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    int fd = raw_connect(gateway_->url());
    std::string head =
        "POST /jobs/echo?filename=a.bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        "Content-Length: 1000000\r\n\r\nsome bytes, then nothing";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    stalled.push_back(fd);
  }
  auto uploading = [&] { return temporaries() == 2; };  // both inputs are being stored
  ASSERT_TRUE(wait_until(uploading, 10s)) << gateway_->log();
  // Both blocking threads hold a stalled upload: liveness is answered all the same.
  EXPECT_EQ(http("GET", url("/healthz"), {}, {}, {}, 2000).status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(gateway_->stop(), 0) << gateway_->log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << gateway_->log();
  for (int fd : stalled) ::close(fd);
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

// The gateway's shape (issue 10): a slow client holds a coroutine, never a thread. With two
// request threads and two upload threads, eight uploads stalled mid-body — raw and multipart,
// each with its input already being stored — leave every other request answered: liveness,
// readiness, metrics, status, and new submissions (which would otherwise wait for the idle
// timeout, 60 s). Then the stalled clients go and leave nothing behind.
TEST_F(GatewayTest, StalledUploadsHoldNoThread) {
  start_gateway({{"RELAY_SERVER_BLOCKING_THREADS", "2"}, {"RELAY_SERVER_UPLOAD_THREADS", "2"}});
  const std::string done_id = submit_id("before");
  std::vector<int> stalled;
  for (int i = 0; i < 8; ++i) {
    int fd = raw_connect(gateway_->url());
    std::string head;
    if (i % 2 == 0) {
      head =
          "POST /jobs/echo?filename=a.bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
          "Content-Length: 1000000\r\n\r\nsome bytes, then nothing";
    } else {
      head =
          "POST /jobs/echo HTTP/1.1\r\nHost: x\r\n"
          "Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 1000000\r\n\r\n"
          "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n"
          "the start of a file";
    }
    ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
    stalled.push_back(fd);
  }
  ASSERT_TRUE(wait_until([&] { return temporaries() == 8; }, 10s)) << gateway_->log();
  // Answered at once: a client timeout of 2 s, against the 60 s the stalls would hold a thread.
  constexpr long kPatience = 2000;
  EXPECT_EQ(http("GET", url("/healthz"), {}, {}, {}, kPatience).status, 200);
  EXPECT_EQ(http("GET", url("/readyz"), {}, {}, {}, kPatience).status, 200);
  EXPECT_EQ(http("GET", url("/metrics"), {}, {}, {}, kPatience).status, 200);
  EXPECT_EQ(http("GET", url("/jobs/echo/" + done_id), {}, {}, {}, kPatience).status, 200);
  for (int i = 0; i < 4; ++i) {
    auto r = http("POST", url("/jobs/echo?filename=n.txt"), {"Content-Type: text/plain"},
                  "a new job " + std::to_string(i), {}, kPatience);
    EXPECT_EQ(r.status, 202) << r.body;
  }
  for (int fd : stalled) ::close(fd);
  ASSERT_TRUE(wait_until([&] { return temporaries() == 0; }, 10s)) << gateway_->log();
  EXPECT_EQ(list(keys_.pending("m1")).size(), 5u) << "the five answered submissions, no other";
}

json::object line_json(const std::string& line) {
  return json::parse(line).as_object();
}

class WebhookTest : public GatewayTest {
 protected:
  Env webhook_env(Env extra = {}) {
    Env env{{"RELAY_WEBHOOKS_SECRET", WebhookReceiver::kSecret},
            {"RELAY_WEBHOOKS_ALLOW_PRIVATE", "true"},  // the receiver is on loopback
            {"RELAY_WEBHOOKS_INITIAL_BACKOFF", "100ms"}};
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }
  std::string submit_with_callback(const std::string& callback) {
    auto r = submit("input", {}, {{"callback_url", callback}});
    EXPECT_EQ(r.status, 202) << r.body;
    return str(parse(r), "id");
  }
  std::string webhook_status(const std::string& id) {
    auto j = job(id);
    auto it = j.find("webhook");
    if (it == j.end() || !it->value().is_object()) return "";
    return str(it->value().as_object(), "status");
  }
};

TEST_F(WebhookTest, DeliveredSignedAndVerifiedIndependently) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  auto d = line_json(receiver.lines()[0]);
  EXPECT_TRUE(d.at("valid").as_bool()) << "signature checked by Python's hmac";
  EXPECT_EQ(
      str(d, "id"), "msg_" + [&] {
        std::string s;
        for (char c : id)
          if (c != '-') s += c;
        return s;
      }());
  auto body = d.at("body").as_object();
  EXPECT_EQ(str(body, "id"), id);
  EXPECT_EQ(str(body, "status"), "completed");
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 10s));
  EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 1);
}

TEST_F(WebhookTest, FailingReceiverIsRetriedWithTheSameWebhookId) {
  WebhookReceiver receiver(/*fail_first=*/2);
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  auto lines = receiver.lines();
  ASSERT_EQ(lines.size(), 3u);
  std::set<std::string> ids;
  for (auto& l : lines) ids.insert(str(line_json(l), "id"));
  EXPECT_EQ(ids.size(), 1u) << "retries carry the same webhook-id";
  EXPECT_EQ(line_json(lines[0]).at("status").as_int64(), 500);
  EXPECT_EQ(line_json(lines[2]).at("status").as_int64(), 200);
  EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 3);
}

TEST_F(WebhookTest, ReceiverDownThenUpGetsTheWebhookOnRetry) {
  WebhookReceiver receiver;  // its port is chosen, but nothing listens yet
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "retrying"; }, 20s)) << gateway_->log();
  receiver.start();
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  ASSERT_EQ(receiver.lines().size(), 1u);
  EXPECT_TRUE(line_json(receiver.lines()[0]).at("valid").as_bool());
  EXPECT_GE(job(id).at("webhook").as_object().at("attempts").as_int64(), 2);
}

TEST_F(WebhookTest, TwoReplicasDeliverEachWebhookExactlyOnce) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env({{"RELAY_EVENTS_CONSUMER", "replica-a"}}));
  GatewayServer second(gateway_env(webhook_env({{"RELAY_EVENTS_CONSUMER", "replica-b"}})));
  InferenceServer inference;
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(submit_with_callback(receiver.url()));
  auto relay = start_relay(inference, {}, {"--max-jobs", "8"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& id : ids)
          if (webhook_status(id) != "delivered") return false;
        return true;
      },
      30s));
  auto lines = receiver.lines();
  std::set<std::string> delivered;
  for (auto& l : lines) delivered.insert(str(line_json(l), "id"));
  EXPECT_EQ(lines.size(), 8u) << "one delivery per transition, across two replicas";
  EXPECT_EQ(delivered.size(), 8u);
  // Both replicas consumed events: the work was shared, not duplicated.
  EXPECT_NE(gateway_->log().find("\"job finished\""), std::string::npos);
}

TEST_F(WebhookTest, CallbackWithoutASecretIsRefused) {
  start_gateway();  // no webhooks.secret
  auto r = submit("x", {}, {{"callback_url", "http://example.com/hook"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_code(r), "webhooks_not_configured");
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

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

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

// A receiver that accepts connections and never answers (the kernel completes the handshake of
// a listening socket nobody accepts on) holds five deliveries; another tenant's webhook to a
// healthy receiver still goes out at once, not after the hanging ones time out.
TEST_F(WebhookTest, HangingReceiverDelaysOnlyItsOwnWebhooks) {
  const int hanging_port = free_port();
  int hanging = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(hanging_port));
  ASSERT_EQ(::bind(hanging, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(hanging, 64), 0);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_hanging{hanging};
  WebhookReceiver healthy;
  healthy.start();
  start_gateway(webhook_env({{"RELAY_WEBHOOKS_TIMEOUT", "60s"}}));
  InferenceServer inference;
  const std::string hanging_url = "http://127.0.0.1:" + std::to_string(hanging_port) + "/hook";
  for (int i = 0; i < 5; ++i) submit_with_callback(hanging_url);
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "5"})->wait_exit(30s), 0);
  // Give the sender time to take up the hanging deliveries (they hold their connections).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto id = submit_with_callback(healthy.url());
  ASSERT_EQ(start_relay(inference)->wait_exit(20s), 0);
  // Served promptly: one hanging receiver holds at most webhooks.per_host_concurrency workers.
  // (Before, one sender thread tried deliveries in turn: this waited for the 60 s timeouts.)
  EXPECT_TRUE(wait_until([&] { return healthy.lines().size() == 1; }, 3s)) << gateway_->log();
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 10s));
}

TEST_F(WebhookTest, RetryAfterIsHonoured) {
  WebhookReceiver receiver(/*fail_first=*/1, /*port=*/0, /*retry_after=*/2);
  receiver.start();
  start_gateway(webhook_env());  // initial backoff 100 ms: Retry-After must win
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  auto lines = receiver.lines();
  ASSERT_EQ(lines.size(), 2u);
  double gap = line_json(lines[1]).at("received_at").to_number<double>() -
               line_json(lines[0]).at("received_at").to_number<double>();
  EXPECT_GE(gap, 1.9) << "the second attempt waited for Retry-After";
}

TEST_F(WebhookTest, DeadLetteredJobFiresItsWebhook) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env({{"RELAY_GC_MAX_REAP_ATTEMPTS", "1"}}));
  auto id = submit_with_callback(receiver.url());
  InferenceServer slow({.delay_ms = 30'000});
  auto doomed = start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}});
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
  doomed->signal(SIGKILL);
  doomed->wait_exit(5s);
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 30s)) << gateway_->log();
  auto body = line_json(receiver.lines()[0]).at("body").as_object();
  EXPECT_EQ(str(body, "status"), "failed");
  EXPECT_EQ(str(body.at("error").as_object(), "code"), "dead_lettered");
}

TEST_F(WebhookTest, CompletionWhileTheGatewayIsDownIsDeliveredAfterRestart) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  ASSERT_EQ(gateway_->stop(), 0);
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_TRUE(receiver.lines().empty());
  gateway_->start();
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  EXPECT_EQ(str(line_json(receiver.lines()[0]).at("body").as_object(), "id"), id);
}

TEST_F(WebhookTest, EventsADeadReplicaLeftUnacknowledgedAreClaimed) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());  // creates the consumer group
  ASSERT_EQ(gateway_->stop(), 0);
  InferenceServer inference;
  // Submitted by hand (the gateway is down): the same record the gateway writes.
  auto id = [&] {
    JobRecord r;
    r.id = new_job_id();
    r.service_type = "echo";
    r.model = "m1";
    r.tenant = "default";
    r.input_key = input_object_key("echo", r.id);
    r.callback_url = receiver.url();
    r.created_at = parse_rfc3339("2026-11-30T00:00:00.000Z");
    std::filesystem::create_directories(files_.path() + "/echo/" + r.id);
    std::ofstream(files_.path() + "/" + r.input_key) << "input";
    store_.submit(r, false);
    return r.id;
  }();
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  // A replica reads the event, then dies before acknowledging it.
  auto read = conn_.command({"XREADGROUP", "GROUP", "relay-gateway", "dead-replica", "COUNT", "10",
                             "STREAMS", keys_.events("m1"), ">"});
  ASSERT_EQ(read->type, REDIS_REPLY_ARRAY);
  gateway_->start();  // events.claim_idle is 1 s in these tests
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  EXPECT_EQ(str(line_json(receiver.lines()[0]).at("body").as_object(), "id"), id);
  ASSERT_TRUE(wait_until(
      [&] {
        return redis::as_integer(
                   conn_.command({"XPENDING", keys_.events("m1"), "relay-gateway"})->element[0]) ==
               0;
      },
      10s));
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

TEST_F(GatewayTest, ClientDisconnectingMidUploadLeavesNothing) {
  start_gateway();
  int fd = raw_connect(gateway_->url());
  ASSERT_GE(fd, 0);
  std::string head =
      "POST /jobs/echo HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/octet-stream\r\nContent-Length: 1000000\r\n\r\n";
  std::string part(50'000, 'x');
  ASSERT_GT(::write(fd, head.data(), head.size()), 0);
  ASSERT_GT(::write(fd, part.data(), part.size()), 0);
  ::close(fd);  // gone, 950 kB short
  ASSERT_TRUE(wait_until(
      [&] { return gateway_->log().find("upload abandoned by the client") != std::string::npos; },
      20s))
      << gateway_->log();
  EXPECT_EQ(stored_files(), 0u);
  EXPECT_EQ(job_records(), 0);
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  EXPECT_EQ(http("GET", url("/healthz")).status, 200);
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

// Keys: base64 of bytes 0..31 and 32..63.
constexpr const char* kKey1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
constexpr const char* kKey2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

class EncryptionTest : public GatewayTest {
 protected:
  Env keys(const std::string& active, bool with_k2 = false) {
    Env env{{"RELAY_ENCRYPTION_ENABLED", "true"},
            {"RELAY_ENCRYPTION_ACTIVE_KEY", active},
            {"RELAY_ENCRYPTION_KEY_K1", kKey1}};
    if (with_k2) env["RELAY_ENCRYPTION_KEY_K2"] = kKey2;
    return env;
  }
  std::string file(const std::string& rel) {
    std::ifstream f(files_.path() + "/" + rel, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  void put_file(const std::string& rel, const std::string& data) {
    std::ofstream(files_.path() + "/" + rel, std::ios::binary) << data;
  }
};

TEST_F(EncryptionTest, JobsAreCiphertextAtRestAndPlaintextToTheModelAndTheClient) {
  start_gateway(keys("k1"));
  InferenceServer inference;
  const std::string secret = "the patient's confidential recording";
  auto id = submit_id(secret);
  std::string stored = file("echo/" + id + "/input");
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(static_cast<unsigned char>(stored[0]), 40) << "Tink header length for AES-256";
  EXPECT_EQ(stored.find("confidential"), std::string::npos);
  EXPECT_EQ(store_.get("m1", id)->key_id, "k1");
  // An independent implementation holding the key reads it (Tink format, bound to "<id>/input").
  TempDir tmp;
  std::ofstream(tmp.path() + "/ct", std::ios::binary) << stored;
  std::string cmd = std::string("/usr/bin/python3 ") + RELAY_TEST_TINK_PY +
                    " decrypt 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f " +
                    id + "/input 1048576 < " + tmp.path() + "/ct > " + tmp.path() + "/pt";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream pt(tmp.path() + "/pt");
  std::string plain((std::istreambuf_iterator<char>(pt)), std::istreambuf_iterator<char>());
  EXPECT_EQ(plain, secret);

  auto relay = start_relay(inference, keys("k1"));
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  ASSERT_EQ(str(j, "status"), "completed") << j.at("error");
  EXPECT_TRUE(j.at("timings").as_object().contains("decrypt"));
  std::string stored_result = file("echo/" + id + "/result.json");
  EXPECT_EQ(static_cast<unsigned char>(stored_result[0]), 40);
  EXPECT_EQ(stored_result.find("sha256"), std::string::npos) << "the result is encrypted too";
  auto result = http("GET", url("/jobs/echo/" + id + "/result"));
  EXPECT_EQ(result.status, 200);
  // The model saw the plaintext: its answer reports the size of the original bytes.
  EXPECT_NE(result.body.find("\"size\":" + std::to_string(secret.size())), std::string::npos)
      << result.body;
}

// Inputs larger than an S3 part, encrypted on their way in, take both S3 paths of the push
// writer: a raw body of known length (its ciphertext size known too) is one streamed PUT, a
// multipart form's file (length unknown) a multipart upload. The model sees the exact bytes.
TEST_F(EncryptionTest, LargeInputsReachS3WholeAndTheModelExactly) {
  S3Server s3;
  Env storage = s3.env();
  storage["RELAY_STORAGE_S3_PART_SIZE"] = std::to_string(5 << 20);
  Env env = keys("k1");
  for (auto& [k, v] : storage) env[k] = v;
  start_gateway(env);
  std::string data(7 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + (i >> 12));
  auto raw = http("POST", url("/jobs/echo?filename=big.bin"),
                  {"Content-Type: application/octet-stream"}, data);
  ASSERT_EQ(raw.status, 202) << raw.body << gateway_->log();
  auto form = http("POST", url("/jobs/echo"), {}, {},
                   {FormPart{"file", data, "big.bin", "application/octet-stream"}});
  ASSERT_EQ(form.status, 202) << form.body << gateway_->log();
  InferenceServer inference;
  auto relay = start_relay(inference, env, {"--max-jobs", "2"});
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& submitted : {raw, form}) {
    const std::string id = field(submitted, "id");
    auto j = job(id);
    ASSERT_EQ(str(j, "status"), "completed") << j.at("error");
    EXPECT_EQ(j.at("input").as_object().at("size").as_int64(),
              static_cast<std::int64_t>(data.size()));
    auto result = http("GET", url("/jobs/echo/" + id + "/result"));
    EXPECT_NE(result.body.find("\"sha256\":\"" + sha256_hex(data) + "\""), std::string::npos)
        << result.body;
  }
}

TEST_F(EncryptionTest, KeyRotationNeedsNoDowntime) {
  start_gateway(keys("k1"));
  auto old_job = submit_id("under key 1");
  ASSERT_EQ(gateway_->stop(), 0);
  gateway_ =
      std::make_unique<GatewayServer>(gateway_env(keys("k2", true)));  // k2 active, k1 still loaded
  auto new_job = submit_id("under key 2");
  EXPECT_EQ(store_.get("m1", old_job)->key_id, "k1");
  EXPECT_EQ(store_.get("m1", new_job)->key_id, "k2");
  InferenceServer inference;
  auto relay = start_relay(inference, keys("k2", true), {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(20s), 0);
  for (auto& id : {old_job, new_job}) {
    EXPECT_EQ(str(job(id), "status"), "completed") << id;
    EXPECT_EQ(http("GET", url("/jobs/echo/" + id + "/result")).status, 200) << id;
  }
}

TEST_F(EncryptionTest, DamagedInputFailsTheJobAndTheModelIsNeverCalled) {
  start_gateway(keys("k1"));
  InferenceServer inference;
  auto id = submit_id("will be damaged");
  std::string ct = file("echo/" + id + "/input");
  ct[45] ^= 1;  // inside the first segment
  put_file("echo/" + id + "/input", ct);
  auto relay = start_relay(inference, keys("k1"));
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "failed");
  EXPECT_EQ(str(j.at("error").as_object(), "code"), "decryption_failed");
  EXPECT_TRUE(inference.events().empty()) << "no request reached the model";
}

TEST_F(EncryptionTest, ARelayWithoutTheKeyFailsTheJobClearly) {
  start_gateway(keys("k2", true));
  InferenceServer inference;
  auto id = submit_id("needs k2");
  auto relay = start_relay(inference, keys("k1"));  // has k1 only
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  EXPECT_EQ(str(j.at("error").as_object(), "code"), "decryption_failed");
  EXPECT_NE(str(j.at("error").as_object(), "message").find("'k2'"), std::string::npos);
  EXPECT_TRUE(inference.events().empty());
}

TEST_F(EncryptionTest, EnabledWithoutTheActiveKeyRefusesToStart) {
  Env env = gateway_env(
      {{"RELAY_ENCRYPTION_ENABLED", "true"}, {"RELAY_ENCRYPTION_ACTIVE_KEY", "missing"}});
  env["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(free_port());
  TempDir dir;
  Process gw({gateway_binary()}, env, dir.path() + "/gw.log");
  ASSERT_EQ(gw.wait_exit(10s), 2);
  EXPECT_NE(gw.log().find("encryption.active_key"), std::string::npos);
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

// With 128 open files allowed (soft and hard) and 200 clients connecting, the gateway fits its
// connections under the limit, refuses the rest, and serves again once they leave: it neither
// stops nor exits (the accept loop used to end on EMFILE, and the process then exited 0).
TEST_F(GatewayTest, ALowOpenFileLimitIsSurvived) {
  Env env =
      gateway_env({{"RELAY_SERVER_BLOCKING_THREADS", "2"}, {"RELAY_SERVER_UPLOAD_THREADS", "2"}});
  const int port = free_port();
  env["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(port);
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  TempDir dir;
  Process gw({"/usr/bin/prlimit", "--nofile=128:128", "--", gateway_binary()}, env,
             dir.path() + "/gw.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 20s)) << gw.log();
  std::vector<int> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(raw_connect(base));
  // Requests on fresh connections are refused (closed) or answered; none hangs the server.
  for (int i = 0; i < 20; ++i) http("GET", base + "/healthz", {}, {}, {}, 2000);
  EXPECT_TRUE(gw.running()) << gw.log();
  for (int c : clients)
    if (c >= 0) ::close(c);
  EXPECT_TRUE(wait_until([&] { return http("GET", base + "/healthz").status == 200; }, 20s))
      << gw.log();
  // Submissions work too (storage, Redis: the reserve kept descriptors for them).
  auto r = http("POST", base + "/jobs/echo?filename=a.txt", {"Content-Type: text/plain"}, "x");
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_NE(gw.log().find("\"max_connections\":32"), std::string::npos)
      << "128 files less the reserve (64 + 8 per pool thread)\n"
      << gw.log();
  gw.signal(SIGTERM);
  EXPECT_EQ(gw.wait_exit(20s), 0) << gw.log();
}

namespace {
// Sends a raw-body submission of `total` bytes in `step`-byte pieces every `every`; returns the
// HTTP status line's code, or 0 when the gateway cut the connection without an answer.
int trickle_upload(const std::string& base, size_t total, size_t step,
                   std::chrono::milliseconds every) {
  int fd = raw_connect(base);
  std::string head =
      "POST /jobs/echo?filename=slow.bin HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/octet-stream\r\nContent-Length: " +
      std::to_string(total) + "\r\n\r\n";
  bool cut = ::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0;
  const std::string piece(step, 'x');
  for (size_t sent = 0; !cut && sent < total; sent += step) {
    std::this_thread::sleep_for(every);
    size_t n = std::min(step, total - sent);
    cut = ::send(fd, piece.data(), n, MSG_NOSIGNAL) < 0;
  }
  char buf[512] = {};
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 12 || std::string_view(buf).substr(0, 9) != "HTTP/1.1 ") return 0;
  return std::atoi(buf + 9);
}
}  // namespace

// Progress is bytes, not filled buffers: a client on a bad link (2 KiB/s here, for more than
// twice body_idle_timeout) completes its upload; a trickle under min_upload_rate is cut.
TEST_F(GatewayTest, SlowUploadsCompleteAndTricklesAreCut) {
  start_gateway(
      {{"RELAY_SERVER_BODY_IDLE_TIMEOUT", "4s"}, {"RELAY_SERVER_MIN_UPLOAD_RATE", "1024"}});
  EXPECT_EQ(trickle_upload(gateway_->url(), 20 * 1024, 1024, std::chrono::milliseconds(500)), 202)
      << gateway_->log();
  // 64 bytes/s: under the floor once a window (2 s) has been measured; told so with a 408.
  EXPECT_EQ(trickle_upload(gateway_->url(), 4096, 64, std::chrono::milliseconds(1000)), 408);
  EXPECT_NE(gateway_->log().find("slower than server.min_upload_rate"), std::string::npos)
      << gateway_->log();
}

// A download has no total deadline: a reader slower than body_idle_timeout per whole result,
// but steady, gets all of it.
TEST_F(GatewayTest, ASlowReaderGetsTheWholeResult) {
  start_gateway({{"RELAY_SERVER_BODY_IDLE_TIMEOUT", "2s"}});
  InferenceServer inference({.result_bytes = 3 << 20});
  auto id = submit_id("big result");
  ASSERT_EQ(start_relay(inference)->wait_exit(30s), 0);
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 10s));
  int fd = raw_connect(gateway_->url());
  std::string req =
      "GET /jobs/echo/" + id + "/result HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_GT(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  int small = 16 * 1024;  // a small receive buffer, read 64 KiB per 100 ms: ~640 KiB/s, ~5 s
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  std::string got;
  std::vector<char> buf(64 * 1024);
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_WAITALL);
    if (n <= 0) break;
    got.append(buf.data(), static_cast<size_t>(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::close(fd);
  const auto took = std::chrono::steady_clock::now() - started;
  const auto body = got.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_GE(got.size() - body - 4, static_cast<size_t>(3 << 20)) << "the whole result";
  EXPECT_GT(took, std::chrono::seconds(2)) << "slower than body_idle_timeout in all";
}

// kill -9 mid-upload with an Idempotency-Key: the reservation lapses by itself (it lived only
// while the upload progressed), so a retry succeeds within idempotency.reservation, not a
// week later; and the temporary object the crash left is swept away on the next start.
TEST_F(GatewayTest, ACrashMidUploadFreesItsIdempotencyKeyAndLeavesNothing) {
  start_gateway(
      {{"RELAY_IDEMPOTENCY_RESERVATION", "3s"}, {"RELAY_SERVER_BODY_IDLE_TIMEOUT", "2s"}});
  auto temporaries = [&] { return storage_files(true); };
  int fd = raw_connect(gateway_->url());
  std::string head =
      "POST /jobs/echo?filename=a.bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Idempotency-Key: crash-1\r\nContent-Length: 10000000\r\n\r\n";
  ASSERT_GT(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
  const std::string chunk(256 * 1024, 'x');
  ASSERT_GT(::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL), 0);
  ASSERT_TRUE(wait_until([&] { return !temporaries().empty(); }, 10s)) << "the upload is under way";
  gateway_->kill();
  ::close(fd);
  gateway_->start();
  HttpResult retry;
  ASSERT_TRUE(wait_until(
      [&] {
        retry = submit("the retry", {"Idempotency-Key: crash-1"});
        return retry.status == 202;
      },
      15s))
      << retry.status << " " << retry.body;
  EXPECT_EQ(str(job(str(parse(retry), "id")), "status"), "pending");
  // Leftovers older than twice body_idle_timeout are swept when the gateway starts.
  auto left = temporaries();
  ASSERT_FALSE(left.empty());
  ASSERT_TRUE(wait_until(
      [&] {
        std::error_code ec;
        auto age = std::filesystem::file_time_type::clock::now() -
                   std::filesystem::last_write_time(left[0], ec);
        return ec || age > std::chrono::seconds(5);
      },
      20s));
  EXPECT_EQ(gateway_->stop(), 0);
  gateway_->start();
  EXPECT_TRUE(wait_until([&] { return temporaries().empty(); }, 10s)) << gateway_->log();
}

namespace {
std::string recv_some(int fd, int timeout_s) {
  char buf[4096];
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}
}  // namespace

// Expect: 100-continue gets "100 Continue" once the request is acceptable (then the body is
// read), and the final answer at once when it is not (no body needed).
TEST_F(GatewayTest, ExpectContinueIsAnsweredWhenTheRequestIsAcceptable) {
  start_gateway();
  int fd = raw_connect(gateway_->url());
  std::string head =
      "POST /jobs/echo?filename=a.txt HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(recv_some(fd, 5).starts_with("HTTP/1.1 100 Continue\r\n"));
  ::send(fd, "hello", 5, MSG_NOSIGNAL);
  EXPECT_TRUE(recv_some(fd, 5).starts_with("HTTP/1.1 202"));
  ::close(fd);
  fd = raw_connect(gateway_->url());
  head =
      "POST /jobs/nosuch HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
      "Content-Length: 5\r\n\r\n";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(recv_some(fd, 5).starts_with("HTTP/1.1 404"));
  ::close(fd);
}

// An early answer to a request whose body is still coming (404 here) reaches the client: the
// gateway half-closes and drops the rest instead of resetting the connection under it.
TEST_F(GatewayTest, AnEarlyAnswerReachesAClientStillSending) {
  start_gateway();
  // As simple HTTP clients do: send the whole body, then read the answer. A connection reset
  // while sending (the server closed with unread data) loses the answer.
  for (int round = 0; round < 3; ++round) {
    int fd = raw_connect(gateway_->url());
    const size_t total = 24u << 20;
    std::string head =
        "POST /jobs/nosuch HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(total) +
        "\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string chunk(64 * 1024, 'x');
    bool send_failed = false;
    for (size_t sent = 0; sent < total && !send_failed; sent += chunk.size())
      send_failed = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0;
    EXPECT_FALSE(send_failed) << "round " << round << ": " << std::strerror(errno);
    EXPECT_TRUE(recv_some(fd, 10).starts_with("HTTP/1.1 404")) << "round " << round;
    ::close(fd);
  }
}

// Requests pipelined on one connection, bodies and all, each get their own answer in order and
// store exactly their own bytes: a body of declared length is read straight from the socket
// (past the parser), so it must take exactly its length and leave the next request's bytes.
TEST_F(GatewayTest, PipelinedRequestsEachGetTheirBytesAndAnswer) {
  start_gateway();
  std::string big(300 * 1024, '\0');  // beyond the first read before the handler: taken in pieces
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  const std::string wire =
      "POST /jobs/echo?filename=a.bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Content-Length: " +
      std::to_string(big.size()) + "\r\n\r\n" + big +
      "POST /jobs/echo?filename=b.txt HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Transfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"
      "POST /jobs/echo?filename=c.txt HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
      "Content-Length: 3\r\n\r\nxyz"
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  int fd = raw_connect(gateway_->url());
  ASSERT_GE(fd, 0);
  // In odd-sized writes, so that bodies and heads are split anywhere.
  for (size_t at = 0; at < wire.size();) {
    const size_t n = std::min<size_t>(wire.size() - at, 7919);
    ASSERT_EQ(::send(fd, wire.data() + at, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    at += n;
  }
  // Four answers, each with a Content-Length: split them as they come.
  std::string in;
  std::vector<std::pair<int, std::string>> answers;
  while (answers.size() < 4) {
    const auto end = in.find("\r\n\r\n");
    const auto cl = in.find("Content-Length: ");
    if (end != std::string::npos && cl != std::string::npos && cl < end) {
      const size_t len = std::stoul(in.substr(cl + 16));
      if (in.size() >= end + 4 + len) {
        answers.emplace_back(std::stoi(in.substr(9, 3)), in.substr(end + 4, len));
        in.erase(0, end + 4 + len);
        continue;
      }
    }
    std::string more = recv_some(fd, 10);
    ASSERT_FALSE(more.empty()) << "after " << answers.size() << " answers";
    in += more;
  }
  ::close(fd);
  const std::string expected[] = {big, "hello world", "xyz"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(answers[i].first, 202) << i << ": " << answers[i].second;
    const std::string id = str(parse(HttpResult{202, answers[i].second, {}}), "id");
    std::ifstream in_file(files_.path() + "/" + input_object_key("echo", id), std::ios::binary);
    const std::string stored((std::istreambuf_iterator<char>(in_file)), {});
    EXPECT_TRUE(stored == expected[i]) << i << ": " << stored.size() << " bytes stored";
  }
  EXPECT_EQ(answers[3].first, 200);
}

// Client-chosen names appear in job JSON, which must stay valid UTF-8: raw bytes become U+FFFD
// and a long name is cut on a character boundary (at most 255 bytes).
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

// A result is served with the Content-Type the model answered with, not passed off as JSON.
TEST_F(GatewayTest, AResultKeepsTheModelsContentType) {
  start_gateway();
  InferenceServer text({.content_type = "text/plain; charset=utf-8"});
  auto id = submit_id("plain");
  ASSERT_EQ(start_relay(text)->wait_exit(20s), 0);
  auto r = http("GET", url("/jobs/echo/" + id + "/result"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/plain; charset=utf-8");
  InferenceServer json;
  auto id2 = submit_id("json");
  ASSERT_EQ(start_relay(json)->wait_exit(20s), 0);
  EXPECT_EQ(http("GET", url("/jobs/echo/" + id2 + "/result")).headers["content-type"],
            "application/json");
}

TEST_F(GatewayTest, ConnectionsBeyondTheLimitAreRefused) {
  start_gateway({{"RELAY_SERVER_MAX_CONNECTIONS", "2"}});
  int a = raw_connect(gateway_->url()), b = raw_connect(gateway_->url());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Both are open and idle; a third is accepted and closed at once.
  ASSERT_TRUE(wait_until(
      [&] {
        int c = raw_connect(gateway_->url());
        char byte;
        timeval tv{2, 0};
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        bool closed = ::read(c, &byte, 1) == 0;
        ::close(c);
        return closed;
      },
      10s));
  ::close(a);
  ::close(b);
  EXPECT_TRUE(wait_until([&] { return http("GET", url("/healthz")).status == 200; }, 10s))
      << "served again once under the limit";
}

TEST_F(GatewayTest, OversizedHeadersAre431) {
  start_gateway();
  auto r = http("GET", url("/healthz"), {"X-Big: " + std::string(20000, 'a')});
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(http("GET", url("/healthz")).status, 200);
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
