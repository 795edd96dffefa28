#pragma once
// Integration-test harness: real redis-server, the S3 test server (s3rver behind a SigV4
// check), the no-op inference server and relay binaries, each a real process on a free loopback
// port, cleaned up whatever happens (destructors SIGKILL and reap).

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_stream.hpp"
#include "redis/connection.hpp"

namespace relay::testing {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

// A sanitized build (AddressSanitizer, ThreadSanitizer) keeps memory of its own beside what the
// program uses (shadow memory, ASan's quarantine, TSan's access history): a bound on a process's
// memory means nothing there, so the memory tests skip it, saying kSanitizedSkip.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
inline constexpr const char* kSanitizedSkip =
    "the memory bound is not meaningful in a sanitized build (shadow memory, quarantine)";

// Polls pred every 10 ms until it holds or the deadline passes. Never a bare sleep.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s);
// How many times `what` occurs in text (lines of a fake server's events file, a log).
size_t occurrences(const std::string& text, const std::string& what);

int free_port();
// Makes a test PKI in dir (ca, server for localhost/127.0.0.1, client, an unrelated other-ca)
// with the openssl command; throws on failure.
void make_test_pki(const std::string& dir);
bool port_open(int port);

// n bytes of a fixed pattern, generated as they are read (large inputs without holding them);
// its size undeclared, as a stream's.
class PatternSource final : public ByteSource {
 public:
  explicit PatternSource(std::uint64_t n) : left_(n) {}
  size_t read(std::span<char> buf) override {
    size_t n = static_cast<size_t>(std::min<std::uint64_t>(buf.size(), left_));
    for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>((pos_ + i) * 2654435761u >> 24);
    pos_ += n;
    left_ -= n;
    return n;
  }
  std::optional<std::uint64_t> size() const override { return std::nullopt; }

 private:
  std::uint64_t left_, pos_ = 0;
};

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A memory cgroup of its own with a limit, as a container has: processes started between
// enter() and leave() (this process in the cgroup meanwhile) run under it. cgroup v1's memory
// hierarchy where it is mounted, else v2's; needs root. Removed when destroyed (processes still
// in it moved back to this process's cgroup first).
class MemoryCgroup {
 public:
  explicit MemoryCgroup(std::uint64_t limit_bytes);  // throws std::runtime_error saying why not
  ~MemoryCgroup();
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  void enter();
  void leave();

 private:
  std::string root_, path_, home_;  // the hierarchy, this cgroup, the one this process came from
  std::string home_procs() const;   // where processes go back to
  bool inside_ = false;
};

class Process {
 public:
  Process(std::vector<std::string> argv, const Env& env, std::string log_path);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig);
  // Exit code (128 + signal when killed by one), or nullopt if still running at the deadline.
  // While waiting it samples VmHWM from /proc/<pid>/status.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  bool running();
  // Blocks until exit (no polling delay, for benchmarks); returns the exit code.
  int wait_blocking();
  std::string log() const;
  // Peak resident memory in KiB: the last VmHWM read from /proc while the process ran, and the
  // kernel's ru_maxrss reported when it was reaped.
  long peak_rss_proc_kib() const { return hwm_kib_; }
  long peak_rss_rusage_kib() const { return maxrss_kib_; }

 private:
  void sample_hwm();
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> exit_code_;
  long hwm_kib_ = 0;
  long maxrss_kib_ = 0;
};

