// `relayctl up` (the local stack and its scaler) and relayctl's commands, as a user runs them.

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "harness.hpp"
#include "http_client.hpp"

namespace relay::testing {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// The relay processes relayctl (pid) has started and not reaped, read from /proc.
std::vector<pid_t> relay_children(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(f, stat);
    auto close = stat.rfind(')');
    if (close == std::string::npos ||
        stat.compare(stat.find('(') + 1, close - stat.find('(') - 1, "relay") != 0)
      continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(std::atoi(e->d_name));
  }
  if (d) ::closedir(d);
  return out;
}

// Fault injection between relayctl and the gateway: a loopback proxy that forwards each
// connection as it is, but cuts the first `cuts` answers to a result request after `body_bytes`
// bytes of their body (as a dropped connection would), and records each result request's Range.
class CuttingProxy {
 public:
  CuttingProxy(int upstream_port, size_t body_bytes, int cuts)
      : upstream_(upstream_port), body_bytes_(body_bytes), cuts_(cuts) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listen_, 8) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("proxy: cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    thread_.join();
    ::close(listen_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> ranges() {
    std::lock_guard lock(mu_);
    return ranges_;
  }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) serve(client);
    }
  }
  void serve(int client) {
    int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_));
    bool cut = false;
    std::string request, answer;
    size_t header_end = std::string::npos;
    if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      pollfd fds[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
      char buf[16384];
      while (!stop_ && ::poll(fds, 2, 5000) > 0) {
        if (fds[0].revents) {  // relayctl's request
          ssize_t n = ::recv(client, buf, sizeof buf, 0);
          if (n <= 0) break;
          request.append(buf, static_cast<size_t>(n));
          ::send(up, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
          std::smatch m;
          if (request.find("\r\n\r\n") != std::string::npos &&
              request.find("/result HTTP/1.1") != std::string::npos) {
            std::lock_guard lock(mu_);
            std::regex range("\r\nRange: ([^\r]*)\r\n", std::regex::icase);
            ranges_.push_back(std::regex_search(request, m, range) ? m[1].str() : "");
            cut = cuts_ > 0;
            if (cut) --cuts_;
          }
        }
        if (fds[1].revents) {  // the gateway's answer
          ssize_t n = ::recv(up, buf, sizeof buf, 0);
          if (n <= 0) break;
          answer.append(buf, static_cast<size_t>(n));
          if (header_end == std::string::npos) header_end = answer.find("\r\n\r\n");
          size_t pass = static_cast<size_t>(n);
          if (cut && header_end != std::string::npos) {
            const size_t limit = header_end + 4 + body_bytes_;
            const size_t before = answer.size() - static_cast<size_t>(n);
            pass = before >= limit ? 0 : std::min(pass, limit - before);
          }
          ::send(client, buf, pass, MSG_NOSIGNAL);
          if (pass < static_cast<size_t>(n)) break;  // cut: both ends closed
        }
      }
    }
    ::close(up);
    ::close(client);
  }

  int upstream_, port_ = 0, listen_ = -1;
  size_t body_bytes_;
  int cuts_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::string> ranges_;
  std::thread thread_;
};

class RelayctlTest : public ::testing::Test {
 protected:
  void start_up(int echo_delay_ms, int max_relays = 4) {
    port_ = free_port();
    up_ = std::make_unique<Process>(
        std::vector<std::string>{RELAY_TEST_RELAYCTL_BIN, "up", "--port", std::to_string(port_),
                                 "--max-relays", std::to_string(max_relays), "--echo-delay-ms",
                                 std::to_string(echo_delay_ms)},
        Env{}, logs_.path() + "/up.log");
    ASSERT_TRUE(
        wait_until([&] { return up_->log().find("Relay is up") != std::string::npos; }, 60s))
        << up_->log();
    std::smatch m;
    std::string log = up_->log();
    ASSERT_TRUE(std::regex_search(log, m, std::regex("redis (redis://[0-9.:]+)")));
    redis_url_ = m[1];
    ASSERT_TRUE(std::regex_search(log, m, std::regex("data in (/[^ ]+) \\(removed at stop")));
    data_dir_ = m[1];
    ASSERT_TRUE(fs::is_directory(data_dir_ + "/redis"));
  }
  void TearDown() override {
    if (HasFailure() && up_) std::cerr << up_->log();
    if (up_) {
      up_->signal(SIGTERM);
      EXPECT_EQ(up_->wait_exit(60s), 0) << "Ctrl-C stops everything cleanly";
      EXPECT_TRUE(relay_children(up_->pid()).empty());
      EXPECT_FALSE(fs::exists(data_dir_)) << "its temporary data folder removed";
    }
  }
  std::string gw() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string submit_echo(const std::string& content) {
    auto r = http("POST", gw() + "/jobs/echo", {}, {}, {{"file", content, "in.txt", "text/plain"}});
    EXPECT_EQ(r.status, 202) << r.body;
    return std::string(json::parse(r.body).as_object().at("id").as_string());
  }
  json::object job(const std::string& id) {
    return json::parse(http("GET", gw() + "/jobs/echo/" + id).body).as_object();
  }
  // Runs relayctl with args; returns {exit code, stdout}.
  std::pair<int, std::string> ctl(const std::string& args) { return ctl_via(gw(), args); }
  std::pair<int, std::string> ctl_via(const std::string& gateway, const std::string& args) {
    std::string cmd = std::string(RELAY_TEST_RELAYCTL_BIN) + " --gateway " + gateway +
                      " --redis-url " + redis_url_ + " " + args + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int st = ::pclose(p);
    return {WEXITSTATUS(st), out};
  }

