#pragma once
// Connections to Redis: our own socket (TCP or TLS), hiredis's I/O-free command formatter and
// reply reader. Failures become our exception types in exactly one place (connection.cpp):
//   IoError       the connection failed; a command sent on it may or may not have run.
//   TransientError  (an IoError) Redis refused the command for a passing state — LOADING, BUSY,
//                 TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY, UNBLOCKED, maxclients reached
//                 (on a new connection, which the server closes), and the refusals of
//                 writes OOM (maxmemory reached, with noeviction, as a queue's Redis should be:
//                 passes when memory is freed), MISCONF, NOREPLICAS: it did not run (a script
//                 refused a write wrote nothing: Redis checks at its first write); retry it later
//                 (on a new connection when new_connection(): the server is no longer the master).
//   ReplyError    Redis answered with any other error: a bug or a misconfiguration, not retried.
// Retrying is the caller's decision, made once in redis/retry.hpp.

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis/script.hpp"

namespace relay::redis {

class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class TransientError : public IoError {
 public:
  TransientError(const std::string& what, bool new_connection, bool out_of_memory = false)
      : IoError(what), new_connection_(new_connection), out_of_memory_(out_of_memory) {}
  bool new_connection() const { return new_connection_; }
  // OOM: Redis refuses writes that need memory; reads, and extending a lease, still work.
  bool out_of_memory() const { return out_of_memory_; }

