#pragma once
// The gateway's completion consumer (seed, "Gateway subscriber"; SPEC §4.5): reads the durable
// jobs:<model>:events streams through a consumer group, so that each terminal transition is
// handled by one replica — job:<id>:done published for long-polls, the webhook scheduled, the
// record's retention set — and acknowledged in the same step, one Lua call per batch read
// (lua/settle.lua); then metrics and log lines. Entries left pending by a dead replica are
// claimed (XAUTOCLAIM) after events.claim_idle. Handling is idempotent (a webhook is scheduled
// at most once per transition), so a claimed entry that had in fact been handled costs nothing.
// One consumer reads its models' streams with one XREADGROUP; in cluster mode, where streams
// live on different nodes, the gateway runs one consumer per model.

#include <chrono>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/events.hpp"
#include "redis/keys.hpp"

namespace relay::gateway {

inline constexpr const char* kEventsGroup = "relay-gateway";

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
  // After a batch is settled: each event's own work outside Redis's step (metrics, logs, the
  // quota slot), with the given connection. An exception is logged; the entry stays handled.
  std::function<void(redis::Connection&, const CompletionEvent&)> settled;
};

class CompletionConsumer {
 public:
  explicit CompletionConsumer(CompletionConsumerParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  // One round now: claim stale entries, then read new ones (blocking up to block). Returns the
  // number handled. Throws redis::IoError.
  int pass(std::chrono::milliseconds block);
  void run(std::stop_token stop);

 private:
  void ensure_groups(redis::EventLog& events);
  int handle(redis::Connection& c, redis::EventLog& events, const std::vector<redis::Event>& batch);

  CompletionConsumerParams p_;
  // get() and reset() here, and run()'s stop, which interrupts a read blocked in XREADGROUP
  // from another thread (else a shutdown waits out the block), are serialized by conn_mu_.
  std::mutex conn_mu_;
  redis::LazyConnection conn_;
  bool groups_ready_ = false;
  std::chrono::steady_clock::time_point last_claim_{};
};

}  // namespace relay::gateway
