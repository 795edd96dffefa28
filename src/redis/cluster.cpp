// Connection in Redis Cluster mode: commands routed by their key's slot to the master serving
// it (a process-wide slot map per cluster), MOVED and ASK followed, failed nodes dropped.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <set>
#include <shared_mutex>
#include <thread>
#include <utility>

#include "common/log.hpp"
#include "redis/connection_parts.hpp"
#include "redis/slot.hpp"

namespace relay::redis {

namespace {

std::string address(const std::string& host, int port) {
  return host + ":" + std::to_string(port);
}

// The endpoint of one cluster node: the cluster's settings (auth, TLS) at another address.
Endpoint node_endpoint(const Endpoint& ep, const std::string& addr) {
  Endpoint node = ep;
  node.cluster_seeds.clear();
  auto colon = addr.rfind(':');
  node.host = addr.substr(0, colon);
  node.port = std::stoi(addr.substr(colon + 1));
  return node;
}
}  // namespace

// Which master serves each slot, shared by every connection of the process to one cluster.
// Refreshed from CLUSTER SLOTS when marked stale (a MOVED, a lost node, CLUSTERDOWN), at most
// every 100 ms; a MOVED also corrects its one slot at once.
class SlotMap {
 public:
  static std::shared_ptr<SlotMap> of(const Endpoint& ep) {
    static std::mutex mu;
    static std::map<std::string, std::shared_ptr<SlotMap>> maps;
    std::string id;
    for (const auto& [h, p] : ep.cluster_seeds) id += address(h, p) + ",";
    std::lock_guard lock(mu);
    auto& m = maps[id];
    if (!m) m = std::make_shared<SlotMap>();
    return m;
  }

  // The master serving slot, refreshing first if needed; empty if no node serves it.
  std::string owner(const Endpoint& ep, int slot) {
    refresh_if_stale(ep);
    std::shared_lock lock(mu_);
    return owners_[static_cast<size_t>(slot)];
  }
  std::vector<std::string> masters(const Endpoint& ep) {
    refresh_if_stale(ep);
    std::shared_lock lock(mu_);
    return masters_;
  }
  void moved(int slot, const std::string& addr) {
    std::unique_lock lock(mu_);
    owners_[static_cast<size_t>(slot)] = addr;
    stale_ = true;
  }
  void mark_stale() {
    std::unique_lock lock(mu_);
    stale_ = true;
  }
  // A node that failed (a connection cut, a reply that never came): the map is stale, and the
  // node is asked last in the next refreshes.
  void unanswered(const std::string& addr) {
    std::unique_lock lock(mu_);
    stale_ = true;
    unanswered_[addr] = Clock::now();
  }

