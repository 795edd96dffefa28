#pragma once
// The job-level Redis operations, shared by the relay, the gateway and the tests. Expected
// outcomes (queue empty, lease lost, job already terminal) are values; connection failures are
// redis::IoError and are the caller's to retry.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/random.hpp"
#include "redis/completion.hpp"
#include "redis/connection.hpp"
#include "redis/job_record.hpp"
#include "redis/keys.hpp"
#include "redis/quota.hpp"

namespace relay::redis {

enum class BeginOutcome { ok, missing, terminal };
struct BeginResult {
  BeginOutcome outcome;
  JobRecord record;  // when ok: the record after it was marked processing
};

// The events a job can have webhooks for (webhook_events); terminal is the default and only
// one without opting in.
enum class WebhookEvent { terminal, started, progress };
std::string_view to_string(WebhookEvent e);

struct HeartbeatResult {
  bool held = false;
  bool cancel_requested = false;
};

enum class FinishOutcome { ok, terminal, lease_lost, missing };
// See lua/cancel.lua: cancelled at once (it was pending), requested (the relay stops it), or
// nothing changed (already terminal, or no such job).
enum class CancelOutcome { cancelled, requested, terminal, missing };
// See lua/reap.lua: the id has a lease; it left processing; first seen lease-less; seen within
// the grace period; back in pending; dead-lettered.
enum class ReapOutcome { alive, gone, marked, waiting, requeued, deadlettered };

struct QueueDepth {
  long long pending = 0, processing = 0, deadletter = 0;
  long long held = 0;      // a paused model's queue
  long long retrying = 0;  // failed jobs waiting for their retry
  // When the oldest waiting job was submitted. Relays take from the left of pending, where the
  // oldest normal job waits behind what jumped in there: priority jobs (newer) and jobs put
  // back (a relay stopped, a retry due: older). So the first kOldestScan ids are read, the
  // oldest of them counted; only more than that many jobs ahead of the oldest normal one would
  // hide it.
  static constexpr int kOldestScan = 16;
  std::optional<std::chrono::system_clock::time_point> oldest_created;
  double oldest_wait_seconds(std::chrono::system_clock::time_point now) const {
    return oldest_created ? std::chrono::duration<double>(now - *oldest_created).count() : 0;
  }
};
std::string_view to_string(FinishOutcome o);

// The ids at the head of pending as a relay last saw them (a plain LRANGE sent behind its last
// take or finish), which its next take names (lua/take.lua), and how many to ask for. The take
// finds the head among them unless other relays took that many jobs between the look and the
// take. Each id costs the script two arguments (its record's and its lease's keys: ~0.16 µs of
// Redis each, measured with the script alone), so the count follows the relays at work: twice
// the farthest position the head was found at over the last kWindow takes, doubled after a miss.
// Many relays move the head far between one relay's steps (32 relays of 20 ms jobs: ~30 places
// a job). There (kFar) naming candidates costs more than it saves — a take of 64 costs Redis ~3x
// one of 4, and still misses at times and goes round again — and the take is a pop instead:
// LMOVE, as the seed's dequeue, with its finish, then begin.lua: a round trip more for the relay
// (while the model works, when it takes ahead), no candidates and no miss (README, *Decisions*).
// A far relay's look then says how far the head moved between its takes: where the job its pop
// moved stands among the ids the look behind its last pop saw.
class TakeCandidates {
 public:
  static constexpr long long kMin = 2, kMax = 32, kWindow = 32, kFar = kMax;

  TakeCandidates() = default;
  explicit TakeCandidates(std::vector<std::string> seen) : ids(std::move(seen)) {}

  long long want() const { return want_; }
  // The take is a pop (LMOVE, then begin.lua), not a take naming candidates.
  bool far() const { return want_ >= kFar; }
  // How many ids a look asks for: the next take's candidates; when far, enough to tell whether
  // the head moves less than kFar / 2 places between this relay's takes (near again).
  long long looks() const { return far() ? kFar / 2 : want_; }
  void found_at(long long position);  // the head was ids[position - 1]
  void missed();                      // the head was none of them
  // This slot's name in Redis: a take copies the record of the job it took to
  // Keys::taken(model, taker()), read behind it (lua/take.lua). Random, one per slot.
  const std::string& taker() const { return taker_; }
  // A far take's pop moved `id`: the distance measured from ids, unless they were just looked at.
  void popped(const std::string& id);
  // A look at the head of pending (behind a finish, or a take that missed): the ids now. When
  // far, the distance is measured from it too (a relay taking ahead pops with no finish, and
  // the finish's look comes between two pops).
  void looked(std::vector<std::string> now);

