// The test harness: waiting with deadlines, free ports, temporary folders, child processes, and
// the real servers the suites start besides Redis (S3, the no-op model, the gateway, a webhook
// receiver). Redis is in redis_server.cpp (standalone, TLS, cluster) and sentinel_server.cpp.
#include "harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/cgroup.hpp"
#include "common/exec_args.hpp"
#include "redis/slot.hpp"

namespace relay::testing {

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A port below the kernel's ephemeral range (32768-60999 by default): a port from bind(0) may
// become some connection's local port before the server binds it (then the server cannot
// start, or a restarted one cannot take its port back); these never do.
int free_port() {
  static std::mt19937 rng(
      static_cast<std::uint32_t>(::getpid()) ^
      static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = std::uniform_int_distribution<int>(20000, 32000)(rng);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free && !port_open(port)) return port;
  }
  throw std::runtime_error("no free port");
}

bool port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "relay-test-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp");
  path_ = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

MemoryCgroup::MemoryCgroup(std::uint64_t limit_bytes) {
  namespace fs = std::filesystem;
  static std::atomic<int> n{0};
  const std::string name = "/relay-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  std::string limit_file;
  if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    root_ = "/sys/fs/cgroup/memory";
    home_ = cgroup_path("memory");
    limit_file = "memory.limit_in_bytes";
  } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    root_ = "/sys/fs/cgroup";
    home_ = cgroup_path("");
    write_file(root_ + "/cgroup.subtree_control", "+memory");
    limit_file = "memory.max";
  } else {
    throw std::runtime_error("no cgroup memory controller mounted under /sys/fs/cgroup");
  }
  path_ = root_ + name;
  std::error_code ec;
  if (!fs::create_directory(path_, ec))
    throw std::runtime_error("cannot create " + path_ + ": " + ec.message() + " (root needed)");
  write_file(path_ + "/" + limit_file, std::to_string(limit_bytes));
}

MemoryCgroup::~MemoryCgroup() {
  try {
    leave();
    // A process still inside (a test that ended early, its gateway still running) would keep
    // the cgroup from being removed: it moves back to this process's cgroup.
    std::ifstream procs(path_ + "/cgroup.procs");
    for (std::string pid; std::getline(procs, pid);) write_file(home_procs(), pid);
  } catch (...) {
  }
  ::rmdir(path_.c_str());
}

std::string MemoryCgroup::home_procs() const {
  return root_ + (home_ == "/" ? "" : home_) + "/cgroup.procs";
}

void MemoryCgroup::enter() {
  write_file(path_ + "/cgroup.procs", std::to_string(::getpid()));
  inside_ = true;
}

void MemoryCgroup::leave() {
  if (!inside_) return;
  write_file(home_procs(), std::to_string(::getpid()));
  inside_ = false;
}

Process::Process(std::vector<std::string> argv, const Env& env, std::string log_path)
    : log_path_(std::move(log_path)) {
  const ExecArgs exec(argv, env);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    // A new process group, so that a test's SIGKILL never reaches the test runner.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(exec.argv()[0], exec.argv(), exec.envp());
    std::perror("execve");
    ::_exit(127);
  }
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Process::signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