 private:
  bool new_connection_;
  bool out_of_memory_;
};
// No reply within the read timeout: the server is silent (frozen, blocked, gone without a
// word). The connection is no longer usable for commands; a subscriber may ask (Subscription).
class TimedOut : public IoError {
 public:
  using IoError::IoError;
};
// An IoError before anything was sent (no connection could be made): the calls did not run.
class NotSent : public IoError {
 public:
  using IoError::IoError;
};
// Whether a step that failed so may have run all the same: its connection broke, or Redis stayed
// silent, after the step was sent. A refusal (TransientError) ran nothing, nor did calls NotSent.
inline bool may_have_run(const IoError& e) {
  return !dynamic_cast<const TransientError*>(&e) && !dynamic_cast<const NotSent*>(&e);
}
// f's result, f sending nothing (it connects): its IoErrors become NotSent (refusals stay).
template <typename F>
decltype(auto) before_sending(F&& f) {
  try {
    return f();
  } catch (const IoError& e) {
    if (!may_have_run(e)) throw;
    throw NotSent(e.what());
  }
}
class ReplyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True for the error replies of a Redis that is restarting, busy, failing over or out of
// memory (the command was not executed). Pure; exposed for tests.
bool is_transient_error(std::string_view message);
// True for the transient errors after which this connection's server is no longer the master.
bool needs_new_connection(std::string_view message);

// Redis's refusals for a passing state, counted in this process since it started, by reason:
// the error code in lower case (loading, busy, tryagain, clusterdown, masterdown, readonly,
// unblocked, oom, misconf, noreplicas) or maxclients. Every reason is listed, counted or not
// (metrics: relay_redis_refusals_total).
std::vector<std::pair<std::string, std::uint64_t>> refusal_counts();

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// Throws what an error reply means, as every command's reply is checked: TransientError or
// ReplyError. Nothing for any other reply.
void throw_if_error(const redisReply* r);

// Accessors that turn a reply into values, throwing ReplyError on a type the caller did not expect.
bool is_nil(const redisReply* r);
std::string as_string(const redisReply* r);
long long as_integer(const redisReply* r);
std::optional<std::string> as_optional_string(const redisReply* r);
// An array reply's elements from `first` on, as strings (none when it is not an array).
std::vector<std::string> as_strings(const redisReply* r, size_t first = 0);
// An array reply of field, value, ... from `first` on, as pairs (HGETALL, scripts' replies).
std::vector<std::pair<std::string, std::string>> as_pairs(const redisReply* r, size_t first = 0);
// The same as views into the reply (valid while it lives): a job record without copying it.
std::vector<std::pair<std::string_view, std::string_view>> as_pair_views(const redisReply* r,
                                                                         size_t first = 0);

// A reply slower than this means a lost server (or network): every connection starts with it
// (unless its Endpoint says less).
inline constexpr std::chrono::milliseconds kReadTimeout{30'000};
// The least a caller with a deadline waits for a connect or a reply (ReadWithin): above WAIT's
// own bound (1 s, for wait_replicas) and a healthy Redis's longest stalls (a fork of a large
// data set).
inline constexpr std::chrono::milliseconds kLeastReadWait{2000};

// redis[s]://[user:password@]host:port[/db]; a password in the URL may be overridden by config.
struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string username;
  std::string password;
  int db = 0;
  std::chrono::milliseconds connect_timeout{5000};
  // How long a connection waits for a reply unless told otherwise (ReadWithin, BlockingRead):
  // what its users wait for a first try (the gateway's request connections: what a step's first
  // try gets of redis.retry_timeout), so that bounding a try costs no system call.
  std::chrono::milliseconds read_timeout = kReadTimeout;
  // TLS (rediss://): the server's certificate is verified against ca_file (else the system's
  // CAs) and the host name (or server_name); cert/key for servers that require client
  // certificates. verify = false only when set explicitly.
  bool tls = false;
  std::string tls_ca_file, tls_cert_file, tls_key_file, tls_server_name;
  bool tls_verify = true;
  // Sentinel mode: when sentinel_master is set, host/port are not used; the master's address is
  // asked from these sentinels (in turn) at every connect, and checked with ROLE, so that a
  // reconnect after a failover finds the new master and never writes to a replica.
  std::string sentinel_master;
  std::vector<std::pair<std::string, int>> sentinels;
  // The sentinels' own credentials, when they require AUTH (a sentinel's requirepass or ACL
  // user; Bitnami's chart turns it on by default): not the master's. Empty: no AUTH.
  std::string sentinel_username, sentinel_password;
  // Cluster mode: when cluster_seeds is set, host/port are not used; the slot map is asked from
  // these nodes (or any node learnt since) and each command goes to the master of its key's slot.
  std::vector<std::pair<std::string, int>> cluster_seeds;

  // This endpoint, its connections waiting for each reply at most `t`: a loop whose steps
  // Redis answers at once leaves a master gone silent within it, not kReadTimeout later.
  Endpoint with_read_timeout(std::chrono::milliseconds t) const {
    Endpoint e = *this;
    e.read_timeout = t;
    return e;
  }
};
// Throws std::invalid_argument with a message fit for a config error.
Endpoint parse_url(std::string_view url);
// Sentinel mode: a comma-separated list of sentinels, each a URL or host:port; the first item's
// user, password, database and scheme (rediss: TLS) are the master's. Throws like parse_url.
Endpoint parse_sentinel_urls(std::string_view urls, const std::string& master_name);
// Cluster mode: a comma-separated list of seed nodes, like parse_sentinel_urls (default port
// 6379, database 0 only).
Endpoint parse_cluster_urls(std::string_view urls);

// Cluster mode: the key a command is routed by (its first key), or nullopt for a command
// without keys (sent to the node of the previous command, or any master). Pure; for tests.
std::optional<std::string_view> routing_key(const std::vector<std::string>& argv);

// A client blocked in a command (BLMOVE): where it waits, and its id there.
struct BlockedClient {
  Endpoint server;
  long long id = 0;
};
// CLIENT UNBLOCK on that server: the blocked command returns as on timeout. True if it was
// blocked. Throws IoError.
bool unblock(const BlockedClient& client);

// One connection to Redis: a socket, TLS when the endpoint asks for it (OpenSSL), commands
// formatted and replies parsed by hiredis's I/O-free formatter and reader. Blocking I/O with a
// read timeout; another thread may interrupt() a blocked read.
//
// In cluster mode it is one connection per master, opened on first use: each command goes to
// the master of its key's slot (a process-wide slot map from CLUSTER SLOTS); MOVED updates the
// map and resends (pausing briefly when redirects repeat, as nodes agree on a moved slot), ASK
// resends once with ASKING to the importing node; TRYAGAIN and CLUSTERDOWN
// are TransientErrors like the others. Keyless commands (WAIT, PUBLISH, SUBSCRIBE) go to the
// node of the previous command — WAIT must — or to any master.
class Connection {
 public:
  // Connects, authenticates and selects the database; throws IoError or ReplyError. `first`,
  // when given, is sent with the handshake (one write, one round trip for both); its reply is
  // the next read_reply()'s. A command whose reply may go unread: the connection may be dropped
  // (a refused handshake) after the server ran it.
  static Connection open(const Endpoint& ep, const std::vector<std::string>& first = {});
  ~Connection();
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;

  Reply command(const std::vector<std::string>& argv);
  Reply command(std::initializer_list<std::string_view> argv);
  // (keys and args by value: a caller's braced lists are moved into the call, not copied.)
  Reply eval(const Script& script, std::vector<std::string> keys, std::vector<std::string> args);

