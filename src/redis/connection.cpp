#include "redis/connection.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/url/parse.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "redis/slot.hpp"

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

}  // namespace

bool is_nil(const redisReply* r) {
  return r == nullptr || r->type == REDIS_REPLY_NIL;
}

std::string as_string(const redisReply* r) {
  if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
    return std::string(r->str, r->len);
  if (r && r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  throw ReplyError("redis: expected a string reply");
}

long long as_integer(const redisReply* r) {
  if (r && r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r && r->type == REDIS_REPLY_STRING) {
    long long v = 0;
    auto [p, ec] = std::from_chars(r->str, r->str + r->len, v);
    if (ec == std::errc{} && p == r->str + r->len) return v;
  }
  throw ReplyError("redis: expected an integer reply");
}

std::optional<std::string> as_optional_string(const redisReply* r) {
  if (is_nil(r)) return std::nullopt;
  return as_string(r);
}

std::vector<std::string> as_strings(const redisReply* r, size_t first) {
  std::vector<std::string> out;
  for (size_t i = first; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i)
    out.push_back(as_string(r->element[i]));
  return out;
}

std::vector<std::pair<std::string, std::string>> as_pairs(const redisReply* r, size_t first) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = first; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
    out.emplace_back(as_string(r->element[i]), as_string(r->element[i + 1]));
  return out;
}

namespace {
bool parse_uri_has_port(const std::string& url) {
  auto parsed = boost::urls::parse_uri(url);
  return parsed && parsed->has_port();
}
}  // namespace

Endpoint parse_url(std::string_view url) {
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed || (parsed->scheme() != "redis" && parsed->scheme() != "rediss"))
    throw std::invalid_argument("expected redis[s]://[user:password@]host:port[/db]");
  Endpoint ep;
  ep.tls = parsed->scheme() == "rediss";
  if (!parsed->host().empty()) ep.host = parsed->host();
  if (parsed->has_port()) {
    ep.port = parsed->port_number();
    if (ep.port == 0) throw std::invalid_argument("bad port");
  }
  if (parsed->has_userinfo()) {
    ep.username = parsed->user();
    ep.password = parsed->password();
  }
  std::string path = parsed->path();
  if (!path.empty() && path != "/") {
    std::string_view db = std::string_view(path).substr(1);
    auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), ep.db);
    if (ec != std::errc{} || p != db.data() + db.size() || ep.db < 0)
      throw std::invalid_argument("the path must be a database number");
  }
  return ep;
}

namespace {
// "url,host:port,..." -> the first item's endpoint (scheme, user, password, database) and every
// item's host and port.
std::pair<Endpoint, std::vector<std::pair<std::string, int>>> parse_url_list(std::string_view urls,
                                                                             int default_port) {
  Endpoint ep;
  std::vector<std::pair<std::string, int>> nodes;
  bool first = true;
  size_t start = 0;
  while (start <= urls.size()) {
    size_t comma = urls.find(',', start);
    std::string item(urls.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    start = comma == std::string_view::npos ? urls.size() + 1 : comma + 1;
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) throw std::invalid_argument("empty sentinel address in the list");
    if (item.find("://") == std::string::npos)
      item = std::string(first ? "redis://" : (ep.tls ? "rediss://" : "redis://")) + item;
    Endpoint one = parse_url(item);
    if (!parse_uri_has_port(item)) one.port = default_port;
    if (first) {
      ep = one;
      ep.host.clear();
    }
    nodes.emplace_back(one.host, one.port);
    first = false;
  }
  return {ep, nodes};
}
}  // namespace

Endpoint parse_sentinel_urls(std::string_view urls, const std::string& master_name) {
  if (master_name.empty()) throw std::invalid_argument("sentinel mode needs redis.sentinel_master");
  auto [ep, nodes] = parse_url_list(urls, 26379);
  ep.sentinels = std::move(nodes);
  ep.sentinel_master = master_name;
  return ep;
}

Endpoint parse_cluster_urls(std::string_view urls) {
  auto [ep, nodes] = parse_url_list(urls, 6379);
  if (ep.db != 0) throw std::invalid_argument("Redis Cluster has database 0 only");
  ep.cluster_seeds = std::move(nodes);
  return ep;
}

