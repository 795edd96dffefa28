// The tests' Redis under Sentinel: a master, replicas and three sentinels; failovers graceful
// and by crash.

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

SentinelRedis::SentinelRedis(bool passwords, bool tls) : passwords_(passwords), tls_(tls) {
  if (tls_) make_test_pki(tls_dir());
  // No 5 s wait before a diskless full sync (the default): the replica is in sync at once.
  std::vector<std::string> fast_sync{"--repl-diskless-sync-delay", "0"};
  // (each node may become the other's replica)
  if (passwords_)
    fast_sync.insert(fast_sync.end(),
                     {"--requirepass", kMasterPassword, "--masterauth", kMasterPassword});
  if (tls_) fast_sync.insert(fast_sync.end(), {"--tls-replication", "yes"});
  const std::string pki = tls_ ? tls_dir() : std::string();
  nodes_[0] = std::make_unique<RedisServer>(false, fast_sync, tls_, false, pki);
  auto replica_args = fast_sync;
  replica_args.insert(replica_args.end(),
                      {"--replicaof", "127.0.0.1", std::to_string(nodes_[0]->port())});
  nodes_[1] = std::make_unique<RedisServer>(false, replica_args, tls_, false, pki);
  for (int i = 0; i < 3; ++i) {
    int port = free_port();
    sentinel_ports_.push_back(port);
    // Sentinels rewrite their config file: one each, writable.
    std::string conf = dir_.path() + "/sentinel-" + std::to_string(i) + ".conf";
    std::ofstream(conf) << (tls_ ? "port 0\ntls-port " : "port ") << port
                        << "\nbind 127.0.0.1\ndir " << dir_.path()
                        << "\nsentinel monitor relaytest 127.0.0.1 "
                        << nodes_[0]->port()
                        // 2 s: a loaded CI machine must not look like a dead master
                        << " 2\nsentinel down-after-milliseconds relaytest 2000\n"
                           "sentinel failover-timeout relaytest 10000\n";
    if (passwords_)
      std::ofstream(conf, std::ios::app)
          << "sentinel auth-pass relaytest " << kMasterPassword << "\nrequirepass "
          << kSentinelPassword << "\nsentinel sentinel-pass " << kSentinelPassword << "\n";
    if (tls_)  // tls-replication: a sentinel's own links (to the nodes, to its peers) are TLS
      std::ofstream(conf, std::ios::app)
          << "tls-cert-file " << tls_dir() << "/server.crt\ntls-key-file " << tls_dir()
          << "/server.key\ntls-ca-cert-file " << tls_dir()
          << "/ca.crt\ntls-auth-clients optional\ntls-replication yes\n";
    sentinels_.push_back(std::make_unique<Process>(
        std::vector<std::string>{"/usr/bin/redis-server", conf, "--sentinel"}, Env{},
        dir_.path() + "/sentinel-" + std::to_string(i) + ".log"));
  }
  for (int port : sentinel_ports_)
    if (!wait_until([&] { return port_open(port); }, 10s))
      throw std::runtime_error("a sentinel did not start");
  // Ready when the replica is in sync, and every sentinel knows it and the other sentinels.
  // What was seen last goes into the error, with the sentinels' last log lines: a failure here
  // (once in a stress run with four tests at a time) said nothing of which part was missing.
  std::string seen;
  bool ready = wait_until(
      [&] {
        seen.clear();
        try {
          auto info = redis::as_string(redis::Connection::open(data_node(nodes_[1]->port()))
                                           .command({"INFO", "replication"})
                                           .get());
          const bool synced = info.find("master_link_status:up") != std::string::npos;
          seen = synced ? "replica in sync" : "replica not in sync";
          bool all = synced;
          for (int port : sentinel_ports_) {
            auto c = redis::Connection::open(sentinel(port));
            auto replicas = c.command({"SENTINEL", "replicas", "relaytest"});
            auto peers = c.command({"SENTINEL", "sentinels", "relaytest"});
            seen += "; sentinel :" + std::to_string(port) + " sees " +
                    std::to_string(replicas->elements) + " replica(s), " +
                    std::to_string(peers->elements) + " peer(s)";
            all = all && replicas->elements == 1 && peers->elements == 2;
          }
          return all;
        } catch (const std::exception& e) {
          seen += std::string("; ") + e.what();
          return false;
        }
      },
      60s);
  if (!ready) {
    std::string logs;
    for (size_t i = 0; i < sentinels_.size(); ++i) {
      const std::string log = sentinels_[i]->log();
      logs += "\n--- sentinel " + std::to_string(i) + "'s log, its end:\n" +
              log.substr(log.size() > 1500 ? log.size() - 1500 : 0);
    }
    throw std::runtime_error("the sentinels did not see the replica and each other: " + seen +
                             logs);
  }
}