  void refresh_if_stale(const Endpoint& ep) {
    {
      std::shared_lock lock(mu_);
      if (!stale_ || (!masters_.empty() && Clock::now() - refreshed_ < kMinInterval)) return;
    }
    refresh(ep);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kMinInterval = std::chrono::milliseconds(100);
  // How long a node that failed is asked after the others.
  static constexpr auto kUnansweredFor = std::chrono::seconds(30);

  // Asks the known masters, then the seeds, each once, until one answers — those that failed
  // lately last: each silent node asked costs a connect_timeout, and a frozen master (whose
  // replica is taking over) would otherwise be asked first by every refresh.
  void refresh(const Endpoint& ep) {
    std::vector<std::string> candidates;
    std::map<std::string, Clock::time_point> unanswered;
    {
      std::shared_lock lock(mu_);
      candidates = masters_;
      unanswered = unanswered_;
    }
    for (const auto& [h, p] : ep.cluster_seeds) {
      const std::string addr = address(h, p);
      if (std::find(candidates.begin(), candidates.end(), addr) == candidates.end())
        candidates.push_back(addr);
    }
    const auto now = Clock::now();
    std::stable_partition(candidates.begin(), candidates.end(), [&](const std::string& addr) {
      auto it = unanswered.find(addr);
      return it == unanswered.end() || now - it->second >= kUnansweredFor;
    });
    std::string errors;
    for (const auto& addr : candidates) {
      try {
        auto c = Connection::open(node_endpoint(ep, addr));
        // Part of connecting: a silent node is passed over as an unreachable one.
        ReadWithin connecting(c, ep.connect_timeout);
        auto r = c.command({"CLUSTER", "SLOTS"});
        load(r.get(), node_endpoint(ep, addr).host);
        std::unique_lock lock(mu_);
        unanswered_.erase(addr);
        return;
      } catch (const ReplyError& e) {
        throw ReplyError(std::string(e.what()) + " (from " + addr +
                         "; is it a Redis Cluster node? redis.mode is cluster)");
      } catch (const IoError& e) {
        errors += std::string(" ") + e.what() + ";";
        std::unique_lock lock(mu_);
        unanswered_[addr] = Clock::now();
      }
    }
    throw IoError("redis: no cluster node answered CLUSTER SLOTS:" + errors);
  }

  // CLUSTER SLOTS: [[start, end, [host, port, id...], replicas...]...]. An empty host means
  // "the address you reached me at".
  void load(const redisReply* r, const std::string& asked_host) {
    std::vector<std::string> owners(kClusterSlots);
    std::set<std::string> masters;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
      const redisReply* range = r->element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      const redisReply* master = range->element[2];
      if (master->type != REDIS_REPLY_ARRAY || master->elements < 2) continue;
      std::string host = as_string(master->element[0]);
      if (host.empty() || host == "?") host = asked_host;
      std::string addr = address(host, static_cast<int>(as_integer(master->element[1])));
      auto from = as_integer(range->element[0]), to = as_integer(range->element[1]);
      for (auto slot = from; slot <= to && slot < kClusterSlots; ++slot)
        owners[static_cast<size_t>(slot)] = addr;
      masters.insert(addr);
    }
    if (masters.empty()) throw IoError("redis: the cluster serves no slots (CLUSTERDOWN)");
    std::unique_lock lock(mu_);
    owners_ = std::move(owners);
    masters_.assign(masters.begin(), masters.end());
    stale_ = false;
    refreshed_ = Clock::now();
  }

  std::shared_mutex mu_;
  std::vector<std::string> owners_ = std::vector<std::string>(kClusterSlots);
  std::vector<std::string> masters_;
  bool stale_ = true;
  Clock::time_point refreshed_{};
  std::map<std::string, Clock::time_point> unanswered_;  // node -> when it last failed
};

namespace {

// "MOVED 3999 127.0.0.1:6381" / "ASK ..." (after our "redis: " prefix) -> slot and address.
struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string addr;
};
std::optional<Redirect> parse_redirect(std::string_view what) {
  if (what.starts_with("redis: ")) what.remove_prefix(7);
  Redirect r;
  if (what.starts_with("MOVED "))
    what.remove_prefix(6);
  else if (what.starts_with("ASK ")) {
    what.remove_prefix(4);
    r.ask = true;
  } else {
    return std::nullopt;
  }
  auto space = what.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto [p, ec] = std::from_chars(what.data(), what.data() + space, r.slot);
  if (ec != std::errc{} || r.slot < 0 || r.slot >= kClusterSlots) return std::nullopt;
  r.addr = std::string(what.substr(space + 1));
  if (r.addr.starts_with(":")) return std::nullopt;  // no host: not ours to guess
  return r;
}

}  // namespace

Connection& Connection::Cluster::node(const std::string& addr) {
  {
    std::lock_guard lock(mu);
    auto it = nodes.find(addr);
    if (it != nodes.end() && !it->second.stale()) return it->second;
    if (it != nodes.end()) {
      if (last == &it->second) last = nullptr;
      nodes.erase(it);
    }
  }
  Connection c = Connection::open(node_endpoint(bounded_ep(), addr));
  c.set_read_timeout(read_timeout);
  std::lock_guard lock(mu);
  return nodes.insert_or_assign(addr, std::move(c)).first->second;
}
void Connection::Cluster::drop(Connection* c) {
  std::string addr;
  {
    std::lock_guard lock(mu);
    for (auto it = nodes.begin(); it != nodes.end(); ++it)
      if (&it->second == c) {
        addr = it->first;
        nodes.erase(it);
        break;
      }
    if (last == c) last = nullptr;
  }
  if (addr.empty())
    map->mark_stale();
  else
    map->unanswered(addr);
}
Endpoint Connection::Cluster::bounded_ep() const {
  Endpoint e = ep;
  if (read_timeout.count() > 0) e.connect_timeout = std::min(e.connect_timeout, read_timeout);
  return e;
}
Connection& Connection::Cluster::for_key(std::optional<std::string_view> key) {
  if (!key) {
    if (last && !last->stale()) return *last;
    auto masters = map->masters(bounded_ep());
    return node(masters[std::hash<std::thread::id>{}(std::this_thread::get_id()) % masters.size()]);
  }
  int slot = key_slot(*key);
  std::string addr = map->owner(bounded_ep(), slot);
  if (addr.empty()) {
    map->mark_stale();
    throw TransientError("redis: CLUSTERDOWN no master serves slot " + std::to_string(slot), false);
  }
  return node(addr);
}