class RedisServer {
 public:
  // persistent: AOF with fsync on every write, so that a SIGKILL loses nothing (as in production).
  // extra_args: more redis-server options, e.g. {"--busy-reply-threshold", "100"}; with
  // "--requirepass", the test's own connections (endpoint(), connect()) give that password.
  // tls: TLS only (no plain port), with a test CA made for this server (tls_dir(): ca.crt,
  // server.crt/key for localhost and 127.0.0.1, client.crt/key, other-ca.crt unrelated).
  // By default TLS is on when RELAY_TEST_REDIS_TLS=1: ctest runs the gateway and relay suites
  // once more that way (tests/CMakeLists.txt).
  // cluster: a Redis Cluster of three masters sharing the slots evenly (RELAY_TEST_REDIS_CLUSTER=1
  // makes it the default: ctest runs the gateway and relay suites that way too). Everything
  // below then applies to every node; port() is the first node's.
  // pki: with tls, the test PKI in that folder (made by the caller, shared by several servers,
  // as a master and its replica share their CA) instead of one of its own.
  explicit RedisServer(bool persistent = false, std::vector<std::string> extra_args = {},
                       bool tls = tls_by_default(), bool cluster = cluster_by_default(),
                       std::string pki = {});
  ~RedisServer();
  static bool tls_by_default();
  static bool cluster_by_default();
  int port() const { return ports_[0]; }
  bool cluster() const { return cluster_; }
  std::string url() const;
  // Cluster mode: one node (standalone endpoint), its port, and slot management.
  int nodes() const { return static_cast<int>(ports_.size()); }
  redis::Endpoint node_endpoint(int i) const;  // TLS: with the test client certificate
  int node_of_slot(int slot) const;
  // Moves a slot (with its keys) to node `to` as redis-cli --cluster reshard does: IMPORTING /
  // MIGRATING, keys MIGRATEd in batches of `batch` with `pause` between them (clients meanwhile
  // get ASK for moved keys), then SETSLOT NODE everywhere.
  void migrate_slot(int slot, int to, int batch = 1, std::chrono::milliseconds pause = {});
  // Adds one replica per master (started and synced), for failover().
  void add_replicas();
  // CLUSTER FAILOVER on the replica of node i; returns once the replica serves node i's slots.
  void failover(int i);
  // SIGSTOP to node i alone, a master gone without a word (a node lost, a partition); returns once
  // its replica has taken its slots over, the cluster's own failover (cluster-node-timeout).
  // thaw() wakes it, and it rejoins as the new master's replica.
  void freeze_and_fail_over(int i);
  std::string tls_dir() const { return pki_.empty() ? dir_.path() + "/tls" : pki_; }
  // An endpoint for this server (TLS: trusting the test CA).
  redis::Endpoint endpoint() const;
  // RELAY_REDIS_URL, and RELAY_REDIS_TLS_CA_FILE under TLS: what a relay or gateway needs.
  Env env() const;
  redis::Connection connect() const;
  // Whether a node lists a blocked client (CLIENT LIST flags b: a blocked read, or a command
  // a CLIENT PAUSE postponed). Redis frees a client whose connection ended only after the turn
  // of its loop that read the end: a dead process's blocked read still takes what that turn
  // adds, and its postponed command still runs if that turn unpauses (both seen under load).
  // Tests wait for none before such a step.
  bool has_blocked_client() const;
  void stop();   // SIGKILL
  void start();  // again on the same port, with the same data directory
  // SIGSTOP, SIGCONT (every node): a Redis that stops answering without closing a connection —
  // as a process blocked by a slow command, a paused VM, a network dropping packets. The kernel
  // still accepts connections and takes what clients send; Redis runs it when it wakes. A
  // formed cluster's thaw() returns once every node says the cluster is ok again.
  void freeze();
  void thaw();

 private:
  struct PortTaken : std::runtime_error {
    PortTaken() : std::runtime_error("the port was taken") {}
  };
  void start_node(size_t i);           // throws PortTaken if it did not come up on its port
  void start_node_anywhere(size_t i);  // on another port if needed, until it has served
  void wait_cluster_ok();
  int replica_of(int i) const;  // the node replicating node i (throws if none)
  bool says_master_within(int node, std::chrono::milliseconds within) const;
  TempDir dir_;
  std::vector<int> ports_, bus_ports_;
  bool persistent_;
  std::vector<std::string> extra_args_;
  std::string password_;  // its --requirepass, if any
  bool tls_;
  std::string pki_;
  bool cluster_;
  std::vector<std::unique_ptr<Process>> procs_;
  std::vector<int> replica_of_;  // per node: the node it replicates, or -1
  bool formed_ = false;
  std::vector<bool> served_;  // per node: it has served, so a restart keeps its port
};

// Redis with Sentinel: a master, one replica and three sentinels (quorum 2) on free ports,
// monitoring the master as "relaytest". With passwords, as a production one is set up
// (Bitnami's chart by default): the master and replica require kMasterPassword, and the
// sentinels one of their own, kSentinelPassword (from each other too). With tls, every link is
// TLS only — clients to sentinels and data nodes, sentinels to each other and to the data nodes,
// replication — with one test CA (tls_dir()).
class SentinelRedis {
 public:
  static constexpr const char* kMasterPassword = "master-secret";
  static constexpr const char* kSentinelPassword = "sentinel-secret";
  explicit SentinelRedis(bool passwords = false, bool tls = false);
  ~SentinelRedis();
  // RELAY_REDIS_MODE=sentinel, RELAY_REDIS_SENTINEL_MASTER, RELAY_REDIS_URL listing the sentinels
  // (and RELAY_REDIS_PASSWORD, RELAY_REDIS_SENTINEL_PASSWORD with passwords; rediss:// and
  // RELAY_REDIS_TLS_CA_FILE with tls).
  Env env() const;
  redis::Endpoint endpoint() const;  // resolves through the sentinels, like the binaries
  int master_port() const;           // as the sentinels see it now
  // SENTINEL FAILOVER; returns once the sentinels name the other node and it says it is master.
  void failover();
  // SIGKILL to the master; returns once the sentinels have promoted the replica, after starting
  // the killed node again (the sentinels make it a replica of the new master).
  void kill_master();
  // SIGSTOP to the master (RedisServer::freeze): it stops answering and keeps every connection
  // open, as a master gone without a word does (a node lost, a partition); returns once the
  // sentinels have promoted the replica. thaw() wakes it and returns once the sentinels have made
  // it a replica of the new master.
  void freeze_master();
  void thaw();
  // A write of its own on the master, then WAIT: true once the replica has every write the
  // master took before it (what a failover then keeps).
  bool replica_caught_up();
  RedisServer& node(int i) { return *nodes_[i]; }
  std::string tls_dir() const { return dir_.path() + "/tls"; }

