#pragma once
// The job-level Redis operations, shared by the relay, the gateway and the tests. Expected
// outcomes (queue empty, lease lost, job already terminal) are values; connection failures are
// redis::IoError and are the caller's to retry.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/job_record.hpp"
#include "redis/keys.hpp"

namespace relay::redis {

enum class BeginOutcome { ok, missing, terminal };
struct BeginResult {
  BeginOutcome outcome;
  JobRecord record;  // when ok: the record after it was marked processing
};

struct HeartbeatResult {
  bool held = false;
  bool cancel_requested = false;
};

enum class FinishOutcome { ok, terminal, lease_lost, missing };
std::string_view to_string(FinishOutcome o);

// Approximate cap on jobs:<model>:events; consumers read it long before this many accumulate.
inline constexpr long long kEventsMaxLen = 100'000;

class JobStore {
 public:
  JobStore(Connection& conn, Keys keys) : conn_(conn), keys_(std::move(keys)) {}

  // Record + enqueue, atomically. Returns false if the id exists already.
  bool submit(const JobRecord& record, bool priority);

  // BLMOVE pending -> processing LEFT RIGHT; nullopt on timeout or when unblocked by
  // CLIENT UNBLOCK (shutdown).
  std::optional<std::string> pop(const std::string& model, std::chrono::milliseconds timeout);

  // Non-blocking take when jobs wait: move + lease + processing in one step. nullopt when the
  // queue is empty (then pop() + begin()).
  std::optional<std::pair<std::string, JobRecord>> take(const std::string& model,
                                                        const std::string& token,
                                                        std::chrono::milliseconds lease_ttl);

  BeginResult begin(const std::string& model, const std::string& id, const std::string& token,
                    std::chrono::milliseconds lease_ttl);
  HeartbeatResult heartbeat(const std::string& model, const std::string& id,
                            const std::string& token, std::chrono::milliseconds lease_ttl);
  FinishOutcome finish(const std::string& model, const std::string& id, const std::string& token,
                       JobStatus status, const Fields& fields, const std::string& payload);
  bool give_back(const std::string& model, const std::string& id, const std::string& token);

  std::optional<JobRecord> get(const std::string& model, const std::string& id);

  // Cancel (gateway): "cancelled", "requested", "terminal" or "missing"; see lua/cancel.lua.
  std::string cancel(const std::string& model, const std::string& id);

  // Completion consumer (gateway): schedules the job's webhook, once per transition. Returns
  // false when the job has no callback_url or the webhook was scheduled already.
  bool schedule_webhook(const std::string& model, const std::string& id, const std::string& status);
  static std::string webhook_id(const std::string& job_id);  // "msg_<id without dashes>"
  // Completion consumer: the record expires after retention; its objects are queued for GC.
  void schedule_gc(const std::string& model, const std::string& id,
                   std::chrono::milliseconds retention);

  // Operators: a dead-lettered job back into pending; false when it is not dead-lettered.
  bool requeue_deadletter(const std::string& model, const std::string& id);

  // Reaper (gateway): one id of the processing list; see lua/reap.lua for the outcomes.
  std::string reap(const std::string& model, const std::string& id, std::chrono::milliseconds grace,
                   long long max_attempts);
  std::vector<std::string> list(const std::string& key);
  std::vector<std::string> hash_keys(const std::string& key);
  const Keys& keys() const { return keys_; }

 private:
  Connection& conn_;
  Keys keys_;
};

}  // namespace relay::redis