Connection Connection::open_cluster(const Endpoint& ep) {
  Connection conn(nullptr);
  conn.cluster_ = std::make_unique<Cluster>();
  conn.cluster_->ep = ep;
  conn.cluster_->read_timeout = ep.read_timeout;
  conn.cluster_->map = SlotMap::of(ep);
  conn.cluster_->map->refresh_if_stale(ep);  // reachable, and a cluster: or throw now
  conn.server_ = ep;
  return conn;
}

namespace {
// Redirects followed for one command before its error is the caller's: with the pauses between
// them, about half a second for the nodes of a moving slot to agree.
constexpr int kMaxRedirects = 16;
constexpr auto kMaxRedirectPause = std::chrono::milliseconds(50);
}  // namespace

Reply Connection::cluster_command(const std::vector<std::string>& argv) {
  auto& cl = *cluster_;
  const auto key = routing_key(argv);
  std::optional<std::string> ask;  // the node an ASK sent us to, for one attempt
  for (int redirects = 0;; ++redirects) {
    Connection* node = ask ? &cl.node(*ask) : &cl.for_key(key);
    cl.last = node;
    try {
      if (!ask) return node->command(argv);
      node->append({"ASKING"});
      node->append(argv);
      node->read_reply();
      return node->read_reply();
    } catch (const TransientError& e) {
      // CLUSTERDOWN, TRYAGAIN (a multi-key step mid-migration): the caller backs off. (A node
      // out of memory still serves its slots.)
      if (!e.out_of_memory()) cl.map->mark_stale();
      throw;
    } catch (const IoError&) {
      cl.drop(node);  // a failed node: its slots are probably served elsewhere by now
      throw;
    } catch (const ReplyError& e) {
      auto redirect = parse_redirect(e.what());
      if (!redirect || redirects >= kMaxRedirects) throw;
      log::debug("redis cluster redirect", {{"kind", redirect->ask ? "ASK" : "MOVED"},
                                            {"slot", redirect->slot},
                                            {"to", redirect->addr}});
      // A slot handed over node by node can send us back and forth for a moment: the source,
      // told first, answers MOVED to the target, which until told answers MOVED back. Two
      // redirects are the normal worst case (ASK, then MOVED); past them, wait a little longer
      // each time for the nodes to agree.
      if (redirects >= 2)
        std::this_thread::sleep_for(std::min(
            std::chrono::milliseconds(1LL << std::min(redirects - 2, 10)), kMaxRedirectPause));
      if (redirect->ask) {
        ask = redirect->addr;
      } else {
        ask.reset();
        cl.map->moved(redirect->slot, redirect->addr);
      }
    }
  }
}

// The calls by the node they route to (a script by its first key, as eval()), in order of
// first appearance: one write per node (a model's steps: one node; a group commit of many
// requests' submissions: each node its share).
std::vector<std::pair<Connection*, std::vector<std::size_t>>> Connection::cluster_route(
    const std::vector<Call>& calls) {
  std::vector<std::pair<Connection*, std::vector<std::size_t>>> by_node;
  // Every node is connected before anything is written: a node that cannot be reached here
  // leaves the calls unsent (NotSent: they did not run), not unknown.
  try {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Call& c = calls[i];
      auto key = c.script
                     ? (c.keys.empty() ? std::nullopt : std::optional<std::string_view>(c.keys[0]))
                     : routing_key(c.args);
      Connection* n = &cluster_->for_key(key);
      auto it = std::find_if(by_node.begin(), by_node.end(), [n](auto& g) { return g.first == n; });
      if (it == by_node.end()) it = by_node.insert(by_node.end(), {n, {}});
      it->second.push_back(i);
    }
  } catch (const TransientError&) {
    throw;
  } catch (const NotSent&) {
    throw;
  } catch (const IoError& e) {
    throw NotSent(e.what());
  }
  return by_node;
}