  TempDir logs_;
  std::unique_ptr<Process> up_;
  int port_ = 0;
  std::string redis_url_;
  std::string data_dir_;
};

TEST_F(RelayctlTest, ScalerRunsAtMostMaxRelaysAndNoneOnceTheQueueDrains) {
  start_up(/*echo_delay_ms=*/300, /*max_relays=*/4);
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(submit_echo("job " + std::to_string(i)));
  size_t most = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        most = std::max(most, relay_children(up_->pid()).size());
        for (auto& id : ids)
          if (job(id).at("status").as_string() != "completed") return false;
        return true;
      },
      120s));
  EXPECT_LE(most, 4u) << "never more relays than --max-relays";
  EXPECT_GE(most, 2u) << "relays ran side by side while jobs waited";
  ASSERT_TRUE(wait_until([&] { return relay_children(up_->pid()).empty(); }, 20s))
      << "no relay left once the queue is empty";
}

TEST_F(RelayctlTest, ACrashedRelayIsReplacedAndItsJobFinished) {
  start_up(/*echo_delay_ms=*/3000);
  auto id = submit_echo("survives");
  std::vector<pid_t> relays;
  ASSERT_TRUE(wait_until(
      [&] {
        return !(relays = relay_children(up_->pid())).empty() &&
               job(id).at("status") == "processing";
      },
      30s));
  ::kill(relays[0], SIGKILL);
  ASSERT_TRUE(wait_until([&] { return job(id).at("status") == "completed"; }, 60s)) << up_->log();
  EXPECT_EQ(job(id).at("attempts").as_int64(), 1) << "reaped once, finished by a new relay";
}

// A job cancelled while still pending (no relay runs here) is printed once, with the exit code
// of a cancelled job (it used to be printed twice).
TEST_F(RelayctlTest, CancellingAPendingJobPrintsItOnce) {
  start_up(0, /*max_relays=*/0);
  const std::string id = submit_echo("never run");
  auto [code, out] = ctl("--json cancel echo/" + id);
  EXPECT_EQ(code, 4) << out;
  boost::system::error_code ec;
  auto j = json::parse(out, ec);
  ASSERT_FALSE(ec) << "exactly one JSON document: " << out;
  EXPECT_EQ(j.as_object().at("status").as_string(), "cancelled");
}

// relayctl result -o: a download cut midway resumes from the bytes it has (Range, If-Range), and
// the file appears whole or not at all.
TEST_F(RelayctlTest, ASavedResultResumesACutDownload) {
  start_up(0);
  const std::string id = submit_echo(std::string(5000, 'r'));
  ASSERT_TRUE(wait_until([&] { return job(id).at("status").as_string() == "completed"; }, 30s));
  const std::string whole = http("GET", gw() + "/jobs/echo/" + id + "/result").body;
  ASSERT_GT(whole.size(), 150u);
  TempDir dir;
  const std::string out = dir.path() + "/result.json";
  {
    CuttingProxy proxy(port_, 60, 2);
    auto [code, printed] = ctl_via(proxy.url(), "result echo/" + id + " -o " + out);
    EXPECT_EQ(code, 0) << printed;
    EXPECT_EQ(proxy.ranges(), (std::vector<std::string>{"", "bytes=60-", "bytes=120-"}));
  }
  std::ifstream f(out, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), whole);
  EXPECT_FALSE(fs::exists(out + ".part"));
  // Cut every time at once: gives up, leaves nothing, and keeps a file already at that name.
  std::ofstream(out) << "kept";
  {
    CuttingProxy proxy(port_, 0, 99);
    auto [code, printed] = ctl_via(proxy.url(), "result echo/" + id + " -o " + out);
    EXPECT_EQ(code, 1);
  }
  std::ifstream kept(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "kept");
  EXPECT_FALSE(fs::exists(out + ".part"));
  // An answer that is not the result (409: no result yet) leaves nothing either.
  auto [code, printed] =
      ctl("result echo/11111111-1111-4111-8111-111111111111 -o " + dir.path() + "/none.json");
  EXPECT_EQ(code, 1);
  EXPECT_FALSE(fs::exists(dir.path() + "/none.json"));
  EXPECT_FALSE(fs::exists(dir.path() + "/none.json.part"));
}