  std::vector<std::string> ids;
  bool fresh = false;  // ids were looked at just now (not at the last take, a job ago)

 private:
  long long want_ = 4, reach_ = 0, takes_ = 0;
  std::string taker_ = random_hex(8);
};

struct Taken {
  std::string id;
  JobRecord record;  // after it was marked processing
};

// Approximate cap on jobs:<model>:events; consumers read it long before this many accumulate.
inline constexpr long long kEventsMaxLen = 100'000;

class JobStore {
 public:
  JobStore(Connection& conn, Keys keys) : conn_(conn), keys_(std::move(keys)) {}

  // An Idempotency-Key claimed by the submit step itself: its key (keys().idempotency()), and how
  // long it names the job once made (the records' retention).
  struct IdempotencyClaim {
    std::string key;
    std::chrono::milliseconds ttl;
  };
  // What the submit step did: made the job, or not — its id was taken (a collision, or a retry
  // of an attempt that ran), or its Idempotency-Key names another job: holder, that job's id.
  struct SubmitOutcome {
    bool made = false;
    std::string holder;
  };

  // Record + enqueue, atomically. Returns false if the id exists already. With listed_for (the
  // records' retention), the job enters its tenant's listing index in the same round trip (a
  // retry that finds the id taken indexes it again: harmless). upload_held: the upload held its
  // input with Schedules::hold_upload(), released in the same step. With claim, the job is made
  // only if the Idempotency-Key is free or already names this id, and then names it (lua/
  // submit.lua): a key held by another job makes nothing.
  bool submit(const JobRecord& record, bool priority,
              std::optional<std::chrono::milliseconds> listed_for = std::nullopt,
              bool upload_held = false) {
    return submit_outcome(
               conn_.pipeline(submit_calls(keys_, record, priority, listed_for, upload_held)))
        .made;
  }
  SubmitOutcome submit(const JobRecord& record, bool priority,
                       std::optional<std::chrono::milliseconds> listed_for, bool upload_held,
                       const IdempotencyClaim& claim) {
    return submit_outcome(
        conn_.pipeline(submit_calls(keys_, record, priority, listed_for, upload_held, &claim)));
  }
  // submit() in parts, for a caller that sends the calls another way (redis/batcher.hpp).
  std::vector<Connection::Call> submit_calls(const JobRecord& record, bool priority,
                                             std::optional<std::chrono::milliseconds> listed_for,
                                             bool upload_held = false) const {
    return submit_calls(keys_, record, priority, listed_for, upload_held);
  }
  static std::vector<Connection::Call> submit_calls(
      const Keys& keys, const JobRecord& record, bool priority,
      std::optional<std::chrono::milliseconds> listed_for, bool upload_held = false,
      const IdempotencyClaim* claim = nullptr);
  static SubmitOutcome submit_outcome(const std::vector<Reply>& replies);
  static bool submitted(const std::vector<Reply>& replies) { return submit_outcome(replies).made; }

  // BLMOVE pending -> processing LEFT RIGHT; nullopt on timeout or when unblocked by
  // CLIENT UNBLOCK (shutdown).
  std::optional<std::string> pop(const std::string& model, std::chrono::milliseconds timeout);

  // Non-blocking take when jobs wait: move + lease + processing in one step (lua/take.lua);
  // when far, LMOVE then begin(). nullopt when the queue is empty (then pop() + begin()).
  // candidates: the ids at the head of pending as last seen (finish() and take() leave them
  // there; when none, they are looked up first, one round trip more).
  std::optional<Taken> take(const std::string& model, const std::string& token,
                            std::chrono::milliseconds lease_ttl, TakeCandidates& candidates);
  // The look at the head of pending (LRANGE of candidates.looks() ids): sent behind each take,
  // pop and finish, and alone by take() when it has no candidates; public for a caller that
  // sends it another way (with a connection's handshake: Connection::open).
  static std::vector<std::string> look_command(const Keys& keys, const std::string& model,
                                               const TakeCandidates& candidates) {
    return {"LRANGE", keys.pending(model), "0", std::to_string(candidates.looks() - 1)};
  }