std::vector<Reply> Connection::cluster_pipeline(const std::vector<Call>& calls, bool checked) {
  auto& cl = *cluster_;
  auto by_node = cluster_route(calls);
  // The nodes one after another.
  std::vector<Reply> out(calls.size());
  for (auto& [node, indices] : by_node) {
    std::vector<Call> share;  // (one node, the usual case: the calls as they are)
    if (by_node.size() > 1)
      for (auto i : indices) share.push_back(calls[i]);
    const auto& mine = by_node.size() > 1 ? share : calls;
    cl.last = node;
    std::vector<Reply> replies;
    try {
      replies = node->pipeline(mine, /*checked=*/false);
    } catch (const IoError&) {
      cl.drop(node);  // a failed node: its slots are probably served elsewhere by now
      throw;
    }
    for (std::size_t k = 0; k < indices.size(); ++k) out[indices[k]] = std::move(replies[k]);
  }
  cluster_settle(calls, out, checked);
  return out;
}

void Connection::cluster_settle(const std::vector<Call>& calls, std::vector<Reply>& out,
                                bool checked) {
  auto run = [this](const Call& c) {
    return c.script ? eval(*c.script, c.keys, c.args) : command(c.args);
  };
  bool stale = false;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto* r = out[i].get();
    if (r->type != REDIS_REPLY_ERROR) continue;
    // Redirected (a slot moving or moved): it did not run there; sent again alone, routed anew.
    if (parse_redirect(std::string_view(r->str, r->len))) {
      out[i] = run(calls[i]);
      continue;
    }
    try {
      throw_if_error(r);
    } catch (const TransientError& e) {
      stale = stale || !e.out_of_memory();  // CLUSTERDOWN, TRYAGAIN: as cluster_command does
    } catch (...) {
    }
  }
  if (stale) cluster_->map->mark_stale();
  if (checked)
    for (const auto& r : out) throw_if_error(r.get());
}

void Connection::cluster_send(std::vector<Call> calls) {
  auto by_node = cluster_route(calls);
  if (by_node.size() != 1) {
    // Across nodes: run now, the replies handed over by receive().
    sent_replies_ = cluster_pipeline(calls, /*checked=*/false);
    return;
  }
  // One node (a model's steps, its keys in one hash slot): written to it now and read by
  // receive(), as on a plain connection — the node's connection holds the calls meanwhile.
  Connection* node = by_node.front().first;
  cluster_->last = node;
  try {
    node->send(calls);
  } catch (const IoError&) {
    cluster_->drop(node);
    throw;
  }
  sent_node_ = node;
  sent_calls_ = std::move(calls);
}

std::vector<Reply> Connection::cluster_receive(bool checked) {
  Connection* node = std::exchange(sent_node_, nullptr);
  if (!node) {
    auto out = std::move(sent_replies_);
    sent_replies_.clear();
    if (checked)
      for (const auto& r : out) throw_if_error(r.get());
    return out;
  }
  const auto calls = std::move(sent_calls_);
  sent_calls_.clear();
  std::vector<Reply> out;
  try {
    out = node->receive(/*checked=*/false);
  } catch (const IoError&) {
    cluster_->drop(node);
    throw;
  }
  cluster_settle(calls, out, checked);
  return out;
}

std::vector<Endpoint> Connection::masters(const Endpoint& ep) {
  if (ep.cluster_seeds.empty()) return {ep};
  std::vector<Endpoint> out;
  for (const auto& addr : SlotMap::of(ep)->masters(ep)) out.push_back(node_endpoint(ep, addr));
  return out;
}

}  // namespace relay::redis