TEST_F(RelayctlTest, CommandsWithJsonAndExitCodes) {
  start_up(0);
  TempDir dir;
  std::ofstream(dir.path() + "/in.txt") << "hello relayctl";
  auto [code, out] = ctl("--json submit echo " + dir.path() + "/in.txt --param lang=en --wait");
  ASSERT_EQ(code, 0) << out;
  auto j = json::parse(out).as_object();
  std::string ref = "echo/" + std::string(j.at("id").as_string());
  EXPECT_EQ(j.at("status").as_string(), "completed");
  std::tie(code, out) = ctl("--json status " + ref);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(json::parse(out).as_object().at("status").as_string(), "completed");
  std::tie(code, out) = ctl("--json wait " + ref);
  EXPECT_EQ(code, 0);
  std::tie(code, out) = ctl("result " + ref + " -o " + dir.path() + "/result.json");
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(std::filesystem::file_size(dir.path() + "/result.json") > 0);
  std::tie(code, out) = ctl("cancel " + ref);
  EXPECT_EQ(code, 1) << "cancelling an ended job is refused (409)";
  std::tie(code, out) = ctl("status echo/11111111-1111-4111-8111-111111111111");
  EXPECT_EQ(code, 1);
  std::tie(code, out) = ctl("status not-a-ref");
  EXPECT_EQ(code, 1);
  // A job without a relay yet: submit without --wait prints the reference; status says pending.
  std::tie(code, out) = ctl("--json queues");
  EXPECT_EQ(code, 0);
  auto queues = json::parse(out).as_array();
  EXPECT_FALSE(queues.empty());
  std::tie(code, out) = ctl("--json deadletter list echo");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(json::parse(out).as_array().size(), 0u);
  std::tie(code, out) = ctl("--json deadletter requeue echo --all");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(json::parse(out).as_object().at("requeued").as_int64(), 0);
  // Table output for people.
  std::tie(code, out) = ctl("status " + ref);
  EXPECT_NE(out.find("STATUS"), std::string::npos);
  EXPECT_NE(out.find("completed"), std::string::npos);
}

// relayctl jobs: the listing, filtered, newest first, paged up to --limit.
TEST_F(RelayctlTest, JobsListsFiltersAndPages) {
  start_up(0, /*max_relays=*/0);  // nothing runs: every job stays pending
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(submit_echo("job " + std::to_string(i)));
  auto [code, out] = ctl("--json cancel echo/" + ids[0]);
  EXPECT_EQ(code, 4) << out;
  std::tie(code, out) = ctl("--json jobs");
  ASSERT_EQ(code, 0) << out;
  auto all = json::parse(out).as_array();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[0].as_object().at("id").as_string(), ids[4]) << "newest first";
  std::tie(code, out) = ctl("--json jobs echo --status cancelled");
  ASSERT_EQ(code, 0) << out;
  auto cancelled = json::parse(out).as_array();
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].as_object().at("id").as_string(), ids[0]);
  std::tie(code, out) = ctl("--json jobs --status pending --limit 3");
  EXPECT_EQ(json::parse(out).as_array().size(), 3u);
  std::tie(code, out) = ctl("--json jobs --since 1h");
  EXPECT_EQ(json::parse(out).as_array().size(), 5u);
  std::tie(code, out) = ctl("--json jobs --since 2099-01-01T00:00:00Z");
  EXPECT_EQ(json::parse(out).as_array().size(), 0u);
  std::tie(code, out) = ctl("jobs --status nonsense");
  EXPECT_EQ(code, 1) << "the gateway's 400";
  std::tie(code, out) = ctl("submit echo");
  EXPECT_EQ(code, 1) << "neither a file nor --input-url";
  std::tie(code, out) = ctl("submit echo --input-url s3://b/k");
  EXPECT_EQ(code, 1) << "echo takes no inputs by reference: the gateway's 400";
  std::tie(code, out) = ctl("jobs echo");
  EXPECT_NE(out.find("STATUS"), std::string::npos);
  EXPECT_NE(out.find("echo/" + ids[2]), std::string::npos);
}