  BeginResult begin(const std::string& model, const std::string& id, const std::string& token,
                    std::chrono::milliseconds lease_ttl);
  HeartbeatResult heartbeat(const std::string& model, const std::string& id,
                            const std::string& token, std::chrono::milliseconds lease_ttl);
  // Records the model's progress report and announces it (lua/progress.lua), while the lease
  // holds our token. The reports recorded so far, or 0 when the lease is gone.
  std::int64_t progress(const std::string& model, const std::string& id, const std::string& token,
                        std::optional<double> fraction, const std::string& message);
  // The relay's last step (lua/finish.lua), fenced by its lease token. candidates (when given):
  // the ids then at the head of pending, for the next take() (an LRANGE behind the finish).
  FinishOutcome finish(const Completion& c, const std::string& token,
                       TakeCandidates* candidates = nullptr);
  // A relay's steady state: finish() and the take() of its next job in one round trip
  // (pipelined: independent steps, the take runs whatever the finish's outcome). The take is
  // made only with candidates; without, or when it misses, candidates are left for take().
  // The job taken goes to `taken` before the finish's error, if its reply is one, is thrown:
  // Redis may refuse the finish and run the take (a BUSY or LOADING spell ending between
  // them), and that job is this relay's to run — its finish is retried alone.
  FinishOutcome finish_and_take(const Completion& c, const std::string& token,
                                const std::string& next_token, std::chrono::milliseconds lease_ttl,
                                TakeCandidates& candidates, std::optional<Taken>& taken);
  // The same steps in two halves (Connection::send, then receive), for a relay taking ahead: a
  // job's finish (when c is given) and the take of the next (when next_token is not empty and
  // candidates are known; on `model`), sent now, their replies read later. What was sent goes
  // to receive_steps().
  // A far take is a pop sent with the finish (LMOVE, and a look behind it); its begin.lua is
  // sent by receive_steps(). What the take needs then is kept here (taking).
  struct Sent {
    bool finish = false, take = false;
    struct Taking {
      std::string model, token;
      std::chrono::milliseconds lease_ttl;
      bool pop = false;
    };
    std::optional<Taking> taking;
  };
  Sent send_steps(const std::string& model, const Completion* c, const std::string& token,
                  const std::string& next_token, std::chrono::milliseconds lease_ttl,
                  const TakeCandidates& candidates);
  // The finish's outcome, if one was sent; the job taken goes to `taken` as in
  // finish_and_take(), before any error of the finish's is thrown.
  std::optional<FinishOutcome> receive_steps(Sent sent, TakeCandidates& candidates,
                                             std::optional<Taken>& taken);
  bool give_back(const std::string& model, const std::string& id, const std::string& token);
  // The relay's last step for a retryable failure with attempts left (lua/retry.lua): fenced
  // like finish; the job waits in the retries set until due. failures: all so far, this one
  // included (JSON array).
  FinishOutcome retry(const std::string& model, const std::string& id, const std::string& token,
                      WallTime due, const std::string& failures);
  // The due sweep (gateway): retries due by now, at most limit; each back into pending (true) or
  // dropped because it was cancelled meanwhile (false), their steps in one round trip.
  std::vector<std::string> due_retries(const std::string& model, WallTime now, int limit);
  std::vector<bool> requeue_retries(const std::string& model, const std::vector<std::string>& ids);

  std::optional<JobRecord> get(const std::string& model, const std::string& id);
  // A record from its HGETALL reply (nullopt: none), for a caller that sent the read another way.
  static std::optional<JobRecord> record_of(const redisReply* reply);
  // Pauses or resumes the model's intake (lua/pause.lua); the jobs moved.
  std::int64_t set_paused(const std::string& model, bool paused);
  bool paused(const std::string& model);
  // A live event stream opened on the job (lua/watch.lua): its changes short of the end are
  // announced from now on. False when the record is gone.
  // A long-poll's read: the job flagged as watched (lua/watch.lua: only if it is the tenant's
  // and the service type's, and has not ended) and read, in one step.
  std::optional<JobRecord> get_watched(const std::string& model, const std::string& id,
                                       const std::string& tenant, const std::string& service_type);
  // get_watched() in parts, for a caller that sends the call another way (redis/batcher.hpp):
  // its reply is the record (record_of()).
  static Connection::Call get_watched_call(const Keys& keys, const std::string& model,
                                           const std::string& id, const std::string& tenant,
                                           const std::string& service_type);
  bool watch(const std::string& model, const std::string& id);

