// The tests' redis-server: standalone or a 3-master cluster, plain or TLS (a test CA made per
// server), with the cluster moves the tests need (slot migration, replicas, failover).

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
#include "harness.hpp"
#include "redis/slot.hpp"

namespace relay::testing {

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
                         bool cluster, std::string pki)
    : persistent_(persistent),
      extra_args_(std::move(extra_args)),
      tls_(tls),
      pki_(std::move(pki)),
      cluster_(cluster) {
  if (tls_ && pki_.empty()) make_test_pki(tls_dir());
  for (size_t i = 0; i + 1 < extra_args_.size(); ++i)
    if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
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
            // Every node known, out of handshake, over a connected bus link: a PUBLISH reaches
            // the other nodes' subscribers only over links that are up (a node still meeting
            // the others drops it), so "ok" alone is not ready.
            auto known = c.command({"CLUSTER", "NODES"});
            std::istringstream lines(redis::as_string(known.get()));
            int up = 0;
            for (std::string line; std::getline(lines, line);) {
              if (line.empty()) continue;
              if (line.find("handshake") != std::string::npos ||
                  line.find("noaddr") != std::string::npos ||
                  line.find(" connected") == std::string::npos)
                return false;
              ++up;
            }
            if (up < nodes()) return false;
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

void RedisServer::freeze() {
  for (auto& p : procs_) p->signal(SIGSTOP);
}

void RedisServer::thaw() {
  for (auto& p : procs_) p->signal(SIGCONT);
  if (cluster_ && formed_) wait_cluster_ok();  // (a frozen master rejoins as a replica)
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
  ep.password = password_;
  return ep;
}

redis::Endpoint RedisServer::node_endpoint(int i) const {
  redis::Endpoint ep;
  ep.port = ports_[static_cast<size_t>(i)];
  ep.password = password_;
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

bool RedisServer::has_blocked_client() const {
  for (int i = 0; i < nodes(); ++i) {
    auto c = redis::Connection::open(node_endpoint(i));
    std::istringstream list(redis::as_string(c.command({"CLIENT", "LIST"}).get()));
    for (std::string line; std::getline(list, line);) {
      const auto at = line.find(" flags=");
      if (at == std::string::npos) continue;
      const auto from = at + 7;
      if (line.substr(from, line.find(' ', from) - from).find('b') != std::string::npos)
        return true;
    }
  }
  return false;
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

int RedisServer::replica_of(int i) const {
  for (size_t n = 0; n < ports_.size(); ++n)
    if (replica_of_[n] == i) return static_cast<int>(n);
  throw std::logic_error("node " + std::to_string(i) + " has no replica (add_replicas first)");
}

bool RedisServer::says_master_within(int node, std::chrono::milliseconds within) const {
  return wait_until(
      [&] {
        try {
          auto role = redis::Connection::open(node_endpoint(node)).command({"ROLE"});
          return redis::as_string(role->element[0]) == "master";
        } catch (const std::exception&) {
          return false;
        }
      },
      within);
}

void RedisServer::freeze_and_fail_over(int i) {
  const int replica = replica_of(i);
  procs_[static_cast<size_t>(i)]->signal(SIGSTOP);
  if (!says_master_within(replica, 30s))
    throw std::runtime_error("the replica of a frozen master did not take over");
  replica_of_[static_cast<size_t>(i)] = replica;
  replica_of_[static_cast<size_t>(replica)] = -1;
}

void RedisServer::failover(int i) {
  const int replica = replica_of(i);
  // A manual failover gives up after 5 s (CLUSTER_MF_TIMEOUT) when the master is slow to pause
  // its clients — a loaded machine: ask again, as an operator would.
  bool done = false;
  for (int attempt = 0; attempt < 5 && !done; ++attempt) {
    try {
      redis::Connection::open(node_endpoint(replica)).command({"CLUSTER", "FAILOVER"});
    } catch (const redis::ReplyError&) {
      // e.g. "a manual failover is already in progress"
    }
    done = says_master_within(replica, 7s);
  }
  if (!done) throw std::runtime_error("CLUSTER FAILOVER did not complete");
  std::swap(replica_of_[static_cast<size_t>(replica)], replica_of_[static_cast<size_t>(i)]);
  replica_of_[static_cast<size_t>(i)] = replica;
  replica_of_[static_cast<size_t>(replica)] = -1;
  wait_cluster_ok();
}

}  // namespace relay::testing