  // One call of pipeline(): a script's (EVALSHA), or with no script a plain command (args).
  struct Call {
    const Script* script = nullptr;
    std::vector<std::string> keys, args;
  };
  // Several calls in one write, their replies read in order: one round trip for all. Every
  // reply is read, then the first error reply is thrown as command() throws it (so a caller
  // that retries must expect the calls before it to have run). Calls refused NOSCRIPT (after a
  // restart) are sent again together once the others are read (each script whole once): the
  // calls then do not run in order, so pipeline only steps that do not depend on each other. In
  // cluster mode the calls go to their nodes (routed as command() and eval() route them), each
  // node's in one write, the nodes one after another; a redirected call is sent again alone.
  // checked = false: error replies are returned, not thrown, for a caller that owns several
  // callers' calls (redis/batcher.hpp); only I/O failures throw then.
  std::vector<Reply> pipeline(const std::vector<Call>& calls, bool checked = true);
  // pipeline() in two halves, for a caller with other work meanwhile (a relay taking ahead
  // writes a job's outcome while the model runs the next): send() writes the calls, receive()
  // reads their replies as pipeline() does. Nothing else may use the connection in between
  // (stale() is false then: the replies are what it has to read). In cluster mode calls that
  // all route to one node are sent to it and read as on a plain connection; calls spanning
  // nodes run at once in send(), and receive() hands their replies over.
  void send(std::vector<Call> calls);
  std::vector<Reply> receive(bool checked = true);

  // Sends without waiting and reads replies later; for SUBSCRIBE and pipelines.
  void append(const std::vector<std::string>& argv);
  Reply read_reply();

  // 0 = block for ever. The default is the endpoint's read_timeout (kReadTimeout unless it says
  // less); BlockingRead lifts it for one blocking command, ReadWithin lowers it for a step whose
  // caller cannot wait that long, Subscription sets its own.
  void set_read_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds read_timeout() const;
  // set_read_timeout for a scope's end (BlockingRead, ReadWithin): a socket that refuses it is
  // closed instead (the connection is broken then, and its next use says so).
  void restore_read_timeout(std::chrono::milliseconds timeout) noexcept;
  long long client_id() const;
  // Where a blocking command on key would wait, and as whom (opens the node's connection in
  // cluster mode), for unblock() from another thread.
  BlockedClient blocking_client(std::string_view key);
  // Makes a blocked read in another thread fail at once with IoError. Thread-safe.
  void interrupt() noexcept;
  // True when an idle connection has something to read: the server closed it (a restart,
  // a failover, an idle timeout) or sent what nobody asked for; and in sentinel mode when the
  // sentinels have named another master since it was opened (it may now be a replica, whose
  // reads are stale). Such a connection is not used. (In cluster mode each node's connection
  // is checked before it is used instead.)
  bool stale() const noexcept;

  // The masters a command without a key could mean (SCAN, DBSIZE): one endpoint in standalone
  // and sentinel mode, every master's in cluster mode. Throws IoError.
  static std::vector<Endpoint> masters(const Endpoint& ep);

 private:
  struct Transport;  // socket, TLS session, reply reader (transport.cpp)
  struct Cluster;    // slot map and per-node connections (cluster.cpp)
  explicit Connection(std::unique_ptr<Transport> t);
  static Connection open_cluster(const Endpoint& ep);       // cluster.cpp
  static Connection open_via_sentinel(const Endpoint& ep);  // sentinel.cpp
  Reply checked(redisReply* r);
  Reply cluster_command(const std::vector<std::string>& argv);
  // cluster.cpp: the calls grouped by node; pipeline(); the replies' redirects run again and
  // errors checked; send() and receive().
  std::vector<std::pair<Connection*, std::vector<std::size_t>>> cluster_route(
      const std::vector<Call>& calls);
  std::vector<Reply> cluster_pipeline(const std::vector<Call>& calls, bool checked);
  void cluster_settle(const std::vector<Call>& calls, std::vector<Reply>& out, bool checked);
  void cluster_send(std::vector<Call> calls);
  std::vector<Reply> cluster_receive(bool checked);
  void write_calls(const std::vector<Call>& calls);
  std::vector<Reply> read_replies(const std::vector<Call>& calls, bool checked);

