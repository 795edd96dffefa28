#pragma once
// A job's terminal transition, and the one definition of what `jobs:<model>:completed`
// publishes about it. Every writer of a terminal state builds one: the relay's finish (completed,
// failed, cancelled while running), the gateway's cancel of a pending job, and the reaper's dead
// letter.
//
// The payload, a JSON object (SPEC §4.4; the seed's `{"job_id", "status", ...}`):
//   job_id, status, model, service_type, finished_at (RFC 3339, as in the record);
//   result_key when completed; error_code when failed.
// It is a live signal for listeners (PUBLISH is at-most-once); the durable record of the
// transition is the job record and the jobs:<model>:events stream.

#include <optional>
#include <string>
#include <string_view>

#include "redis/job_record.hpp"

namespace relay::redis {

struct Completion {
  std::string job_id, model, service_type;
  JobStatus status = JobStatus::completed;
  WallTime finished_at;
  std::string result_key, result_content_type;  // completed
  std::string error_code, error_message;        // failed (the message capped at 2 KiB)
  std::string timings;                          // the relay's, a JSON object
  std::string failures;  // with retries: every failed attempt, this one included (JSON array)

  // A failure decided by the gateway now (a dead letter, an expiry); the service type is
  // filled in from the record when the step has read it.
  static Completion failure(std::string job_id, std::string model, std::string error_code) {
    Completion c;
    c.job_id = std::move(job_id);
    c.model = std::move(model);
    c.status = JobStatus::failed;
    c.finished_at = std::chrono::system_clock::now();
    c.error_code = std::move(error_code);
    return c;
  }

  // The record's fields the transition sets, status included.
  Fields fields() const;
  std::string payload() const;
  // A payload read back (listeners, tests); nullopt when it is not one.
  static std::optional<Completion> from_payload(std::string_view json);
};

}  // namespace relay::redis
