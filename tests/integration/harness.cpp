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
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

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

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

void make_test_pki(const std::string& dir) {
  // EC keys: quick to make. The server certificate names localhost and 127.0.0.1.
  std::string script =
      "set -e; mkdir -p '" + dir + "'; cd '" + dir + "'; " +
      R"(key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key; openssl req -x509 -new -key ca.key -out ca.crt -days 3 -subj /CN=relay-test-ca
key other-ca.key; openssl req -x509 -new -key other-ca.key -out other-ca.crt -days 3 -subj /CN=not-the-ca
for who in server client; do
  key $who.key; openssl req -new -key $who.key -out $who.csr -subj /CN=$who
done
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1
' > server.ext
printf 'extendedKeyUsage=clientAuth
' > client.ext
for who in server client; do
  openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $who.crt -days 3 -extfile $who.ext 2>/dev/null
done
chmod 644 *.key)";
  if (std::system(("bash -c " + shell_quote(script)).c_str()) != 0)
    throw std::runtime_error("cannot make the test PKI with openssl");
}

RedisServer::RedisServer(bool persistent, std::vector<std::string> extra_args, bool tls,
                         bool cluster)
    : persistent_(persistent), extra_args_(std::move(extra_args)), tls_(tls), cluster_(cluster) {
  if (tls_) make_test_pki(tls_dir());
  const int n = cluster_ ? 3 : 1;
  for (int i = 0; i < n; ++i) {
    ports_.push_back(free_port());
    bus_ports_.push_back(cluster_ ? free_port() : 0);
    replica_of_.push_back(-1);
    served_.push_back(false);
    procs_.emplace_back();
  }
  start();
  if (!cluster_) return;
  // Form the cluster: each master takes a third of the slots, then they meet.
  for (int i = 0; i < n; ++i) {
    auto c = redis::Connection::open(node_endpoint(i));
    int from = i * redis::kClusterSlots / n, to = (i + 1) * redis::kClusterSlots / n - 1;
    c.command({"CLUSTER", "ADDSLOTSRANGE", std::to_string(from), std::to_string(to)});
    if (i > 0)
      redis::Connection::open(node_endpoint(0))
          .command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(ports_[i]),
                    std::to_string(bus_ports_[i])});
  }
  wait_cluster_ok();
  formed_ = true;
}

RedisServer::~RedisServer() = default;

std::string RedisServer::url() const {
  std::string out = tls_ ? "rediss://" : "redis://";
  const char* sep = "";
  for (size_t i = 0; i < ports_.size(); ++i) {
    if (replica_of_[i] >= 0) continue;
    out += sep + std::string("127.0.0.1:") + std::to_string(ports_[i]);
    sep = ",";
  }
  return out;
}

