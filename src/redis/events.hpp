#pragma once
// The durable log of terminal transitions (jobs:<model>:events, a stream written by finish.lua,
// cancel.lua and reap.lua), read by the gateway's consumer group (SPEC §4.5).

#include <chrono>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/keys.hpp"

namespace relay::redis {

struct Event {
  std::string model, entry_id, job_id, status;
  std::string timings;      // the relay's, JSON (relay finishes only)
  std::string traceparent;  // the job's (relay finishes only)
};

class EventLog {
 public:
  EventLog(Connection& conn, Keys keys, std::string group)
      : conn_(conn), keys_(std::move(keys)), group_(std::move(group)) {}

  // Creates the group at the stream's start ("0": events written while no gateway ran are not
  // lost), and the stream if needed; an existing group is fine.
  void ensure_group(const std::string& model);
  // Entries another consumer left unacknowledged for idle or longer, now this consumer's.
  std::vector<Event> claim_idle(const std::string& model, const std::string& consumer,
                                std::chrono::milliseconds idle, int count);
  // Steps sent as calls (gateway/completion_consumer.cpp pipelines one batch's settles with
  // the read that waits for the next), and their replies' parsers, which throw what an error
  // reply means as command() does.
  // New entries for this consumer, blocking up to block (0: do not block; the caller lifts the
  // read timeout, see BlockingRead). The models' streams must share a node in cluster mode (one
  // model per call there).
  Connection::Call read_call(const std::vector<std::string>& models, const std::string& consumer,
                             int count, std::chrono::milliseconds block) const;
  // The entries already delivered to this consumer and not yet acknowledged (its pending
  // history; never blocks), among them any whose read reply never reached it (a connection cut
  // while the reply was on its way). Its reply is parsed as a read's.
  Connection::Call pending_call(const std::vector<std::string>& models, const std::string& consumer,
                                int count) const;
  std::vector<Event> parse_read(const std::vector<std::string>& models, const redisReply* r) const;
  // The gateway's handling of a batch of one model's entries, acknowledged in the same step
  // (lua/settle.lua): long-polls woken, terminal webhooks scheduled, records set to expire
  // after retention and their objects queued for deletion. Its reply: each entry's tenant (''
  // when its record is gone).
  Connection::Call settle_call(const std::string& model, const std::vector<Event>& batch,
                               std::chrono::milliseconds retention) const;
  static std::vector<std::string> parse_settle(const redisReply* r, size_t entries);

 private:
  // XREADGROUP from `from` in every model's stream (">": new entries; "0": this consumer's own).
  Connection::Call xreadgroup(const std::vector<std::string>& models, const std::string& consumer,
                              int count, std::chrono::milliseconds block, const char* from) const;

  Connection& conn_;
  Keys keys_;
  std::string group_;
};

}  // namespace relay::redis