std::optional<std::string_view> routing_key(const std::vector<std::string>& argv) {
  if (argv.size() < 2) return std::nullopt;
  std::string cmd = argv[0];
  for (auto& ch : cmd) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::set<std::string, std::less<>> keyless{
      "PING",     "PUBLISH", "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "CLIENT",
      "WAIT",     "INFO",    "ROLE",      "SCAN",       "DBSIZE",      "CLUSTER",      "SCRIPT",
      "FLUSHALL", "FLUSHDB", "CONFIG",    "DEBUG",      "TIME",        "AUTH",         "SELECT",
      "HELLO",    "ASKING",  "READONLY",  "KEYS",       "COMMAND",     "SENTINEL",     "ECHO"};
  if (keyless.contains(cmd)) return std::nullopt;
  if (cmd == "EVAL" || cmd == "EVALSHA") {
    if (argv.size() < 4 || argv[2] == "0") return std::nullopt;
    return argv[3];
  }
  if (cmd == "XREADGROUP" || cmd == "XREAD") {
    for (size_t i = 1; i + 1 < argv.size(); ++i) {
      std::string tok = argv[i];
      for (auto& ch : tok) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (tok == "STREAMS") return argv[i + 1];
    }
    return std::nullopt;
  }
  if (cmd == "XGROUP" || cmd == "XINFO" || cmd == "OBJECT" || cmd == "MEMORY")
    return argv.size() > 2 ? std::optional<std::string_view>(argv[2]) : std::nullopt;
  return argv[1];
}

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "TLS error" : out;
}

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};

// One SSL_CTX per distinct TLS configuration, for the life of the process: loading a CA bundle
// costs milliseconds, a connection should not pay it.
std::shared_ptr<SSL_CTX> tls_context(const Endpoint& ep) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<SSL_CTX>> cache;
  // TLS writes may raise SIGPIPE on a connection the server closed (OpenSSL writes with
  // write(2)); every Relay process ignores it already, this makes it true for any caller.
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });
  std::string id = ep.tls_ca_file + '\n' + ep.tls_cert_file + '\n' + ep.tls_key_file + '\n' +
                   (ep.tls_verify ? "1" : "0");
  std::lock_guard lock(mu);
  if (auto it = cache.find(id); it != cache.end()) return it->second;
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SslCtxDeleter{});
  if (!ctx) throw IoError("redis: TLS: " + ssl_errors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // Read whole TLS records (and what follows) per recv(2), not header then body: one system
  // call per reply instead of two. Buffered bytes are seen by SSL_has_pending (stale()).
  SSL_CTX_set_read_ahead(ctx.get(), 1);
  if (ep.tls_verify) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    bool ok = ep.tls_ca_file.empty()
                  ? SSL_CTX_set_default_verify_paths(ctx.get()) == 1
                  : SSL_CTX_load_verify_locations(ctx.get(), ep.tls_ca_file.c_str(), nullptr) == 1;
    if (!ok) throw IoError("redis: TLS: cannot load CA certificates: " + ssl_errors());
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  if (!ep.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), ep.tls_cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), ep.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      throw IoError("redis: TLS: cannot load the client certificate: " + ssl_errors());
  }
  cache.emplace(id, ctx);
  return ctx;
}

bool is_ip_address(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// A TCP connection to host:port within timeout; returns a blocking socket.
int tcp_connect(const Endpoint& ep) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string where = ep.host + ":" + std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
      rc != 0)
    throw IoError("redis: cannot resolve " + ep.host + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(res, &::freeaddrinfo);
  std::string last = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(ep.connect_timeout.count()));
      if (rc == 0) {
        errno = ETIMEDOUT;
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  throw IoError("redis: cannot connect to " + where + ": " + last);
}

}  // namespace

struct Connection::Transport {
  int fd = -1;
  std::shared_ptr<SSL_CTX> ctx;  // kept alive while ssl uses it
  SSL* ssl = nullptr;
  redisReader* reader = redisReaderCreate();

  ~Transport() {
    if (ssl) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
    if (reader) redisReaderFree(reader);
  }

