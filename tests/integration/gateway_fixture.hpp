#pragma once
// The gateway suites' fixture: the real gateway binary over HTTP, real redis-server (plain, TLS,
// cluster), filesystem storage, real relays against the no-op inference server. The suites:
// gateway_test.cpp (the API and a job's life), gateway_http_test.cpp (HTTP at the edge: framing,
// slow and hostile clients, limits, shutdown), webhook_test.cpp, encryption_test.cpp,
// redis_trouble_test.cpp (Redis restarting, loading, busy, failing).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "common/hex.hpp"
#include "common/job_id.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "harness.hpp"
#include "http_client.hpp"
#include "redis/job_store.hpp"
#include "redis/lua_scripts.hpp"
#include "storage/object_keys.hpp"

namespace relay::testing {

namespace json = boost::json;

inline json::object parse(const HttpResult& r) {
  boost::system::error_code ec;
  auto v = json::parse(r.body, ec);
  if (ec || !v.is_object()) return {};
  return v.as_object();
}

inline std::string str(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
}

// receive_buffer: SO_RCVBUF set before connecting (a small one: a reader whose kernel buffers
// fill at once), or 0 for the default.
inline int raw_connect(const std::string& gateway_url, int receive_buffer = 0) {
  auto port = std::stoi(gateway_url.substr(gateway_url.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (receive_buffer > 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  return fd;
}

// n bytes of 'x' as one chunk of a chunked body.
inline std::string chunk_of(std::size_t n) {
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
  return size_line + std::string(n, 'x') + "\r\n";
}
inline bool send_chunk(int fd, std::size_t n) {
  const std::string bytes = chunk_of(n);
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) > 0;
}

// A sample without labels from Prometheus text (-1 when absent).
inline double metric_value(const std::string& text, const std::string& name) {
  const auto at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

// What one recv brings within timeout_s seconds; empty on timeout or close.
inline std::string recv_some(int fd, int timeout_s) {
  char buf[4096];
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Room for this process to hold n more descriptors (its soft limit raised towards the hard one).
inline void allow_open_files(rlim_t n) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur >= n + 100) return;
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, n + 100);
  ::setrlimit(RLIMIT_NOFILE, &files);
}

inline std::string error_code(const HttpResult& r) {
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
  // The gateway's getaddrinfo replaced (faults/slow_dns.cpp): names ending in ".slow.test" take
  // ms to fail (0: resolve to 127.0.0.1 at once), each lookup logged to `lookups` if given.
  static Env slow_dns_env(long ms, const std::string& lookups = "") {
    const char* asan = std::getenv("ASAN_OPTIONS");
    Env env{{"LD_PRELOAD", RELAY_TEST_SLOW_DNS},
            {"RELAY_TEST_SLOW_DNS_MS", std::to_string(ms)},
            // (A sanitized build's runtime would insist on being preloaded first.)
            {"ASAN_OPTIONS", std::string(asan ? asan : "") + ":verify_asan_link_order=0"}};
    if (!lookups.empty()) env["RELAY_TEST_SLOW_DNS_LOG"] = lookups;
    return env;
  }
  void start_gateway(Env extra = {}) {
    gateway_ = std::make_unique<GatewayServer>(gateway_env(std::move(extra)));
  }
  // With service types (and anything else) from YAML instead of RELAY_SERVICE_TYPES.
  void start_gateway_with_config(const std::string& yaml, Env extra = {}) {
    Env env = gateway_env(std::move(extra));
    env.erase("RELAY_SERVICE_TYPES");
    const std::string path = logs_.path() + "/gateway.yaml";
    std::ofstream(path) << yaml;
    gateway_ = std::make_unique<GatewayServer>(env, path);
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
  // Something waits on the job (a long-poll flags it: watch.lua).
  bool flagged_watched(const std::string& id) {
    return redis::as_integer(conn_.command({"HEXISTS", keys_.job("m1", id), "watched"}).get()) == 1;
  }
  // A request sent as given on a connection of its own; everything the gateway answers until it
  // closes (or 10 s of silence).
  std::string raw_request(const std::string& request) {
    int fd = raw_connect(gateway_->url());
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string in;
    for (std::string more; (more = recv_some(fd, 10)).size();) in += more;
    ::close(fd);
    return in;
  }

  // A completed job's result served in byte ranges (RFC 9110 §14), each the same bytes as the
  // whole download's, and the conditions on its entity tag (If-Range, If-None-Match).
  void expect_ranges_served(const std::string& id) {
    const std::string path = url("/jobs/echo/" + id + "/result");
    auto whole = http("GET", path);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const std::string& all = whole.body;
    const std::string size = std::to_string(all.size());
    const std::string etag = whole.headers["etag"];
    EXPECT_EQ(etag, "\"" + id + "\"");
    EXPECT_EQ(whole.headers["accept-ranges"], "bytes");
    EXPECT_EQ(whole.headers["content-length"], size) << "the whole result's length is told";
    ASSERT_GT(all.size(), 70'000u) << "a result over a download chunk";
    const size_t n = all.size();
    struct Case {
      std::string range;
      size_t first, length;
    } cases[] = {
        {"bytes=0-0", 0, 1},
        {"bytes=0-", 0, n},
        {"bytes=100-", 100, n - 100},
        {"bytes=-1000", n - 1000, 1000},
        {"bytes=-" + std::to_string(n + 5), 0, n},
        {"bytes=65530-65545", 65530, 16},
        {"bytes=4000-69999", 4000, 66000},
        {"bytes=" + std::to_string(n - 1) + "-" + std::to_string(n + 100), n - 1, 1},
    };
    for (const auto& c : cases) {
      auto r = http("GET", path, {"Range: " + c.range});
      EXPECT_EQ(r.status, 206) << c.range << ": " << r.body.substr(0, 200);
      EXPECT_EQ(r.headers["content-range"], "bytes " + std::to_string(c.first) + "-" +
                                                std::to_string(c.first + c.length - 1) + "/" + size)
          << c.range;
      EXPECT_EQ(r.headers["content-length"], std::to_string(c.length)) << c.range;
      EXPECT_EQ(r.headers["etag"], etag) << c.range;
      EXPECT_TRUE(r.body == all.substr(c.first, c.length))
          << c.range << ": " << r.body.size() << " bytes, not the result's";
    }
    // Past the end: 416, and where the end is.
    auto past = http("GET", path, {"Range: bytes=" + size + "-"});
    EXPECT_EQ(past.status, 416) << past.body;
    EXPECT_EQ(past.headers["content-range"], "bytes */" + size);
    EXPECT_NE(past.body.find("range_not_satisfiable"), std::string::npos) << past.body;
    // Served whole: several ranges, a range for another version (If-Range), another unit.
    for (const std::vector<std::string>& h : std::vector<std::vector<std::string>>{
             {"Range: bytes=0-1,5-6"},
             {"Range: bytes=10-20", "If-Range: \"another\""},
             {"Range: bytes=10-20", "If-Range: Wed, 21 Oct 2026 07:28:00 GMT"},
             {"Range: items=0-1"}}) {
      auto r = http("GET", path, h);
      EXPECT_EQ(r.status, 200) << h.back();
      EXPECT_TRUE(r.body == all) << h.back();
    }
    auto resumed = http("GET", path, {"Range: bytes=10-20", "If-Range: " + etag});
    EXPECT_EQ(resumed.status, 206);
    EXPECT_EQ(resumed.body, all.substr(10, 11));
    // A copy the client holds: 304, no body.
    for (const std::string& tag : {etag, "W/" + etag, std::string("*")}) {
      auto r = http("GET", path, {"If-None-Match: " + tag});
      EXPECT_EQ(r.status, 304) << tag;
      EXPECT_EQ(r.body, "") << tag;
      EXPECT_EQ(r.headers["etag"], etag) << tag;
      EXPECT_FALSE(r.headers.contains("content-length")) << tag << ": a 304 says no length of 0";
    }
    EXPECT_EQ(http("GET", path, {"If-None-Match: \"another\""}).status, 200);
    // HEAD: the range's header, no body.
    auto head = http("HEAD", path, {"Range: bytes=-10"});
    EXPECT_EQ(head.status, 206);
    EXPECT_EQ(head.headers["content-length"], "10");
    EXPECT_EQ(head.body, "");
  }
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
  // n raw submissions sent at once, each on a thread of its own; then, each answered 202 with
  // its job pending.
  std::vector<std::future<HttpResult>> submit_at_once(int n, const std::string& what) {
    std::vector<std::future<HttpResult>> out;
    for (int i = 0; i < n; ++i)
      out.push_back(std::async(std::launch::async, [this, what, i] {
        return http("POST", url("/jobs/echo?filename=w.txt"), {"Content-Type: text/plain"},
                    what + " " + std::to_string(i));
      }));
    return out;
  }
  void expect_pending(std::vector<std::future<HttpResult>>& answers) {
    for (auto& a : answers) {
      auto r = a.get();
      ASSERT_EQ(r.status, 202) << r.body;
      auto rec = store_.get("m1", str(parse(r), "id"));
      ASSERT_TRUE(rec);
      EXPECT_EQ(rec->status, JobStatus::pending);
    }
  }
  // True while Redis holds a client's command (CLIENT PAUSE): one blocked whose command is
  // `cmd` ("cmd=evalsha").
  bool held_at_redis(const std::string& cmd) {
    auto clients = conn_.command({"CLIENT", "LIST"});
    const std::string list(clients->str, clients->len);
    for (std::size_t at = 0; (at = list.find("flags=b ", at)) != std::string::npos; ++at)
      if (list.substr(at, list.find('\n', at) - at).find(cmd + " ") != std::string::npos)
        return true;
    return false;
  }
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

}  // namespace relay::testing
