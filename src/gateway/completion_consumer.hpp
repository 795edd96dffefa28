#pragma once
// The gateway's completion consumer (seed, "Gateway subscriber"; SPEC §4.5): reads the durable
// jobs:<model>:events streams through a consumer group, so that each terminal transition is
// handled by one replica — job:<id>:done published for long-polls, the webhook scheduled, the
// record's retention set — and acknowledged in the same step, one Lua call per batch read
// (lua/settle.lua); then metrics and log lines. Entries left pending by a dead replica are
// claimed (XAUTOCLAIM) after events.claim_idle. Handling is idempotent (a webhook is scheduled
// at most once per transition), so a claimed entry that had in fact been handled costs nothing.
// One consumer reads its models' streams with one XREADGROUP; in cluster mode, where streams
// live on different nodes, the gateway runs one consumer per model. A batch is settled in the
// same round trip as the read that waits for the next (one round trip per batch, not two:
// at light load, one Redis wake-up per job fewer).

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/events.hpp"
#include "redis/keys.hpp"

namespace relay::gateway {

inline constexpr const char* kEventsGroup = "relay-gateway";
// How long a read carrying a batch's settle waits for the next entries before that batch's
// follow-up (metrics, log lines, quota slots) runs anyway.
inline constexpr std::chrono::milliseconds kFollowUpWait{100};

// Entries read (or claimed) per call.
inline constexpr int kBatch = 100;
// How long the consumer waits, after a read that brought fewer than kBatch entries, before the
// round trip that settles them and reads the next. Each settle and each blocking read cost Redis
// a fixed ~20 µs whatever they carry, and 32 relays of 20 ms jobs (1,500 jobs/s) finished ~1.4
// jobs per read without a wait. What waits meanwhile: webhooks and clean-up scheduling, and
// quota slots; a job's waiters do not (a relay's finish announces its end: lua/finish.lua).
inline constexpr std::chrono::milliseconds kGather{5};
// How long the consumer and the gateway's other background loops (webhook sender, reaper, due
// sweep, GC) wait for each reply, the consumer read's 1 s block included: a master that stops
// answering without closing the connection — a node gone without a word, a partition — is left
// for a new connection (after a failover, the new master) within it, where the connection's
// default (30 s) held every job's end (webhooks, metrics), a dead relay's job and a job's
// deadline that long. Their steps are small (one job or a batch of 100 ids each), answered in
// milliseconds by a Redis that answers at all.
inline constexpr std::chrono::milliseconds kReplyWait{5'000};
// How long a stopping consumer waits for each reply while it settles what it read last.
inline constexpr std::chrono::milliseconds kStopWait{500};

struct CompletionEvent {
  std::string model, job_id, status;
  std::string timings, traceparent;  // when a relay finished the job
  std::string tenant;                // '' when the record is gone
};

struct CompletionConsumerParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  std::string consumer;
  std::chrono::milliseconds claim_idle;
  std::chrono::milliseconds job_retention;
  // After a batch is settled: each event's own work outside Redis's step (metrics, logs), with
  // the given connection. An exception is logged; the entry stays handled.
  std::function<void(redis::Connection&, const CompletionEvent&)> settled;
  // quotas.max_pending is set: each ended job's admission is released (JobStore::release_call),
  // a batch's together, in the consumer's next round trip.
  bool release_admissions = false;
};

class CompletionConsumer {
 public:
  explicit CompletionConsumer(CompletionConsumerParams p)
      : p_(std::move(p)), conn_(p_.endpoint.with_read_timeout(kReplyWait)) {}
  // One round now: claim stale entries, then settle the batch read last round and read new
  // ones in one round trip (blocking up to block, kFollowUpWait while a batch is settled).
  // Returns the number settled. Throws redis::IoError.
  int pass(std::chrono::milliseconds block);
  void run(std::stop_token stop);

 private:
  // Once per connection: the groups made (an existing one is fine), and this consumer's own
  // pending entries adopted.
  void prepare(redis::Connection& c, redis::EventLog& events);
  // At a stop: the last batch read and this consumer's own pending entries, settled and
  // followed up on a fresh connection.
  void settle_at_stop();
  // This consumer's own pending entries (delivered, not acknowledged: read by a previous
  // process of the same name, or by a read whose reply a cut connection lost), added to
  // unsettled_ (up to kBatch; more are claimed after claim_idle).
  void adopt_own_pending(redis::Connection& c, redis::EventLog& events);
  // Settles a batch (one settle per model) in one round trip, with `read` after the settles
  // when given (its reply to *read_reply), then follows up what was settled. A batch the
  // connection failed under, and runs refused for a passing state, go back to unsettled_.
  // Returns the number settled.
  int handle(redis::Connection& c, redis::EventLog& events, std::vector<redis::Event> batch,
             std::optional<redis::Connection::Call> read = std::nullopt,
             redis::Reply* read_reply = nullptr);
  // One run's settle reply: followed up when settled, back to unsettled_ when refused for a
  // passing state, logged otherwise (left pending: claimed again after claim_idle).
  int settled(redis::Connection& c, const std::vector<redis::Event>& run, const redisReply* reply);
  // The work outside Redis's step for each settled entry (p_.settled; failures logged), and
  // the run's quota releases queued in releases_.
  void follow_up(redis::Connection& c, const std::vector<redis::Event>& run,
                 const std::vector<std::string>& tenants);

  CompletionConsumerParams p_;
  // get() and reset() here, and run()'s stop, which interrupts a read blocked in XREADGROUP
  // from another thread (else a shutdown waits out the block), are serialized by conn_mu_.
  std::mutex conn_mu_;
  redis::LazyConnection conn_;
  // Set by whichever comes first, run()'s stop callback or settle_at_stop(). Once set, the
  // callback cuts no connection (a late one cut settle_at_stop's fresh connection) and pass()
  // starts no read (one started after a stop that found no connection blocked its full wait).
  bool stopping_ = false;
  bool prepared_ = false;  // on this connection: see prepare()
  // The entries the last pass read, settled by the next (or at stop).
  std::vector<redis::Event> unsettled_;
  // Quota admissions of jobs followed up, released ahead of the next settle in its round trip
  // (one ZREM per tenant and batch, not a round trip per job: issue 14's benchmark with quotas
  // on). A round trip that fails keeps them: ZREM again is harmless.
  std::vector<redis::Connection::Call> releases_;
  std::chrono::steady_clock::time_point last_claim_{};
};

}  // namespace relay::gateway
