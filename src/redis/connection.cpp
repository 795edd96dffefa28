#include "redis/connection.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <boost/url/parse.hpp>
#include <charconv>

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::redis {

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

Endpoint parse_url(std::string_view url) {
  auto parsed = boost::urls::parse_uri(url);
  if (!parsed || parsed->scheme() != "redis")
    throw std::invalid_argument("expected redis://[user:password@]host:port[/db]");
  Endpoint ep;
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

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

// The one place where hiredis's error state becomes an exception.
Reply Connection::checked(redisReply* r) {
  if (r == nullptr) {
    std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    throw IoError("redis: " + why);
  }
  Reply reply(r);
  if (reply->type == REDIS_REPLY_ERROR) {
    std::string message(reply->str, reply->len);
    if (is_transient_error(message)) throw TransientError("redis: " + message);
    throw ReplyError("redis: " + message);
  }
  return reply;
}

bool is_transient_error(std::string_view message) {
  // The error code is the first word. BUSYGROUP, BUSYKEY are not BUSY.
  auto code = message.substr(0, message.find(' '));
  return code == "LOADING" || code == "BUSY" || code == "TRYAGAIN" || code == "CLUSTERDOWN" ||
         code == "MASTERDOWN" || code == "READONLY";
}

bool Connection::stale() const noexcept {
  if (!ctx_ || ctx_->fd < 0) return true;
  if (ctx_->reader && ctx_->reader->pos < ctx_->reader->len) return true;  // unread buffered bytes
  pollfd p{ctx_->fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}

Connection Connection::open(const Endpoint& ep) {
  redisContext* c =
      redisConnectWithTimeout(ep.host.c_str(), ep.port, to_timeval(ep.connect_timeout));
  if (c == nullptr) throw IoError("redis: cannot allocate a context");
  Connection conn(c);
  if (c->err)
    throw IoError("redis: cannot connect to " + ep.host + ":" + std::to_string(ep.port) + ": " +
                  c->errstr);
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
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  return checked(static_cast<redisReply*>(
      redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data())));
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
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
      REDIS_OK)
    throw IoError("redis: cannot queue a command");
}

Reply Connection::read_reply() {
  void* r = nullptr;
  if (redisGetReply(ctx_.get(), &r) != REDIS_OK) {
    std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    throw IoError("redis: " + why);
  }
  return checked(static_cast<redisReply*>(r));
}

void Connection::set_read_timeout(std::chrono::milliseconds timeout) {
  if (redisSetTimeout(ctx_.get(), to_timeval(timeout)) != REDIS_OK)
    throw IoError("redis: cannot set a timeout");
}

void Connection::interrupt() noexcept {
  if (ctx_ && ctx_->fd >= 0) ::shutdown(ctx_->fd, SHUT_RDWR);
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