  void set_timeouts(std::chrono::milliseconds read, std::chrono::milliseconds write) {
    timeval r = to_timeval(read), w = to_timeval(write);
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r) != 0 ||
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &w, sizeof w) != 0)
      throw IoError("redis: cannot set a timeout");
  }

  [[noreturn]] void fail(const std::string& what, int err) {
    if (err == EAGAIN || err == EWOULDBLOCK) throw IoError("redis: " + what + ": timed out");
    throw IoError("redis: " + what + ": " + (err ? std::strerror(err) : "connection closed"));
  }

  void handshake(const Endpoint& ep) {
    ctx = tls_context(ep);
    ssl = SSL_new(ctx.get());
    if (!ssl || SSL_set_fd(ssl, fd) != 1) throw IoError("redis: TLS: " + ssl_errors());
    const std::string& name = ep.tls_server_name.empty() ? ep.host : ep.tls_server_name;
    if (!is_ip_address(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (ep.tls_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      bool ok = is_ip_address(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1
                                    : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0) == 1;
      if (!ok) throw IoError("redis: TLS: bad server name " + name);
    }
    ERR_clear_error();
    if (SSL_connect(ssl) != 1) {
      long verify = SSL_get_verify_result(ssl);
      std::string why = verify != X509_V_OK ? std::string("certificate verify failed: ") +
                                                  X509_verify_cert_error_string(verify)
                                            : ssl_errors();
      throw IoError("redis: TLS handshake with " + ep.host + ":" + std::to_string(ep.port) +
                    " failed: " + why);
    }
  }

  void write_all(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w;
      if (ssl) {
        ERR_clear_error();
        int rc = SSL_write(ssl, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (rc <= 0) fail("write", SSL_get_error(ssl, rc) == SSL_ERROR_SYSCALL ? errno : 0);
        w = rc;
      } else {
        w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
          if (errno == EINTR) continue;
          fail("write", errno);
        }
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  // Reads what is there (at least one byte) into the reply reader.
  void read_more() {
    char buf[16384];
    for (;;) {
      ssize_t n;
      if (ssl) {
        ERR_clear_error();
        int rc = SSL_read(ssl, buf, sizeof buf);
        if (rc <= 0) {
          int e = SSL_get_error(ssl, rc);
          if (e == SSL_ERROR_WANT_READ) fail("read", EAGAIN);
          fail("read", e == SSL_ERROR_SYSCALL ? errno : 0);
        }
        n = rc;
      } else {
        n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("read", n < 0 ? errno : 0);
      }
      if (redisReaderFeed(reader, buf, static_cast<size_t>(n)) != REDIS_OK)
        throw IoError("redis: protocol error: " + std::string(reader->errstr));
      return;
    }
  }

  redisReply* next_reply() {
    for (;;) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK)
        throw IoError("redis: protocol error: " + std::string(reader->errstr));
      if (reply) return static_cast<redisReply*>(reply);
      read_more();
    }
  }
};

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

  // Asks the known masters, then the seeds, until one answers.
  void refresh(const Endpoint& ep) {
    std::vector<std::string> candidates;
    {
      std::shared_lock lock(mu_);
      candidates = masters_;
    }
    for (const auto& [h, p] : ep.cluster_seeds) candidates.push_back(address(h, p));
    std::string errors;
    for (const auto& addr : candidates) {
      try {
        auto c = Connection::open(node_endpoint(ep, addr));
        auto r = c.command({"CLUSTER", "SLOTS"});
        load(r.get(), node_endpoint(ep, addr).host);
        return;
      } catch (const ReplyError& e) {
        throw ReplyError(std::string(e.what()) + " (from " + addr +
                         "; is it a Redis Cluster node? redis.mode is cluster)");
      } catch (const IoError& e) {
        errors += std::string(" ") + e.what() + ";";
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
};

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

struct Connection::Cluster {
  Endpoint ep;
  std::shared_ptr<SlotMap> map;
  std::mutex mu;  // nodes: interrupt() runs on other threads
  std::map<std::string, Connection> nodes;
  Connection* last = nullptr;  // the node of the previous command
  std::chrono::milliseconds read_timeout = kReadTimeout;

  Connection& node(const std::string& addr) {
    {
      std::lock_guard lock(mu);
      auto it = nodes.find(addr);
      if (it != nodes.end() && !it->second.stale()) return it->second;
      if (it != nodes.end()) {
        if (last == &it->second) last = nullptr;
        nodes.erase(it);
      }
    }
    Connection c = Connection::open(node_endpoint(ep, addr));
    c.set_read_timeout(read_timeout);
    std::lock_guard lock(mu);
    return nodes.insert_or_assign(addr, std::move(c)).first->second;
  }
  void drop(Connection* c) {
    std::lock_guard lock(mu);
    for (auto it = nodes.begin(); it != nodes.end(); ++it)
      if (&it->second == c) {
        nodes.erase(it);
        break;
      }
    if (last == c) last = nullptr;
    map->mark_stale();
  }
  Connection& for_key(std::optional<std::string_view> key) {
    if (!key) {
      if (last && !last->stale()) return *last;
      auto masters = map->masters(ep);
      return node(
          masters[std::hash<std::thread::id>{}(std::this_thread::get_id()) % masters.size()]);
    }
    int slot = key_slot(*key);
    std::string addr = map->owner(ep, slot);
    if (addr.empty()) {
      map->mark_stale();
      throw TransientError("redis: CLUSTERDOWN no master serves slot " + std::to_string(slot),
                           false);
    }
    return node(addr);
  }
};

Connection::Connection(std::unique_ptr<Transport> t) : t_(std::move(t)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

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
      // CLUSTERDOWN, TRYAGAIN (a multi-key step mid-migration): the caller backs off.
      cl.map->mark_stale();
      throw;
    } catch (const IoError&) {
      cl.drop(node);  // a failed node: its slots are probably served elsewhere by now
      throw;
    } catch (const ReplyError& e) {
      auto redirect = parse_redirect(e.what());
      if (!redirect || redirects >= 5) throw;
      log::debug("redis cluster redirect", {{"kind", redirect->ask ? "ASK" : "MOVED"},
                                            {"slot", redirect->slot},
                                            {"to", redirect->addr}});
      if (redirect->ask) {
        ask = redirect->addr;
      } else {
        ask.reset();
        cl.map->moved(redirect->slot, redirect->addr);
      }
    }
  }
}

// The one place where a reply becomes a value or an exception.
Reply Connection::checked(redisReply* r) {
  Reply reply(r);
  if (reply->type == REDIS_REPLY_ERROR) {
    std::string message(reply->str, reply->len);
    if (is_transient_error(message))
      throw TransientError("redis: " + message, needs_new_connection(message));
    throw ReplyError("redis: " + message);
  }
  return reply;
}

bool is_transient_error(std::string_view message) {
  // The error code is the first word. BUSYGROUP, BUSYKEY are not BUSY. UNBLOCKED: a blocked
  // command (BLMOVE) released because the server stopped being a master (failover).
  auto code = message.substr(0, message.find(' '));
  return code == "LOADING" || code == "BUSY" || code == "TRYAGAIN" || code == "CLUSTERDOWN" ||
         code == "MASTERDOWN" || code == "READONLY" || code == "UNBLOCKED";
}

bool needs_new_connection(std::string_view message) {
  auto code = message.substr(0, message.find(' '));
  return code == "READONLY" || code == "MASTERDOWN" || code == "UNBLOCKED";
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

bool Connection::stale() const noexcept {
  if (cluster_) return false;
  if (!t_ || t_->fd < 0) return true;
  if (via_sentinel_ && g_master_epoch != master_epoch_) return true;
  if (t_->reader->pos < t_->reader->len) return true;  // unread buffered bytes
  if (t_->ssl && SSL_has_pending(t_->ssl) == 1) return true;
  pollfd p{t_->fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}

namespace {

Endpoint sentinel_endpoint(const Endpoint& ep, size_t i) {
  Endpoint sentinel;  // sentinels: no database, no auth; the same TLS settings
  sentinel.host = ep.sentinels[i].first;
  sentinel.port = ep.sentinels[i].second;
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
        auto c = Connection::open(sentinel_endpoint(ep, turn % ep.sentinels.size()));
        c.set_read_timeout(std::chrono::milliseconds(0));
        c.append({"SUBSCRIBE", "+switch-master"});
        c.read_reply();
        backoff.reset();
        for (;;) {
          auto m =
              c.read_reply();  // "message" "+switch-master" "<name> <old ip> <old port> <new...>"
          if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
              as_string(m->element[2]).starts_with(ep.sentinel_master + " "))
            master_changed();
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

Connection Connection::open(const Endpoint& ep) {
  if (!ep.cluster_seeds.empty()) {
    Connection conn(nullptr);
    conn.cluster_ = std::make_unique<Cluster>();
    conn.cluster_->ep = ep;
    conn.cluster_->map = SlotMap::of(ep);
    conn.cluster_->map->refresh_if_stale(ep);  // reachable, and a cluster: or throw now
    conn.server_ = ep;
    return conn;
  }
  if (!ep.sentinel_master.empty()) {
    start_sentinel_watch(ep);
    const std::uint64_t epoch = g_master_epoch;  // before resolving: a switch meanwhile is seen
    auto [host, port] = resolve_master(ep);
    Endpoint master = ep;
    master.sentinel_master.clear();
    master.sentinels.clear();
    master.host = host;
    master.port = port;
    Connection conn = open(master);
    // A sentinel may answer with a master that has just been demoted: never write to a replica.
    auto role = conn.command({"ROLE"});
    if (role->type != REDIS_REPLY_ARRAY || role->elements == 0 ||
        as_string(role->element[0]) != "master")
      throw IoError("redis: " + host + ":" + std::to_string(port) +
                    " is not a master (a failover is in progress)");
    conn.via_sentinel_ = true;
    conn.master_epoch_ = epoch;
    return conn;
  }
  auto t = std::make_unique<Transport>();
  if (!t->reader) throw IoError("redis: cannot allocate a reader");
  t->fd = tcp_connect(ep);
  t->set_timeouts(ep.connect_timeout, ep.connect_timeout);
  if (ep.tls) t->handshake(ep);
  Connection conn(std::move(t));
  conn.server_ = ep;
  // A dead server must not hang a command for ever; blocking commands lift this themselves.
  conn.set_read_timeout(kReadTimeout);
  if (!ep.password.empty()) {
    if (ep.username.empty())
      conn.command({"AUTH", ep.password});
    else
      conn.command({"AUTH", ep.username, ep.password});
  }
  if (ep.db != 0) conn.command({"SELECT", std::to_string(ep.db)});
  conn.client_id_ = as_integer(conn.command({"CLIENT", "ID"}).get());
  return conn;
}

Reply Connection::command(const std::vector<std::string>& argv) {
  if (cluster_) return cluster_command(argv);
  append(argv);
  return read_reply();
}

Reply Connection::command(std::initializer_list<std::string_view> argv) {
  std::vector<std::string> v(argv.begin(), argv.end());
  return command(v);
}

Reply Connection::eval(const Script& script, const std::vector<std::string>& keys,
                       const std::vector<std::string>& args) {
  std::vector<std::string> argv{"EVALSHA", std::string(script.sha1), std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  try {
    return command(argv);
  } catch (const ReplyError& e) {
    if (std::string_view(e.what()).find("NOSCRIPT") == std::string_view::npos) throw;
  }
  argv[0] = "EVAL";
  argv[1] = std::string(script.source);
  return command(argv);
}

void Connection::append(const std::vector<std::string>& argv) {
  if (cluster_) {
    cluster_->last = &cluster_->for_key(routing_key(argv));
    return cluster_->last->append(argv);
  }
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  int len = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  if (len < 0) throw IoError("redis: cannot format a command");
  std::unique_ptr<char, decltype(&redisFreeCommand)> owned(cmd, &redisFreeCommand);
  t_->write_all(cmd, static_cast<size_t>(len));
}

Reply Connection::read_reply() {
  if (cluster_) {
    if (!cluster_->last) throw IoError("redis: no reply expected");
    return cluster_->last->read_reply();
  }
  return checked(t_->next_reply());
}

void Connection::set_read_timeout(std::chrono::milliseconds timeout) {
  if (cluster_) {
    std::lock_guard lock(cluster_->mu);
    cluster_->read_timeout = timeout;
    for (auto& [addr, c] : cluster_->nodes) c.set_read_timeout(timeout);
    return;
  }
  t_->set_timeouts(timeout, kReadTimeout);
}

void Connection::interrupt() noexcept {
  if (cluster_) {
    std::lock_guard lock(cluster_->mu);
    for (auto& [addr, c] : cluster_->nodes) c.interrupt();
    return;
  }
  if (t_ && t_->fd >= 0) ::shutdown(t_->fd, SHUT_RDWR);
}

long long Connection::client_id() const {
  if (cluster_) return cluster_->last ? cluster_->last->client_id() : 0;
  return client_id_;
}

BlockedClient Connection::blocking_client(std::string_view key) {
  if (cluster_) return cluster_->for_key(key).blocking_client(key);
  return {server_, client_id_};
}

bool unblock(const BlockedClient& client) {
  auto conn = Connection::open(client.server);
  return as_integer(conn.command({"CLIENT", "UNBLOCK", std::to_string(client.id)}).get()) == 1;
}

std::vector<Endpoint> Connection::masters(const Endpoint& ep) {
  if (ep.cluster_seeds.empty()) return {ep};
  std::vector<Endpoint> out;
  for (const auto& addr : SlotMap::of(ep)->masters(ep)) out.push_back(node_endpoint(ep, addr));
  return out;
}

Connection connect_with_retry(const Endpoint& ep, std::chrono::milliseconds max_wait,
                              std::stop_token stop) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + max_wait;
  Backoff backoff;
  for (int attempt = 1;; ++attempt) {
    try {
      return Connection::open(ep);
    } catch (const IoError& e) {
      auto delay = backoff.next();
      if (clock::now() + delay >= deadline || stop.stop_requested()) throw;
      log::warn("redis unavailable, retrying",
                {{"error", e.what()}, {"attempt", attempt}, {"retry_in_ms", delay.count()}});
      if (!sleep_unless_stopped(delay, stop)) throw;
    }
  }
}

}  // namespace relay::redis
