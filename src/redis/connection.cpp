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
#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"

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

Endpoint parse_sentinel_urls(std::string_view urls, const std::string& master_name) {
  if (master_name.empty()) throw std::invalid_argument("sentinel mode needs redis.sentinel_master");
  Endpoint ep;
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
    if (!parse_uri_has_port(item)) one.port = 26379;
    if (first) {
      ep = one;
      ep.host.clear();
    }
    ep.sentinels.emplace_back(one.host, one.port);
    first = false;
  }
  ep.sentinel_master = master_name;
  return ep;
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

Connection::Connection(std::unique_ptr<Transport> t) : t_(std::move(t)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

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
  if (!t_ || t_->fd < 0) return true;
  if (via_sentinel_ && g_master_epoch != master_epoch_) return true;
  if (t_->reader->pos < t_->reader->len) return true;  // unread buffered bytes
  if (t_->ssl && SSL_pending(t_->ssl) > 0) return true;
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
  // A dead server must not hang a command for ever; blocking commands lift this themselves.
  conn.set_read_timeout(std::chrono::milliseconds(30'000));
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
  return checked(t_->next_reply());
}

void Connection::set_read_timeout(std::chrono::milliseconds timeout) {
  t_->set_timeouts(timeout, std::chrono::milliseconds(30'000));
}

void Connection::interrupt() noexcept {
  if (t_ && t_->fd >= 0) ::shutdown(t_->fd, SHUT_RDWR);
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
