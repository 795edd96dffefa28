// Connection in sentinel mode: the master's address asked from the sentinels in turn, and a
// watch on +switch-master that makes connections to a former master stale.
#include <atomic>
#include <set>
#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "redis/connection_parts.hpp"
#include "redis/subscription.hpp"

namespace relay::redis {

namespace {

// Master generations in sentinel mode: bumped when a sentinel announces +switch-master, or when
// the watch lost its sentinel (an announcement may have been missed). Connections opened in an
// older generation are stale.
std::atomic<std::uint64_t> g_master_epoch{0};
std::mutex g_hooks_mu;
std::map<std::uint64_t, std::function<void()>> g_hooks;
std::uint64_t g_next_hook = 0;

void master_changed() {
  ++g_master_epoch;
  std::lock_guard lock(g_hooks_mu);
  for (auto& [id, f] : g_hooks) f();
}

Endpoint sentinel_endpoint(const Endpoint& ep, size_t i) {
  Endpoint sentinel;  // sentinels: no database, their own credentials; the same TLS settings
  sentinel.host = ep.sentinels[i].first;
  sentinel.port = ep.sentinels[i].second;
  sentinel.username = ep.sentinel_username;
  sentinel.password = ep.sentinel_password;
  sentinel.connect_timeout = ep.connect_timeout;
  sentinel.tls = ep.tls;
  sentinel.tls_ca_file = ep.tls_ca_file;
  sentinel.tls_cert_file = ep.tls_cert_file;
  sentinel.tls_key_file = ep.tls_key_file;
  sentinel.tls_verify = ep.tls_verify;
  return sentinel;
}

// One thread per process and master name, subscribed to +switch-master on a sentinel.
void start_sentinel_watch(const Endpoint& ep) {
  static std::mutex mu;
  static std::set<std::string> watched;
  {
    std::lock_guard lock(mu);
    if (!watched.insert(ep.sentinel_master).second) return;
  }
  std::thread([ep] {
    Backoff backoff;
    for (size_t turn = 0;; ++turn) {
      try {
        // (A sentinel gone silent is left for the next one: Subscription pings.)
        auto sub =
            Subscription::open(sentinel_endpoint(ep, turn % ep.sentinels.size()), "+switch-master");
        backoff.reset();
        for (;;) {  // "<name> <old ip> <old port> <new ip> <new port>"
          if (sub.next().payload.starts_with(ep.sentinel_master + " ")) master_changed();
        }
      } catch (const std::exception& e) {
        master_changed();  // an announcement may have been missed meanwhile
        log::warn("sentinel watch lost; reconnecting", {{"error", e.what()}});
        std::this_thread::sleep_for(backoff.next());
      }
    }
  }).detach();
}

// Asks the sentinels, in turn, for the master's address. The turn starts where the last
// successful one was, so a dead first sentinel costs one timeout, not one per connect.
std::pair<std::string, int> resolve_master(const Endpoint& ep) {
  static std::atomic<size_t> next{0};
  std::string errors;
  for (size_t i = 0; i < ep.sentinels.size(); ++i) {
    size_t at = (next.load() + i) % ep.sentinels.size();
    Endpoint sentinel = sentinel_endpoint(ep, at);
    try {
      auto c = Connection::open(sentinel);
      // Part of connecting: a silent sentinel is passed over as an unreachable one.
      ReadWithin connecting(c, ep.connect_timeout);
      auto r = c.command({"SENTINEL", "get-master-addr-by-name", ep.sentinel_master});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        errors += " " + sentinel.host + ":" + std::to_string(sentinel.port) + " knows no master " +
                  ep.sentinel_master + ";";
        continue;
      }
      next = at;
      return {as_string(r->element[0]), static_cast<int>(as_integer(r->element[1]))};
    } catch (const std::exception& e) {
      errors += std::string(" ") + e.what() + ";";
    }
  }
  throw IoError("redis: no sentinel gave the address of master " + ep.sentinel_master + ":" +
                errors);
}

}  // namespace

std::uint64_t master_epoch() {
  return g_master_epoch.load();
}

MasterChangeHook::MasterChangeHook(std::function<void()> f) {
  std::lock_guard lock(g_hooks_mu);
  id_ = ++g_next_hook;
  g_hooks.emplace(id_, std::move(f));
}

MasterChangeHook::~MasterChangeHook() {
  std::lock_guard lock(g_hooks_mu);
  g_hooks.erase(id_);
}

Connection Connection::open_via_sentinel(const Endpoint& ep) {
  start_sentinel_watch(ep);
  const std::uint64_t epoch =
      g_master_epoch.load();  // before resolving: a switch meanwhile is seen
  auto [host, port] = resolve_master(ep);
  Endpoint master = ep;
  master.sentinel_master.clear();
  master.sentinels.clear();
  master.host = host;
  master.port = port;
  Connection conn = open(master);
  // A sentinel may answer with a master that has just been demoted: never write to a replica.
  auto role = [&] {
    ReadWithin connecting(conn, ep.connect_timeout);
    return conn.command({"ROLE"});
  }();
  if (role->type != REDIS_REPLY_ARRAY || role->elements == 0 ||
      as_string(role->element[0]) != "master")
    throw IoError("redis: " + host + ":" + std::to_string(port) +
                  " is not a master (a failover is in progress)");
  conn.via_sentinel_ = true;
  conn.master_epoch_ = epoch;
  return conn;
}

}  // namespace relay::redis