// On a terminal, waiting shows a live status line (from the job's events); the final table
// follows. (script(1) gives relayctl a terminal.)
TEST_F(RelayctlTest, WaitingOnATerminalShowsALiveStatusLine) {
  start_up(/*echo_delay_ms=*/1500);
  const std::string id = submit_echo("live");
  const std::string cmd = "script -qec '" + std::string(RELAY_TEST_RELAYCTL_BIN) + " --gateway " +
                          gw() + " wait echo/" + id + " --timeout 30s' /dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(::pclose(p)), 0) << out;
  EXPECT_NE(out.find("\r\033[Kecho/" + id + "  "), std::string::npos) << out;
  EXPECT_NE(out.find("completed"), std::string::npos) << out;
  EXPECT_NE(out.find("STATUS"), std::string::npos) << "the table after the line: " << out;
  // Not on a terminal (popen's pipe) or with --json: no status line.
  auto [code, plain] = ctl("wait echo/" + id);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(plain.find("\033[K"), std::string::npos);
}

// relayctl's reads ride out their gateway's restart (a rolling update): status, wait and
// result (printed, and saved to a file) asked while the gateway is down are asked again after a
// pause, saying so on stderr, and each ends with its answer. (Each failed at once.)
TEST(RelayctlReads, RideOutAGatewayRestart) {
  RedisServer redis;
  TempDir files, logs;
  const Env env{{"RELAY_REDIS_URL", redis.url()}, {"RELAY_STORAGE_URL", "file://" + files.path()}};
  Env gw_env = env;
  gw_env["RELAY_SERVICE_TYPES"] = "echo=m1";
  gw_env["RELAY_AUTH_ENABLED"] = "false";
  gw_env["RELAY_REDIS_RETRY_TIMEOUT"] = "1s";  // (a 503 sooner, below)
  GatewayServer gateway(gw_env);
  auto submit = [&](const std::string& body) {
    auto r = http("POST", gateway.url() + "/jobs/echo", {"Content-Type: text/plain"}, body);
    EXPECT_EQ(r.status, 202) << r.body;
    return field(r, "id");
  };
  // One job completed (a relay runs it, then exits), one left pending.
  const std::string done = submit("a result");
  {
    InferenceServer inference;
    Env relay_env = env;
    relay_env["RELAY_MODEL"] = "m1";
    relay_env["RELAY_INFERENCE_URL"] = inference.url();
    Process relay({relay_binary(), "--max-jobs", "1"}, relay_env, logs.path() + "/relay.log");
    ASSERT_EQ(relay.wait_exit(30s), 0) << relay.log();
  }
  const std::string pending = submit("waited on");
  ASSERT_EQ(gateway.stop(), 0);

  auto ctl = [&](const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv{RELAY_TEST_RELAYCTL_BIN, "--gateway", gateway.url(), "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, Env{}, logs.path() + "/" + name + ".log");
  };
  const std::string saved = files.path() + "/result.json";
  auto status = ctl("status", {"status", "echo/" + pending});
  auto wait = ctl("wait", {"wait", "echo/" + pending, "--timeout", "60s"});
  auto result = ctl("result", {"result", "echo/" + done});
  auto save = ctl("save", {"result", "echo/" + done, "-o", saved});
  for (auto* p : {status.get(), wait.get(), result.get()})
    ASSERT_TRUE(wait_until([&] { return p->log().find("asking again") != std::string::npos; }, 20s))
        << p->log();
  ASSERT_TRUE(wait_until([&] { return save->log().find("resuming") != std::string::npos; }, 20s))
      << save->log();
  gateway.start();
  EXPECT_EQ(status->wait_exit(30s), 5) << "still pending\n" << status->log();
  EXPECT_NE(status->log().find("\"pending\""), std::string::npos) << status->log();
  EXPECT_EQ(result->wait_exit(30s), 0) << result->log();
  EXPECT_NE(result->log().find("\"sha256\""), std::string::npos) << result->log();
  EXPECT_EQ(save->wait_exit(30s), 0) << save->log();
  std::ifstream in(saved);
  const std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(content.find("\"sha256\""), std::string::npos) << content;
  ASSERT_EQ(http("DELETE", gateway.url() + "/jobs/echo/" + pending).status, 200);
  EXPECT_EQ(wait->wait_exit(30s), 4) << "the cancelled job's exit code\n" << wait->log();
  EXPECT_NE(wait->log().find("\"cancelled\""), std::string::npos) << wait->log();

  // A result saved while Redis does not answer: the gateway's 503 is asked again, too.
  redis.freeze();
  auto again = ctl("again", {"result", "echo/" + done, "-o", saved + ".2"});
  const bool refused =
      wait_until([&] { return again->log().find("HTTP 503") != std::string::npos; }, 20s);
  redis.thaw();
  ASSERT_TRUE(refused) << again->log();
  EXPECT_EQ(again->wait_exit(30s), 0) << again->log();
  EXPECT_TRUE(fs::exists(saved + ".2"));
}

}  // namespace
}  // namespace relay::testing