  // Cancel (gateway); see lua/cancel.lua.
  CancelOutcome cancel(const std::string& model, const std::string& service_type,
                       const std::string& id);
  // cancel() in parts, for a caller that sends the call another way (redis/batcher.hpp).
  static Connection::Call cancel_call(const Keys& keys, const std::string& model,
                                      const std::string& service_type, const std::string& id);
  // The outcome with the record as the step left it (nullopt: missing).
  struct Cancelled {
    CancelOutcome outcome = CancelOutcome::missing;
    std::optional<JobRecord> record;
  };
  Cancelled cancel_job(const std::string& model, const std::string& service_type,
                       const std::string& id);
  static Cancelled cancelled(const redisReply* reply);

  // The relay: a webhook for an opt-in event (webhook_events) if the job wants it; `suffix`
  // tells this delivery from the job's other ones of the same event (an attempt's token, a
  // progress report's number).
  bool schedule_webhook(const std::string& model, const std::string& id, WebhookEvent event,
                        const std::string& suffix);
  // A job's terminal webhook delivery id, the webhook-id receivers deduplicate on (scheduled
  // by the completion consumer, redis/events.hpp); the opt-in events' ids extend it.
  static std::string webhook_id(const std::string& job_id);  // "msg_<id without dashes>"

  // Idempotency-Key (keys().idempotency()): reserves the key for job_id for ttl (an upload whose
  // body is still to come; a body received whole claims it in the submit step instead). nullopt
  // when reserved now; otherwise the id it holds — job_id itself when an earlier attempt of this
  // request reserved it (its reply was lost), "" when it vanished meanwhile.
  std::optional<std::string> reserve_idempotency(const std::string& key, const std::string& job_id,
                                                 std::chrono::milliseconds ttl);
  // reserve_idempotency() in parts, for a caller that sends the calls another way
  // (redis/batcher.hpp): the SET NX and the GET in one round trip, the GET's reply naming the
  // holder when the SET found one.
  static std::vector<Connection::Call> reserve_idempotency_calls(const std::string& key,
                                                                 const std::string& job_id,
                                                                 std::chrono::milliseconds ttl);
  static std::optional<std::string> reservation_holder(const std::vector<Reply>& replies);
  // Frees a reservation this job_id still holds (one that lapsed and was taken by another
  // request is that request's: left alone).
  void release_idempotency(const std::string& key, const std::string& job_id);
  // The job id an Idempotency-Key holds, if any.
  std::optional<std::string> idempotent_job(const std::string& key);
  // Sets the reservation's TTL if job_id still holds it; false when it does not (lua/
  // renew_idempotency.lua).
  bool renew_idempotency(const std::string& key, const std::string& job_id,
                         std::chrono::milliseconds ttl);

  // Returns once `replicas` replicas have this connection's writes so far (WAIT, up to 1 s; in
  // cluster mode on the node of the previous command); 0 = at once. Throws IoError when fewer
  // acknowledged: the write's fate is unknown (a failover may drop it), to be retried.
  void require_replicas(std::int64_t replicas);
  void ping();

  QueueDepth queue_depth(const std::string& model);
  // What the scaler needs: the jobs pending, ended ones left in the queue not counted.
  long long pending_count(const std::string& model);

  // Operators: a dead-lettered job back into pending; false when it is not dead-lettered. The
  // token names the operator's request (random_hex; the same on each retry of that request): a
  // retry after a lost reply finds the job requeued by it and answers true again.
  bool requeue_deadletter(const std::string& model, const std::string& id,
                          const std::string& token);
  // Every job in the model's dead letter when called (not those dead-lettered meanwhile), in
  // order, each by the same step: batches of ids read and their steps pipelined, a round trip
  // per batch rather than per job. How many were requeued.
  std::int64_t requeue_deadletter_all(const std::string& model, const std::string& token);