void Process::sample_hwm() {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      long kib = std::atol(line.c_str() + 6);
      if (kib > hwm_kib_) hwm_kib_ = kib;
    }
  }
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    sample_hwm();
    int status = 0;
    rusage usage{};
    pid_t r = ::wait4(pid_, &status, WNOHANG, &usage);
    if (r == pid_) {
      maxrss_kib_ = usage.ru_maxrss;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

int Process::wait_blocking() {
  if (exit_code_) return *exit_code_;
  int status = 0;
  rusage usage{};
  ::wait4(pid_, &status, 0, &usage);
  maxrss_kib_ = usage.ru_maxrss;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return *exit_code_;
}

bool Process::running() {
  return !wait_exit(0ms).has_value();
}

std::string Process::log() const {
  std::ifstream f(log_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

S3Server::S3Server(const std::string& credentials_file, std::vector<std::string> faults)
    : port_(free_port()), argv_{RELAY_TEST_NODE, RELAY_TEST_S3_SERVER,
                                "--port",        std::to_string(port_),
                                "--dir",         dir_.path() + "/data"} {
  if (!credentials_file.empty()) {
    argv_.push_back("--credentials-file");
    argv_.push_back(credentials_file);
  }
  argv_.insert(argv_.end(), faults.begin(), faults.end());
  start();
}

void S3Server::start() {
  proc_ = std::make_unique<Process>(argv_, Env{}, dir_.path() + "/s3.log");  // (appended to)
  if (!wait_until([&] { return port_open(port_); }, 20s))
    throw std::runtime_error("S3 test server did not start: " + proc_->log());
}

S3Server::~S3Server() = default;

Env S3Server::env() const {
  return {{"RELAY_STORAGE_URL", "s3://" + bucket() + "/jobs"},
          {"RELAY_STORAGE_S3_ENDPOINT", endpoint()},
          {"RELAY_STORAGE_S3_PATH_STYLE", "true"},
          {"RELAY_STORAGE_S3_REGION", "us-east-1"},
          {"AWS_ACCESS_KEY_ID", "relaytestkey"},
          {"AWS_SECRET_ACCESS_KEY", "relaytestsecret"}};
}

void S3Server::kill() {
  proc_->signal(SIGKILL);
  proc_->wait_exit(5s);
}

void S3Server::pause() {
  proc_->signal(SIGSTOP);
}

void S3Server::resume() {
  proc_->signal(SIGCONT);
}

bool S3Server::aws_put(const std::string& local_path, const std::string& key) const {
  std::string cmd =
      "AWS_ACCESS_KEY_ID=relaytestkey AWS_SECRET_ACCESS_KEY=relaytestsecret "
      "AWS_DEFAULT_REGION=us-east-1 "
      "AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null "
      "/usr/bin/aws --endpoint-url " +
      endpoint() + " s3 cp '" + local_path + "' s3://" + bucket() + "/" + key + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string S3Server::aws_cat(const std::string& key) const {
  std::string cmd =
      "AWS_ACCESS_KEY_ID=relaytestkey AWS_SECRET_ACCESS_KEY=relaytestsecret "
      "AWS_DEFAULT_REGION=us-east-1 "
      "AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null "
      "/usr/bin/aws --endpoint-url " +
      endpoint() + " s3 cp s3://" + bucket() + "/" + key + " - 2>/dev/null";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  return ::pclose(p) == 0 ? out : "";
}

InferenceServer::InferenceServer(InferenceOptions o) : port_(free_port()) {
  events_path_ = dir_.path() + "/events.txt";
  std::vector<std::string> argv{noop_binary(),
                                "--listen",
                                "127.0.0.1:" + std::to_string(port_),
                                "--health-status",
                                std::to_string(o.health_status),
                                "--status",
                                std::to_string(o.status),
                                "--delay-ms",
                                std::to_string(o.delay_ms),
                                "--result-bytes",
                                std::to_string(o.result_bytes),
                                "--content-type",
                                o.content_type};
  if (o.fail_first >= 0) {
    argv.insert(argv.end(), {"--fail-first", std::to_string(o.fail_first)});
    if (!o.retry_after.empty()) argv.insert(argv.end(), {"--retry-after", o.retry_after});
  }
  if (o.progress_steps > 0)
    argv.insert(argv.end(), {"--progress-steps", std::to_string(o.progress_steps)});
  if (o.meet > 0) argv.insert(argv.end(), {"--meet", std::to_string(o.meet)});
  if (!o.delays_ms.empty()) {
    std::string list;
    for (long d : o.delays_ms) list += (list.empty() ? "" : ",") + std::to_string(d);
    argv.insert(argv.end(), {"--delays-ms", list});
  }
  if (o.endless_chunk_line) argv.push_back("--endless-chunk-line");
  if (o.record_events) {
    argv.push_back("--events");
    argv.push_back(events_path_);
  }
  argv_ = std::move(argv);
  start();
}

void InferenceServer::start() {
  proc_ = std::make_unique<Process>(argv_, Env{}, dir_.path() + "/inference.log");
  if (!wait_until([&] { return port_open(port_); }, 10s))
    throw std::runtime_error("inference server did not start");
}

void InferenceServer::kill() {
  proc_->signal(SIGKILL);
  proc_->wait_exit(5s);
}

std::string InferenceServer::events() const {
  std::ifstream f(events_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool InferenceServer::saw(const std::string& line) const {
  return events().find(line + "\n") != std::string::npos;
}

GatewayServer::GatewayServer(Env env, std::string config_file)
    : env_(std::move(env)), config_file_(std::move(config_file)), port_(free_port()) {
  env_["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(port_);
  start();
}

void GatewayServer::start() {
  std::vector<std::string> argv{gateway_binary()};
  if (!config_file_.empty()) argv.insert(argv.end(), {"--config", config_file_});
  proc_ = std::make_unique<Process>(argv, env_,
                                    dir_.path() + "/gateway-" + std::to_string(runs_++) + ".log");
  if (!wait_until([&] { return port_open(port_); }, 20s))
    throw std::runtime_error("gateway did not start: " + proc_->log());
}

int GatewayServer::stop() {
  proc_->signal(SIGTERM);
  auto code = proc_->wait_exit(20s);
  return code ? *code : -1;
}

void GatewayServer::kill() {
  proc_->signal(SIGKILL);
  proc_->wait_exit(5s);
}

WebhookReceiver::WebhookReceiver(int fail_first, int port, int retry_after, int fail_status,
                                 int delay_ms)
    : port_(port ? port : free_port()),
      fail_first_(fail_first),
      retry_after_(retry_after),
      fail_status_(fail_status),
      delay_ms_(delay_ms) {}

void WebhookReceiver::start() {
  proc_ = std::make_unique<Process>(
      std::vector<std::string>{
          "/usr/bin/python3", RELAY_TEST_WEBHOOK_RECEIVER, "--port", std::to_string(port_),
          "--secret", kSecret, "--log", dir_.path() + "/deliveries.jsonl", "--fail-first",
          std::to_string(fail_first_), "--retry-after", std::to_string(retry_after_),
          "--fail-status", std::to_string(fail_status_), "--delay-ms", std::to_string(delay_ms_)},
      Env{}, dir_.path() + "/receiver.log");
  if (!wait_until([&] { return port_open(port_); }, 20s))
    throw std::runtime_error("webhook receiver did not start");
}

std::vector<std::string> WebhookReceiver::lines() const {
  std::ifstream f(dir_.path() + "/deliveries.jsonl");
  std::vector<std::string> out;
  std::string line;
  // Whole lines only: the receiver may be writing the last one as it is read (a test saw half a
  // line, "incomplete JSON"); a line without its newline yet comes at the next read.
  while (std::getline(f, line) && !f.eof())
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string gateway_binary() {
  return RELAY_TEST_GATEWAY_BIN;
}
std::string relay_binary() {
  return RELAY_TEST_RELAY_BIN;
}
std::string noop_binary() {
  return RELAY_TEST_NOOP_BIN;
}

}  // namespace relay::testing