 private:
  TempDir dir_;
  bool passwords_;
  bool tls_;
  std::unique_ptr<RedisServer> nodes_[2];
  std::vector<int> sentinel_ports_;
  std::vector<std::unique_ptr<Process>> sentinels_;
  RedisServer* frozen_ = nullptr;
  void wait_for_new_master(int before);
  void wait_until_replica(RedisServer& node);  // of the master the sentinels name now
  redis::Endpoint sentinel(int port) const;    // the test's own connection to a sentinel
  redis::Endpoint data_node(int port) const;   // ... and to the master or the replica
};

class S3Server {
 public:
  // credentials_file: accept the temporary credentials listed there (tests/s3/server.js)
  // instead of the fixed test key.
  explicit S3Server(const std::string& credentials_file = {},
                    std::vector<std::string> faults = {});  // server.js's fault flags
  ~S3Server();
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string bucket() const { return "relay-test"; }
  Env env() const;  // the relay's storage settings and AWS credentials for this server
  void kill();
  // After kill(): the server again, on the same port and with the same objects (a restart).
  void start();
  // SIGSTOP, SIGCONT: a store that stops answering without closing its connections.
  void pause();
  void resume();
  // Runs Debian's awscli (an independent S3 client) and returns its stdout; "" on failure.
  std::string aws_cat(const std::string& key) const;
  // Stores the file at local_path under s3://<bucket>/<key> with awscli; false on failure.
  bool aws_put(const std::string& local_path, const std::string& key) const;
  std::string log() const { return proc_ ? proc_->log() : ""; }

 private:
  TempDir dir_;
  int port_;
  std::vector<std::string> argv_;
  std::unique_ptr<Process> proc_;
};

struct InferenceOptions {
  int health_status = 200;
  int status = 200;
  long delay_ms = 0;
  std::vector<long> delays_ms = {};  // the n-th POST's delay (the last for the rest), if given
  std::uint64_t result_bytes = 0;    // pads every answer (large results)
  bool record_events = true;         // benchmarks turn it off: it appends to a file per request
  std::string content_type = "application/json";  // of its answers
  long fail_first = -1;          // >= 0: only the first N answers have `status`, the rest 200
  std::string retry_after = {};  // sent with those failures
  long progress_steps = 0;       // reports to Relay-Progress-URL, spread over delay_ms
  long meet = 0;                 // > 0: each POST waits until this many have been in flight at once
  bool endless_chunk_line = false;  // answers with a chunk line that never ends (a broken model)
};

class InferenceServer {
 public:
  explicit InferenceServer(InferenceOptions o = {});
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string events() const;  // the lines the server appended
  bool saw(const std::string& line) const;
  // SIGKILL (a model server crashing, its container OOM-killed), then the same server again on
  // the same port (its events file appended to).
  void kill();
  void start();

 private:
  TempDir dir_;
  int port_;
  std::string events_path_;
  std::vector<std::string> argv_;
  std::unique_ptr<Process> proc_;
};

// The gateway as a process on a free port; start() waits until /healthz answers.
class GatewayServer {
 public:
  // config_file: passed as --config (its keys yield to the environment's).
  explicit GatewayServer(Env env, std::string config_file = {});
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void start();
  int stop();  // SIGTERM, wait; the exit code
  void kill();
  std::string log() const { return proc_ ? proc_->log() : ""; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }

 private:
  TempDir dir_;
  Env env_;
  std::string config_file_;
  int port_;
  int runs_ = 0;
  std::unique_ptr<Process> proc_;
};

// The Python webhook receiver (tests/webhooks/receiver.py): an independent signature check.
class WebhookReceiver {
 public:
  static constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  // The first fail_first requests are answered fail_status; each request delay_ms late.
  explicit WebhookReceiver(int fail_first = 0, int port = 0, int retry_after = 0,
                           int fail_status = 500, int delay_ms = 0);
  void start();
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  int port() const { return port_; }
  std::vector<std::string> lines() const;  // one JSON object per request

 private:
  TempDir dir_;
  int port_, fail_first_, retry_after_, fail_status_, delay_ms_;
  std::unique_ptr<Process> proc_;
};

std::string relay_binary();
std::string gateway_binary();
std::string noop_binary();

}  // namespace relay::testing