  // Reaper (gateway): one id of the processing list; see lua/reap.lua.
  ReapOutcome reap(const std::string& model, const std::string& id, std::chrono::milliseconds grace,
                   long long max_attempts) {
    return reap_all(model, {id}, grace, max_attempts).front();
  }
  // reap() of each id, their steps pipelined kReapBatch at a time: a pass over a busy model's
  // processing list (one id per job in hand) costs a round trip per batch, not per job.
  std::vector<ReapOutcome> reap_all(const std::string& model, const std::vector<std::string>& ids,
                                    std::chrono::milliseconds grace, long long max_attempts);
  static constexpr std::size_t kReapBatch = 100;
  // Queue deadlines (gateway): ids whose ttl has passed by now, at most limit; and a step for
  // each (lua/expire.lua), in one round trip: true when it was still pending and is now failed
  // `expired`.
  std::vector<std::string> due_expiries(const std::string& model, WallTime now, int limit);
  std::vector<bool> expire(const std::string& model, const std::vector<std::string>& ids);
  // Quotas (gateway): admits a submission of job id to model under tenant's quota, or says
  // which limit refuses it; release() undoes an admission (the job ended, or never came to be);
  // renew() marks an admission still in use (a long upload), so that the sweep leaves it.
  Admission admit(const std::string& tenant, const std::string& model, const std::string& id,
                  const Quota& q);
  // admit() in parts, for a caller that sends the call another way (redis/batcher.hpp).
  static Connection::Call admit_call(const Keys& keys, const std::string& tenant,
                                     const std::string& model, const std::string& id,
                                     const Quota& q);
  static Admission admitted(const redisReply* reply);
  void release(const std::string& tenant, const std::string& model, const std::string& id);
  // release() of several of a tenant's jobs, as one call for a pipeline: jobs are {model, id}.
  static Connection::Call release_call(
      const Keys& keys, const std::string& tenant,
      const std::vector<std::pair<std::string, std::string>>& jobs);
  void renew(const std::string& tenant, const std::string& model, const std::string& id);
  // Admissions older than cutoff whose job has ended or never came to be (a gateway crashed
  // mid-upload) are dropped; returns how many.
  int sweep_admissions(const std::string& tenant, WallTime cutoff);
  // Listing (gateway): the tenant's index of jobs (written by submit()). index_page() returns
  // up to count entries {member, created µs}, newest first, created within [oldest_us,
  // newest_us].
  std::vector<std::pair<std::string, std::int64_t>> index_page(const std::string& tenant,
                                                               std::int64_t newest_us,
                                                               std::int64_t oldest_us, int count);
  std::vector<std::string> list(const std::string& key);
  std::vector<std::string> hash_keys(const std::string& key);
  const Keys& keys() const { return keys_; }

  // Operators: the models that have keys in this Redis (on every master in cluster mode), from
  // their queues (Redis drops empty lists) and events streams (kept).
  static std::vector<std::string> known_models(const Endpoint& ep, const Keys& keys);

 private:
  // look_command() as a call: the look behind a take, a pop or a finish.
  Connection::Call look_call(const std::string& model, const TakeCandidates& candidates) const;
  // A far take's move (as the seed's dequeue, without blocking), and the look behind it.
  Connection::Call pop_call(const std::string& model) const;
  // Its replies: the id moved (none: the queue was empty), measured against the last look; the
  // look behind it becomes the candidates.
  static std::optional<std::string> moved(const redisReply* lmove, const redisReply* look,
                                          TakeCandidates& candidates);
  // begin() of a job a pop moved: nullopt when it cannot run (begin.lua dropped it).
  std::optional<Taken> begun(const std::string& model, const std::string& id,
                             const std::string& token, std::chrono::milliseconds lease_ttl);
  Connection::Call take_call(const std::string& model, const std::string& token,
                             std::chrono::milliseconds lease_ttl,
                             const TakeCandidates& candidates) const;
  // The read of the record a take copied (Keys::taken), sent behind it.
  Connection::Call taken_call(const std::string& model, const TakeCandidates& candidates) const;
  // take.lua's reply with the copy read behind it: the job taken, if any. The record is read
  // again from its key when the copy is not the job's (see the definition).
  std::optional<Taken> take_outcome(const std::string& model, const std::string& token,
                                    const redisReply* take, const redisReply* copy,
                                    const redisReply* look, TakeCandidates& candidates);
  Connection::Call finish_call(const Completion& c, const std::string& token) const;
  Connection::Call requeue_deadletter_call(const std::string& model, const std::string& id,
                                           const std::string& token) const;

  Connection& conn_;
  Keys keys_;
};

}  // namespace relay::redis
