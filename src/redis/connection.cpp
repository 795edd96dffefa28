// Connection: replies, endpoints, commands. Its transport, cluster and sentinel parts are in
// transport.cpp, cluster.cpp and sentinel.cpp (connection_parts.hpp).
#include "redis/connection.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/url/parse.hpp>
#include <charconv>
#include <set>

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "common/port.hpp"
#include "redis/connection_parts.hpp"

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

std::vector<std::pair<std::string_view, std::string_view>> as_pair_views(const redisReply* r,
                                                                         size_t first) {
  auto view = [](const redisReply* e) {
    if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS)
      throw ReplyError("redis: expected a string reply");
    return std::string_view(e->str, e->len);
  };
  std::vector<std::pair<std::string_view, std::string_view>> out;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements > first)
    out.reserve((r->elements - first) / 2);
  for (size_t i = first; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
    out.emplace_back(view(r->element[i]), view(r->element[i + 1]));
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
    auto port = parse_port(parsed->port());
    if (!port) throw std::invalid_argument("the port must be 1-65535");
    ep.port = *port;
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

Connection::Connection(std::unique_ptr<Transport> t) : t_(std::move(t)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;

namespace {

// Redis's refusals for a passing state, in one table: how the error reply starts (its code, the
// first word; for maxclients, the text of that ERR), the reason metrics name it by, and whether
// the connection must be replaced. BUSYGROUP, BUSYKEY are not BUSY.
struct Refusal {
  std::string_view starts, reason;
  bool new_connection = false;
};
constexpr std::array<Refusal, 11> kRefusals = {{
    {"LOADING", "loading"},
    {"BUSY", "busy"},
    {"TRYAGAIN", "tryagain"},
    {"CLUSTERDOWN", "clusterdown"},
    // No longer the master: a new connection finds the new one. UNBLOCKED: a blocked command
    // (BLMOVE) released because the server stopped being a master (failover).
    {"MASTERDOWN", "masterdown", true},
    {"READONLY", "readonly", true},
    {"UNBLOCKED", "unblocked", true},
    // Writes refused until memory is freed, an operator or the server clears the state: a
    // failed snapshot (MISCONF), min-replicas-to-write unmet (NOREPLICAS). A script refused
    // them at its first write, so it wrote nothing.
    {"OOM", "oom"},
    {"MISCONF", "misconf"},
    {"NOREPLICAS", "noreplicas"},
    // A new connection over maxclients: Redis answers its first command so and closes it (a
    // fleet of relays scaled up at once meets it until others disconnect).
    {"ERR max number of clients reached", "maxclients", true},
}};
std::array<std::atomic<std::uint64_t>, kRefusals.size()> refused{};

const Refusal* refusal_of(std::string_view message) {
  for (const auto& r : kRefusals)
    if (message.starts_with(r.starts) &&
        (message.size() == r.starts.size() || message[r.starts.size()] == ' '))
      return &r;
  return nullptr;
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> refusal_counts() {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t i = 0; i < kRefusals.size(); ++i)
    out.emplace_back(kRefusals[i].reason, refused[i].load(std::memory_order_relaxed));
  return out;
}

// The one place where a reply becomes a value or an exception.
void throw_if_error(const redisReply* r) {
  if (r->type != REDIS_REPLY_ERROR) return;
  std::string message(r->str, r->len);
  if (const Refusal* refusal = refusal_of(message)) {
    refused[refusal - kRefusals.data()].fetch_add(1, std::memory_order_relaxed);
    throw TransientError("redis: " + message, refusal->new_connection, refusal->reason == "oom");
  }
  throw ReplyError("redis: " + message);
}

Reply Connection::checked(redisReply* r) {
  Reply reply(r);
  throw_if_error(reply.get());
  return reply;
}

bool is_transient_error(std::string_view message) {
  return refusal_of(message) != nullptr;
}

bool needs_new_connection(std::string_view message) {
  const Refusal* refusal = refusal_of(message);
  return refusal && refusal->new_connection;
}

bool Connection::stale() const noexcept {
  if (cluster_ || sent_) return false;
  if (!t_ || t_->fd < 0) return true;
  if (via_sentinel_ && master_epoch() != master_epoch_) return true;
  if (t_->reader->pos < t_->reader->len) return true;  // unread buffered bytes
  if (t_->ssl && SSL_has_pending(t_->ssl) == 1) return true;
  pollfd p{t_->fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
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

namespace {

// RESP, as a server reads it: "*<n>\r\n", then "$<length>\r\n<bytes>\r\n" per argument. (Written
// here rather than with redisFormatCommandArgv: that one wants the arguments gathered into arrays
// and prints each length with sprintf — a fifth of a busy relay's own CPU went to its steps'
// formatting.)
void append_length(std::string& out, char tag, std::size_t n) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out += tag;
  out.append(digits, end);
  out += "\r\n";
}

void append_arg(std::string& out, std::string_view arg) {
  append_length(out, '$', arg.size());
  out += arg;
  out += "\r\n";
}

// The RESP text of one command, appended to out.
void format_command(const std::vector<std::string>& argv, std::string& out) {
  append_length(out, '*', argv.size());
  for (const auto& a : argv) append_arg(out, a);
}

// A script call as sent: EVALSHA by its SHA-1, or (whole) EVAL with its source, for a server
// that does not know it (after a restart).
void format_script(const Script& script, const std::vector<std::string>& keys,
                   const std::vector<std::string>& args, bool whole, std::string& out) {
  append_length(out, '*', 3 + keys.size() + args.size());
  append_arg(out, whole ? "EVAL" : "EVALSHA");
  append_arg(out, whole ? script.source : script.sha1);
  append_arg(out, std::to_string(keys.size()));
  for (const auto& k : keys) append_arg(out, k);
  for (const auto& a : args) append_arg(out, a);
}

// The same as an argument vector, for cluster mode (routed by its first key; see
// cluster_command).
std::vector<std::string> script_argv(const Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args, bool whole = false) {
  std::vector<std::string> argv{whole ? "EVAL" : "EVALSHA",
                                std::string(whole ? script.source : script.sha1),
                                std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void format_call(const Connection::Call& call, std::string& out, bool whole = false) {
  if (call.script)
    format_script(*call.script, call.keys, call.args, whole, out);
  else
    format_command(call.args, out);
}

}  // namespace

Connection Connection::open(const Endpoint& ep, const std::vector<std::string>& first) {
  if (!ep.cluster_seeds.empty() || !ep.sentinel_master.empty()) {
    auto conn = ep.cluster_seeds.empty() ? open_via_sentinel(ep) : open_cluster(ep);
    if (!first.empty()) conn.append(first);
    return conn;
  }
  auto t = std::make_unique<Transport>();
  if (!t->reader) throw IoError("redis: cannot allocate a reader");
  t->fd = tcp_connect(ep);
  t->set_timeouts(ep.connect_timeout, ep.connect_timeout);
  if (ep.tls) t->handshake(ep);
  Connection conn(std::move(t));
  conn.server_ = ep;
  // The handshake in one write, `first` with it: AUTH (production's Redis asks for it) and
  // CLIENT ID were a round trip each, and a one-shot relay's path to its job is a few of them.
  // CLIENT ID is also the connection's proof: a TLS handshake a server refuses after the fact
  // (a client certificate it requires) or plain TCP to a TLS port fails here, at connect, not
  // at the first command (tried lazily, to save one-shot relays a round trip:
  // redis_tls_test caught it). Its replies are the connect's: a server that accepts the
  // connection and then says nothing (a frozen process: the kernel still accepts) is given
  // connect_timeout, as one that does not accept it.
  std::string wire;
  int handshake = 1;
  if (!ep.password.empty()) {
    format_command(ep.username.empty() ? std::vector<std::string>{"AUTH", ep.password}
                                       : std::vector<std::string>{"AUTH", ep.username, ep.password},
                   wire);
    ++handshake;
  }
  if (ep.db != 0) {
    format_command({"SELECT", std::to_string(ep.db)}, wire);
    ++handshake;
  }
  format_command({"CLIENT", "ID"}, wire);
  if (!first.empty()) format_command(first, wire);
  conn.t_->write_all(wire.data(), wire.size());
  // In order, the first refusal thrown (a wrong password's; the commands after it are refused
  // for it too): the connection is dropped with it.
  for (int i = 1; i < handshake; ++i) conn.read_reply();
  conn.client_id_ = as_integer(conn.read_reply().get());
  // A dead server must not hang a command for ever; blocking commands lift this themselves.
  conn.set_read_timeout(ep.read_timeout);
  return conn;
}

Reply Connection::eval(const Script& script, std::vector<std::string> keys,
                       std::vector<std::string> args) {
  if (cluster_) {
    try {
      return command(script_argv(script, keys, args));
    } catch (const ReplyError& e) {
      if (std::string_view(e.what()).find("NOSCRIPT") == std::string_view::npos) throw;
    }
    return command(script_argv(script, keys, args, /*whole=*/true));
  }
  // (Not pipeline({...}): an initializer list is copied, every argument with it.)
  std::vector<Call> calls;
  calls.push_back(Call{&script, std::move(keys), std::move(args)});
  auto replies = pipeline(calls);  // (NOSCRIPT: sent again whole)
  return std::move(replies.front());
}

std::vector<Reply> Connection::pipeline(const std::vector<Call>& calls, bool checked) {
  if (cluster_) return cluster_pipeline(calls, checked);
  write_calls(calls);
  return read_replies(calls, checked);
}

void Connection::send(std::vector<Call> calls) {
  if (sent_) throw IoError("redis: replies of an earlier send() not received");
  if (cluster_) {
    cluster_send(std::move(calls));
  } else {
    write_calls(calls);
    sent_calls_ = std::move(calls);
  }
  sent_ = true;
}

std::vector<Reply> Connection::receive(bool checked) {
  if (!sent_) throw IoError("redis: no reply expected");
  sent_ = false;
  if (cluster_) return cluster_receive(checked);
  const auto calls = std::move(sent_calls_);
  sent_calls_.clear();
  return read_replies(calls, checked);
}

void Connection::write_calls(const std::vector<Call>& calls) {
  std::string wire;
  for (const auto& call : calls) format_call(call, wire);
  t_->write_all(wire.data(), wire.size());
}

std::vector<Reply> Connection::read_replies(const std::vector<Call>& calls, bool checked) {
  std::vector<Reply> out;
  out.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) out.emplace_back(t_->next_reply());
  // Every reply is read before any is thrown: the connection stays in step. Calls of a script
  // the server does not know (a restart, a failover to a replica: its cache starts empty) are
  // sent again together, in order, in one write: each script's first whole (EVAL caches it),
  // the rest of its calls by SHA-1 behind it — one round trip, where a batch of a hundred
  // (a settle, a reaper's pass) cost a hundred, each with the script's source.
  const auto refused = [&](size_t i) {
    const auto* r = out[i].get();
    return calls[i].script && r->type == REDIS_REPLY_ERROR &&
           std::string_view(r->str, r->len).starts_with("NOSCRIPT");
  };
  std::vector<size_t> again;
  for (size_t i = 0; i < calls.size(); ++i)
    if (refused(i)) again.push_back(i);
  if (!again.empty()) {
    std::string wire;
    std::vector<const Script*> whole;
    for (size_t i : again) {
      const bool first = std::find(whole.begin(), whole.end(), calls[i].script) == whole.end();
      if (first) whole.push_back(calls[i].script);
      format_call(calls[i], wire, first);
    }
    t_->write_all(wire.data(), wire.size());
    for (size_t i : again) out[i] = Reply(t_->next_reply());
    // (Refused again — the cache emptied once more meanwhile: each sent whole, alone.)
    for (size_t i : again) {
      if (!refused(i)) continue;
      std::string one;
      format_call(calls[i], one, /*whole=*/true);
      t_->write_all(one.data(), one.size());
      out[i] = Reply(t_->next_reply());
    }
  }
  if (checked)
    for (const auto& r : out) throw_if_error(r.get());
  return out;
}

void Connection::append(const std::vector<std::string>& argv) {
  if (cluster_) {
    cluster_->last = &cluster_->for_key(routing_key(argv));
    return cluster_->last->append(argv);
  }
  std::string wire;
  format_command(argv, wire);
  t_->write_all(wire.data(), wire.size());
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

std::chrono::milliseconds Connection::read_timeout() const {
  if (cluster_) {
    std::lock_guard lock(cluster_->mu);
    return cluster_->read_timeout;
  }
  return t_ ? t_->read_timeout : kReadTimeout;
}

void Connection::restore_read_timeout(std::chrono::milliseconds timeout) noexcept {
  try {
    set_read_timeout(timeout);
  } catch (...) {
    interrupt();
  }
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

Connection connect_with_retry(const Endpoint& ep, std::chrono::milliseconds max_wait,
                              std::stop_token stop, const std::vector<std::string>& first) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + max_wait;
  Backoff backoff;
  for (int attempt = 1;; ++attempt) {
    try {
      return Connection::open(ep, first);
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