SentinelRedis::~SentinelRedis() = default;

Env SentinelRedis::env() const {
  std::string url = tls_ ? "rediss://" : "redis://";
  for (size_t i = 0; i < sentinel_ports_.size(); ++i)
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinel_ports_[i]);
  Env e{{"RELAY_REDIS_URL", url},
        {"RELAY_REDIS_MODE", "sentinel"},
        {"RELAY_REDIS_SENTINEL_MASTER", "relaytest"}};
  if (passwords_) {
    e["RELAY_REDIS_PASSWORD"] = kMasterPassword;
    e["RELAY_REDIS_SENTINEL_PASSWORD"] = kSentinelPassword;
  }
  if (tls_) e["RELAY_REDIS_TLS_CA_FILE"] = tls_dir() + "/ca.crt";
  return e;
}

redis::Endpoint SentinelRedis::endpoint() const {
  auto ep = redis::parse_sentinel_urls(env().at("RELAY_REDIS_URL"), "relaytest");
  if (passwords_) {
    ep.password = kMasterPassword;
    ep.sentinel_password = kSentinelPassword;
  }
  if (tls_) ep.tls_ca_file = tls_dir() + "/ca.crt";
  return ep;
}

redis::Endpoint SentinelRedis::sentinel(int port) const {
  redis::Endpoint ep;
  ep.port = port;
  if (passwords_) ep.password = kSentinelPassword;
  ep.tls = tls_;
  if (tls_) ep.tls_ca_file = tls_dir() + "/ca.crt";
  return ep;
}

redis::Endpoint SentinelRedis::data_node(int port) const {
  redis::Endpoint ep;
  ep.port = port;
  if (passwords_) ep.password = kMasterPassword;
  ep.tls = tls_;
  if (tls_) ep.tls_ca_file = tls_dir() + "/ca.crt";
  return ep;
}

int SentinelRedis::master_port() const {
  for (int port : sentinel_ports_) {
    try {
      auto r = redis::Connection::open(sentinel(port))
                   .command({"SENTINEL", "get-master-addr-by-name", "relaytest"});
      if (r->elements == 2) return static_cast<int>(redis::as_integer(r->element[1]));
    } catch (const std::exception&) {
    }
  }
  return 0;
}

void SentinelRedis::failover() {
  int before = master_port();
  redis::Connection::open(sentinel(sentinel_ports_[0]))
      .command({"SENTINEL", "FAILOVER", "relaytest"});
  wait_for_new_master(before);
}

void SentinelRedis::kill_master() {
  int before = master_port();
  RedisServer* killed = nullptr;
  for (auto& n : nodes_)
    if (n->port() == before) killed = n.get();
  killed->stop();
  wait_for_new_master(before);
  // Back as a replica of the new master, as an orchestrator would restart it: the sentinels
  // reconfigure it (until then the new master has no replica to acknowledge writes). Waited
  // for, so that the test goes on with the topology settled.
  killed->start();
  wait_until_replica(*killed);
}

void SentinelRedis::freeze_master() {
  const int before = master_port();
  for (auto& n : nodes_)
    if (n->port() == before) frozen_ = n.get();
  frozen_->freeze();
  wait_for_new_master(before);
}

bool SentinelRedis::replica_caught_up() {
  const int port = master_port();
  auto master = (nodes_[0]->port() == port ? nodes_[0] : nodes_[1])->connect();
  master.command({"SET", "probe", "1"});
  return redis::as_integer(master.command({"WAIT", "1", "5000"}).get()) == 1;
}

void SentinelRedis::thaw() {
  if (!frozen_) return;
  std::exchange(frozen_, nullptr)->thaw();
  for (auto& n : nodes_)
    if (n->port() != master_port()) wait_until_replica(*n);
}

void SentinelRedis::wait_until_replica(RedisServer& node) {
  const int master = master_port();
  const bool settled = wait_until(
      [&] {
        try {
          auto role = redis::Connection::open(data_node(node.port())).command({"ROLE"});
          return redis::as_string(role->element[0]) == "slave" && master_port() == master;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!settled) throw std::runtime_error("the former master did not become a replica");
}

void SentinelRedis::wait_for_new_master(int before) {
  bool done = wait_until(
      [&] {
        int now = master_port();
        if (now == 0 || now == before) return false;
        try {
          auto role = redis::Connection::open(data_node(now)).command({"ROLE"});
          return redis::as_string(role->element[0]) == "master";
        } catch (const std::exception&) {
          return false;
        }
      },
      30s);
  if (!done) throw std::runtime_error("the failover did not complete");
}

}  // namespace relay::testing