void RedisServer::start_node(size_t i) {
  const std::string dir = dir_.path() + "/node-" + std::to_string(i);
  std::filesystem::create_directories(dir);
  std::vector<std::string> argv{
      "/usr/bin/redis-server",    "--bind",        "127.0.0.1", "--save", "", "--appendonly",
      persistent_ ? "yes" : "no", "--appendfsync", "always",    "--dir",  dir};
  const std::string port = std::to_string(ports_[i]);
  if (tls_) {
    // TLS only: no plain port. Client certificates are optional (required by extra_args).
    const std::string d = tls_dir() + "/";
    argv.insert(argv.end(), {"--port", "0", "--tls-port", port, "--tls-cert-file", d + "server.crt",
                             "--tls-key-file", d + "server.key", "--tls-ca-cert-file", d + "ca.crt",
                             "--tls-auth-clients", "optional"});
    if (cluster_) argv.insert(argv.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
  } else {
    argv.insert(argv.end(), {"--port", port});
  }
  if (cluster_) {
    // A short node timeout: failovers and "is it down" decisions within the tests' deadlines.
    argv.insert(argv.end(), {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                             "--cluster-port", std::to_string(bus_ports_[i]),
                             "--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0"});
  }
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  procs_[i] = std::make_unique<Process>(argv, Env{}, dir + "/redis.log");
  // Up when the server on the port is this process: a free port may be taken (by a connection's
  // local port, or another test's server) before redis-server binds it, and then it exits.
  auto ours = [&] {
    try {
      auto info = redis::as_string(redis::Connection::open(node_endpoint(static_cast<int>(i)))
                                       .command({"INFO", "server"})
                                       .get());
      return info.find("process_id:" + std::to_string(procs_[i]->pid()) + "\r") !=
             std::string::npos;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (!wait_until([&] { return !procs_[i]->running() || (port_open(ports_[i]) && ours()); }, 10s) ||
      !procs_[i]->running())
    throw PortTaken();
}

void RedisServer::start() {
  for (size_t i = 0; i < ports_.size(); ++i) start_node_anywhere(i);
  // A restarted cluster reloads nodes.conf and rejoins: ready once it is ok again.
  if (formed_) wait_cluster_ok();
}

void RedisServer::start_node_anywhere(size_t i) {
  for (int attempt = 1;; ++attempt) {
    try {
      start_node(i);
      served_[i] = true;
      return;
    } catch (const PortTaken&) {
      // A server that has served keeps its address (clients know it); a new one may move.
      if (served_[i]) throw std::runtime_error("redis-server could not restart on its port");
      if (attempt == 5) throw std::runtime_error("redis-server did not start");
      ports_[i] = free_port();
      if (cluster_) bus_ports_[i] = free_port();
    }
  }
}

void RedisServer::wait_cluster_ok() {
  bool ok = wait_until(
      [&] {
        try {
          for (int i = 0; i < nodes(); ++i) {
            auto c = redis::Connection::open(node_endpoint(i));
            auto info = redis::as_string(c.command({"CLUSTER", "INFO"}).get());
            if (info.find("cluster_state:ok") == std::string::npos) return false;
            auto known = c.command({"CLUSTER", "NODES"});
            auto text = redis::as_string(known.get());
            if (std::count(text.begin(), text.end(), '\n') < nodes()) return false;
          }
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!ok) throw std::runtime_error("the Redis Cluster did not become ok");
}

void RedisServer::stop() {
  for (auto& p : procs_) {
    p->signal(SIGKILL);
    p->wait_exit(5s);
  }
}

bool RedisServer::tls_by_default() {
  const char* v = std::getenv("RELAY_TEST_REDIS_TLS");
  return v && std::string(v) == "1";
}

bool RedisServer::cluster_by_default() {
  const char* v = std::getenv("RELAY_TEST_REDIS_CLUSTER");
  return v && std::string(v) == "1";
}

Env RedisServer::env() const {
  Env e{{"RELAY_REDIS_URL", url()}};
  if (tls_) e["RELAY_REDIS_TLS_CA_FILE"] = tls_dir() + "/ca.crt";
  if (cluster_) e["RELAY_REDIS_MODE"] = "cluster";
  return e;
}

redis::Endpoint RedisServer::endpoint() const {
  redis::Endpoint ep = cluster_ ? redis::parse_cluster_urls(url()) : redis::parse_url(url());
  if (tls_) ep.tls_ca_file = tls_dir() + "/ca.crt";
  return ep;
}

redis::Endpoint RedisServer::node_endpoint(int i) const {
  redis::Endpoint ep;
  ep.port = ports_[static_cast<size_t>(i)];
  ep.tls = tls_;
  if (tls_) {
    // With the client certificate: servers started with --tls-auth-clients yes accept it too.
    ep.tls_ca_file = tls_dir() + "/ca.crt";
    ep.tls_cert_file = tls_dir() + "/client.crt";
    ep.tls_key_file = tls_dir() + "/client.key";
  }
  return ep;
}

redis::Connection RedisServer::connect() const {
  return redis::Connection::open(endpoint());
}

namespace {
std::string node_id(const redis::Endpoint& ep) {
  return redis::as_string(redis::Connection::open(ep).command({"CLUSTER", "MYID"}).get());
}
}  // namespace

int RedisServer::node_of_slot(int slot) const {
  auto r = redis::Connection::open(node_endpoint(0)).command({"CLUSTER", "SLOTS"});
  for (size_t i = 0; i < r->elements; ++i) {
    auto* range = r->element[i];
    if (redis::as_integer(range->element[0]) <= slot &&
        slot <= redis::as_integer(range->element[1])) {
      int port = static_cast<int>(redis::as_integer(range->element[2]->element[1]));
      for (int n = 0; n < nodes(); ++n)
        if (ports_[static_cast<size_t>(n)] == port) return n;
    }
  }
  return -1;
}

void RedisServer::migrate_slot(int slot, int to, int batch, std::chrono::milliseconds pause) {
  const int from = node_of_slot(slot);
  if (from == to) return;
  auto src = redis::Connection::open(node_endpoint(from));
  auto dst = redis::Connection::open(node_endpoint(to));
  const std::string s = std::to_string(slot);
  const std::string src_id = node_id(node_endpoint(from)), dst_id = node_id(node_endpoint(to));
  dst.command({"CLUSTER", "SETSLOT", s, "IMPORTING", src_id});
  src.command({"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id});
  for (;;) {
    auto keys = src.command({"CLUSTER", "GETKEYSINSLOT", s, std::to_string(batch)});
    if (keys->elements == 0) break;
    std::vector<std::string> argv{
        "MIGRATE", "127.0.0.1", std::to_string(ports_[static_cast<size_t>(to)]), "", "0",
        "5000",    "KEYS"};
    for (size_t i = 0; i < keys->elements; ++i) argv.push_back(redis::as_string(keys->element[i]));
    src.command(argv);
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  for (int n = 0; n < nodes(); ++n)
    if (replica_of_[static_cast<size_t>(n)] < 0)
      redis::Connection::open(node_endpoint(n)).command({"CLUSTER", "SETSLOT", s, "NODE", dst_id});
}

void RedisServer::add_replicas() {
  const int masters = nodes();
  for (int m = 0; m < masters; ++m) {
    ports_.push_back(free_port());
    bus_ports_.push_back(free_port());
    replica_of_.push_back(m);
    served_.push_back(false);
    procs_.emplace_back();
    const auto i = ports_.size() - 1;
    start_node_anywhere(i);
    redis::Connection::open(node_endpoint(0))
        .command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(ports_[i]),
                  std::to_string(bus_ports_[i])});
  }
  // A node can replicate only a master it knows.
  for (size_t i = static_cast<size_t>(masters); i < ports_.size(); ++i) {
    const std::string master = node_id(node_endpoint(replica_of_[i]));
    bool ok = wait_until(
        [&] {
          try {
            redis::Connection::open(node_endpoint(static_cast<int>(i)))
                .command({"CLUSTER", "REPLICATE", master});
            return true;
          } catch (const std::exception&) {
            return false;
          }
        },
        20s);
    if (!ok) throw std::runtime_error("a replica could not join its master");
  }
  bool synced = wait_until(
      [&] {
        try {
          for (size_t i = static_cast<size_t>(masters); i < ports_.size(); ++i) {
            auto info = redis::as_string(redis::Connection::open(node_endpoint(static_cast<int>(i)))
                                             .command({"INFO", "replication"})
                                             .get());
            if (info.find("master_link_status:up") == std::string::npos) return false;
          }
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!synced) throw std::runtime_error("the replicas did not sync");
  wait_cluster_ok();
}

void RedisServer::failover(int i) {
  int replica = -1;
  for (size_t n = 0; n < ports_.size(); ++n)
    if (replica_of_[n] == i) replica = static_cast<int>(n);
  if (replica < 0) throw std::logic_error("failover: node has no replica (add_replicas first)");
  // A manual failover gives up after 5 s (CLUSTER_MF_TIMEOUT) when the master is slow to pause
  // its clients — a loaded machine: ask again, as an operator would.
  bool done = false;
  for (int attempt = 0; attempt < 5 && !done; ++attempt) {
    try {
      redis::Connection::open(node_endpoint(replica)).command({"CLUSTER", "FAILOVER"});
    } catch (const redis::ReplyError&) {
      // e.g. "a manual failover is already in progress"
    }
    done = wait_until(
        [&] {
          try {
            auto role = redis::Connection::open(node_endpoint(replica)).command({"ROLE"});
            return redis::as_string(role->element[0]) == "master";
          } catch (const std::exception&) {
            return false;
          }
        },
        7s);
  }
  if (!done) throw std::runtime_error("CLUSTER FAILOVER did not complete");
  std::swap(replica_of_[static_cast<size_t>(replica)], replica_of_[static_cast<size_t>(i)]);
  replica_of_[static_cast<size_t>(i)] = replica;
  replica_of_[static_cast<size_t>(replica)] = -1;
  wait_cluster_ok();
}

SentinelRedis::SentinelRedis() {
  // No 5 s wait before a diskless full sync (the default): the replica is in sync at once.
  const std::vector<std::string> fast_sync{"--repl-diskless-sync-delay", "0"};
  nodes_[0] = std::make_unique<RedisServer>(false, fast_sync, false);
  auto replica_args = fast_sync;
  replica_args.insert(replica_args.end(),
                      {"--replicaof", "127.0.0.1", std::to_string(nodes_[0]->port())});
  nodes_[1] = std::make_unique<RedisServer>(false, replica_args, false);
  for (int i = 0; i < 3; ++i) {
    int port = free_port();
    sentinel_ports_.push_back(port);
    // Sentinels rewrite their config file: one each, writable.
    std::string conf = dir_.path() + "/sentinel-" + std::to_string(i) + ".conf";
    std::ofstream(conf) << "port " << port << "\nbind 127.0.0.1\ndir " << dir_.path()
                        << "\nsentinel monitor relaytest 127.0.0.1 "
                        << nodes_[0]->port()
                        // 2 s: a loaded CI machine must not look like a dead master
                        << " 2\nsentinel down-after-milliseconds relaytest 2000\n"
                           "sentinel failover-timeout relaytest 10000\n";
    sentinels_.push_back(std::make_unique<Process>(
        std::vector<std::string>{"/usr/bin/redis-server", conf, "--sentinel"}, Env{},
        dir_.path() + "/sentinel-" + std::to_string(i) + ".log"));
  }
  for (int port : sentinel_ports_)
    if (!wait_until([&] { return port_open(port); }, 10s))
      throw std::runtime_error("a sentinel did not start");
  // Ready when the replica is in sync, and every sentinel knows it and the other sentinels.
  bool ready = wait_until(
      [&] {
        try {
          auto info = redis::as_string(nodes_[1]->connect().command({"INFO", "replication"}).get());
          if (info.find("master_link_status:up") == std::string::npos) return false;
          for (int port : sentinel_ports_) {
            redis::Endpoint ep;
            ep.port = port;
            auto c = redis::Connection::open(ep);
            auto replicas = c.command({"SENTINEL", "replicas", "relaytest"});
            auto peers = c.command({"SENTINEL", "sentinels", "relaytest"});
            if (replicas->elements != 1 || peers->elements != 2) return false;
          }
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!ready) throw std::runtime_error("the sentinels did not see the replica and each other");
}

SentinelRedis::~SentinelRedis() = default;

Env SentinelRedis::env() const {
  std::string url = "redis://";
  for (size_t i = 0; i < sentinel_ports_.size(); ++i)
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinel_ports_[i]);
  return {{"RELAY_REDIS_URL", url},
          {"RELAY_REDIS_MODE", "sentinel"},
          {"RELAY_REDIS_SENTINEL_MASTER", "relaytest"}};
}

redis::Endpoint SentinelRedis::endpoint() const {
  return redis::parse_sentinel_urls(env().at("RELAY_REDIS_URL"), "relaytest");
}

int SentinelRedis::master_port() const {
  for (int port : sentinel_ports_) {
    try {
      redis::Endpoint ep;
      ep.port = port;
      auto r =
          redis::Connection::open(ep).command({"SENTINEL", "get-master-addr-by-name", "relaytest"});
      if (r->elements == 2) return static_cast<int>(redis::as_integer(r->element[1]));
    } catch (const std::exception&) {
    }
  }
  return 0;
}

void SentinelRedis::failover() {
  int before = master_port();
  redis::Endpoint ep;
  ep.port = sentinel_ports_[0];
  redis::Connection::open(ep).command({"SENTINEL", "FAILOVER", "relaytest"});
  wait_for_new_master(before);
}

void SentinelRedis::kill_master() {
  int before = master_port();
  RedisServer* killed = nullptr;
  for (auto& n : nodes_)
    if (n->port() == before) killed = n.get();
  killed->stop();
  wait_for_new_master(before);
  const int promoted = master_port();
  // Back as a replica of the new master, as an orchestrator would restart it: the sentinels
  // reconfigure it (until then the new master has no replica to acknowledge writes). Waited
  // for, so that the test goes on with the topology settled.
  killed->start();
  const bool settled = wait_until(
      [&] {
        try {
          redis::Endpoint e;
          e.port = killed->port();
          auto role = redis::Connection::open(e).command({"ROLE"});
          return redis::as_string(role->element[0]) == "slave" && master_port() == promoted;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!settled) throw std::runtime_error("the restarted master did not become a replica");
}

void SentinelRedis::wait_for_new_master(int before) {
  bool done = wait_until(
      [&] {
        int now = master_port();
        if (now == 0 || now == before) return false;
        try {
          redis::Endpoint m;
          m.port = now;
          auto role = redis::Connection::open(m).command({"ROLE"});
          return redis::as_string(role->element[0]) == "master";
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!done) throw std::runtime_error("the failover did not complete");
}

S3Server::S3Server(const std::string& credentials_file) : port_(free_port()) {
  std::vector<std::string> argv{RELAY_TEST_NODE, RELAY_TEST_S3_SERVER,
                                "--port",        std::to_string(port_),
                                "--dir",         dir_.path() + "/data"};
  if (!credentials_file.empty()) {
    argv.push_back("--credentials-file");
    argv.push_back(credentials_file);
  }
  proc_ = std::make_unique<Process>(argv, Env{}, dir_.path() + "/s3.log");
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
  if (o.record_events) {
    argv.push_back("--events");
    argv.push_back(events_path_);
  }
  proc_ = std::make_unique<Process>(argv, Env{}, dir_.path() + "/inference.log");
  if (!wait_until([&] { return port_open(port_); }, 10s))
    throw std::runtime_error("inference server did not start");
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

GatewayServer::GatewayServer(Env env) : env_(std::move(env)), port_(free_port()) {
  env_["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(port_);
  start();
}

void GatewayServer::start() {
  proc_ = std::make_unique<Process>(std::vector<std::string>{gateway_binary()}, env_,
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

WebhookReceiver::WebhookReceiver(int fail_first, int port, int retry_after)
    : port_(port ? port : free_port()), fail_first_(fail_first), retry_after_(retry_after) {}

void WebhookReceiver::start() {
  proc_ = std::make_unique<Process>(
      std::vector<std::string>{
          "/usr/bin/python3", RELAY_TEST_WEBHOOK_RECEIVER, "--port", std::to_string(port_),
          "--secret", kSecret, "--log", dir_.path() + "/deliveries.jsonl", "--fail-first",
          std::to_string(fail_first_), "--retry-after", std::to_string(retry_after_)},
      Env{}, dir_.path() + "/receiver.log");
  if (!wait_until([&] { return port_open(port_); }, 20s))
    throw std::runtime_error("webhook receiver did not start");
}

std::vector<std::string> WebhookReceiver::lines() const {
  std::ifstream f(dir_.path() + "/deliveries.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line))
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