  std::unique_ptr<Transport> t_;
  std::unique_ptr<Cluster> cluster_;
  Endpoint server_;  // where t_ is connected (the master's address in sentinel mode)
  long long client_id_ = 0;
  bool via_sentinel_ = false;
  std::uint64_t master_epoch_ = 0;  // sentinel mode: the master generation it was opened in
  // Between send() and receive(): the calls sent (cluster mode: the node they went to, or
  // their replies, already read, when they spanned nodes).
  bool sent_ = false;
  std::vector<Call> sent_calls_;
  std::vector<Reply> sent_replies_;
  Connection* sent_node_ = nullptr;
};

// For one blocking command (BLMOVE, XREADGROUP BLOCK): the server may stay silent for `block`
// (0: for ever), so the socket must not time out first: it waits `block` and then as long as it
// waited for a reply before (a dead server is found that much after the block ends), and the
// timeout before comes back when this goes, whether the command returned or threw. A block of at
// most half the timeout fits in it as it is, with half of it still left to find a dead server
// out: the timeout is left alone (the gateway's completion consumer blocks for up to 1 s on a
// connection at 5 s, for 100 ms a few times per 10 jobs under load: two setsockopt calls each).
class BlockingRead {
 public:
  BlockingRead(Connection& c, std::chrono::milliseconds block) : c_(c), before_(c.read_timeout()) {
    if (block.count() > 0 && before_.count() > 0 && 2 * block <= before_) {
      lifted_ = false;
      return;
    }
    c_.set_read_timeout(block.count() > 0 && before_.count() > 0 ? block + before_
                                                                 : std::chrono::milliseconds(0));
  }
  ~BlockingRead() {
    if (lifted_) c_.restore_read_timeout(before_);
  }
  BlockingRead(const BlockingRead&) = delete;
  BlockingRead& operator=(const BlockingRead&) = delete;

 private:
  Connection& c_;
  std::chrono::milliseconds before_;
  bool lifted_ = true;
};

// For a step whose caller can wait only so long (a gateway request: redis.retry_timeout): each
// reply is waited for at most `within`, never longer than the connection's own timeout, and that
// comes back when this goes. A Redis that stops answering without closing the connection (a
// frozen process, a network dropping packets, a paused VM) then fails the step as a broken
// connection would, when its caller would give up, not kReadTimeout later. (A blocking command
// inside the step still lifts it: BlockingRead.)
class ReadWithin {
 public:
  ReadWithin(Connection& c, std::chrono::milliseconds within) : c_(c), before_(c.read_timeout()) {
    if (before_.count() == 0 || within < before_) c_.set_read_timeout(within);
  }
  ~ReadWithin() { c_.restore_read_timeout(before_); }
  ReadWithin(const ReadWithin&) = delete;
  ReadWithin& operator=(const ReadWithin&) = delete;

 private:
  Connection& c_;
  std::chrono::milliseconds before_;
};

// Sentinel mode: runs f (from a background thread) each time the sentinels announce a new master
// (+switch-master) or their announcements may have been missed. Subscribers use it to interrupt
// their blocked read, so that they resubscribe on the new master. Unregisters when destroyed.
class MasterChangeHook {
 public:
  explicit MasterChangeHook(std::function<void()> f);
  ~MasterChangeHook();
  MasterChangeHook(const MasterChangeHook&) = delete;
  MasterChangeHook& operator=(const MasterChangeHook&) = delete;

 private:
  std::uint64_t id_;
};

// Connects with exponential backoff and jitter until it succeeds, the deadline passes or stop is
// requested; the last error is rethrown then. Logs each failure once per attempt with its delay.
// first: as Connection::open's.
Connection connect_with_retry(const Endpoint& ep, std::chrono::milliseconds max_wait,
                              std::stop_token stop = {},
                              const std::vector<std::string>& first = {});

}  // namespace relay::redis

namespace relay::redis {

// A connection that is opened on first use and dropped after an I/O error, so that the next
// use reconnects. Not thread-safe: one per thread.
class LazyConnection {
 public:
  explicit LazyConnection(Endpoint ep) : ep_(std::move(ep)) {}
  // An idle connection the server has closed meanwhile is replaced before use, so that the
  // first command after a Redis restart neither fails nor leaves its outcome unknown.
  Connection& get() { return get(ep_.connect_timeout); }
  // get() for a caller that can wait only so long: a connection opened now is given at most
  // `within` to connect (and for its handshake's replies), not the endpoint's connect_timeout.
  Connection& get(std::chrono::milliseconds within) {
    if (conn_ && conn_->stale()) conn_.reset();
    if (!conn_) {
      Endpoint ep = ep_;
      ep.connect_timeout = std::min(ep.connect_timeout, within);
      conn_.emplace(Connection::open(ep));
    }
    return *conn_;
  }
  // The connection if one is open and usable, without opening one (nullptr: get() would).
  Connection* if_open() {
    if (conn_ && conn_->stale()) conn_.reset();
    return conn_ ? &*conn_ : nullptr;
  }
  void reset() { conn_.reset(); }
  void adopt(Connection c) { conn_.emplace(std::move(c)); }
  // Ends a blocking call on the connection, from another thread (Connection::interrupt); the
  // caller serializes it with get() and reset().
  void interrupt() noexcept {
    if (conn_) conn_->interrupt();
  }

 private:
  Endpoint ep_;
  std::optional<Connection> conn_;
};

}  // namespace relay::redis
