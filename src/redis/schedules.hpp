#pragma once
// The gateway's two schedules in Redis (SPEC §6, §8): webhook deliveries (a sorted set of
// delivery ids by due time and one hash per delivery) and finished jobs whose objects are due
// for deletion. Written by schedule_webhook.lua / schedule_gc.lua (JobStore), read here.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/job_record.hpp"
#include "redis/keys.hpp"

namespace relay::redis {

struct Delivery {
  std::string model, id, url, job_key, status;
  long long created_ms = 0, attempts = 0;  // attempts made so far
  JobRecord job;                           // as it is now (empty if it expired meanwhile)
  // "terminal" (also when absent: scheduled before events existed), "started" or "progress".
  std::string event = "terminal";
};

struct GcItem {
  std::string model, service_type, job_id, member;
  bool upload = false;  // held by an upload (hold_upload) whose job was never created
};

class Schedules {
 public:
  Schedules(Connection& conn, Keys keys) : conn_(conn), keys_(std::move(keys)) {}

  // Up to limit deliveries of model due at now_ms, each claimed (made due again at now + lock)
  // so that one replica sends it at a time.
  std::vector<std::string> claim_webhooks(const std::string& model, long long now_ms,
                                          std::chrono::milliseconds lock, int limit);
  // The claimed deliveries as they are now, each with its job's record, in two round trips
  // whatever their number (the deliveries, then their jobs); those that vanished (expired with
  // their job) are left out and unscheduled.
  std::vector<Delivery> deliveries(const std::string& model, const std::vector<std::string>& ids);
  // Records an attempt on the delivery and the job: "delivered", "refused", "failed" (done) or
  // "retrying" (due again at next_due_ms). last is the attempt's JSON summary.
  // As a call, for a caller that writes several in one round trip.
  static Connection::Call webhook_outcome_call(const Keys& keys, const Delivery& d,
                                               const std::string& outcome, long long next_due_ms,
                                               long long attempts, std::string last);

  // Claimed deliveries made due again at due_ms without an attempt (their receiver is busy),
  // in one round trip.
  void defer_webhooks(const std::string& model, const std::vector<std::string>& ids,
                      long long due_ms);

  // Up to limit jobs of model (any model without the hash tag) whose objects are due at now_ms.
  // Malformed members are dropped.
  std::vector<GcItem> gc_due(const std::string& model, long long now_ms, int limit);
  // Their jobs' objects are gone: forget them and their webhook deliveries, in one round trip
  // (one DEL and one ZREM for all).
  void gc_done(const std::vector<GcItem>& items);

  // A large upload in progress holds its input for deletion at due_ms, renewed while it
  // progresses; creating the job (submit.lua) releases it. A gateway that dies between storing
  // the input and creating the job (a crash, a kill, a lost node) would otherwise leave the
  // input in storage for ever, with no record to say whose it is. Its member:
  static std::string upload_member(std::string_view model, std::string_view service_type,
                                   std::string_view job_id);
  void hold_upload(const std::string& model, const std::string& service_type,
                   const std::string& job_id, long long due_ms);
  // Whether the job's record exists (a held upload's job may have been created after all).
  bool job_exists(const std::string& model, const std::string& job_id);
  // The submission was refused and its input deleted (or its job exists after all).
  void release_upload(const std::string& model, const std::string& service_type,
                      const std::string& job_id);

 private:
  Connection& conn_;
  Keys keys_;
};

}  // namespace relay::redis
