#pragma once
// The job record `job:<id>` (a Redis hash), typed. Field names are SPEC §3's, defined once here;
// operators read them with `redis-cli HGETALL job:<id>`, so they never change, and neither does
// how values are written: numbers in decimal, flags as "1" (absent when false), times as
// RFC 3339 UTC with milliseconds. Lua steps write some fields themselves (status, started_at,
// attempts...), in the same forms.

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace relay {

namespace field {
inline constexpr std::string_view id = "id";
inline constexpr std::string_view service_type = "service_type";
inline constexpr std::string_view model = "model";
inline constexpr std::string_view operation = "operation";
inline constexpr std::string_view status = "status";
inline constexpr std::string_view tenant = "tenant";
inline constexpr std::string_view input_key = "input_key";
inline constexpr std::string_view input_filename = "input_filename";
inline constexpr std::string_view input_content_type = "input_content_type";
inline constexpr std::string_view input_size = "input_size";
inline constexpr std::string_view result_key = "result_key";
// The model's Content-Type for its answer (absent: application/json, as before it was kept).
inline constexpr std::string_view result_content_type = "result_content_type";
inline constexpr std::string_view params = "params";
inline constexpr std::string_view callback_url = "callback_url";
inline constexpr std::string_view priority = "priority";
inline constexpr std::string_view attempts = "attempts";
inline constexpr std::string_view error_code = "error_code";
inline constexpr std::string_view error_message = "error_message";
inline constexpr std::string_view created_at = "created_at";
inline constexpr std::string_view started_at = "started_at";
inline constexpr std::string_view finished_at = "finished_at";
inline constexpr std::string_view holder = "holder";
inline constexpr std::string_view key_id = "key_id";
inline constexpr std::string_view cancel_requested = "cancel_requested";
// Something waits on the job's end (a long-poll, an event stream, a submission with Prefer:
// wait): its changes and end are announced (lua/watch.lua, lua/settle.lua).
inline constexpr std::string_view watched = "watched";
inline constexpr std::string_view timings = "timings";
// Deadlines (per submission or the service type's default): not started by expires_at, the job
// fails `expired`; running longer than timeout_ms, it fails `timed_out`.
inline constexpr std::string_view expires_at = "expires_at";
inline constexpr std::string_view timeout_ms = "timeout_ms";
// Retries of failed jobs (opt-in): the policy, the failures so far (JSON array of {attempt,
// code, message, at}), and while a retry waits, when it is due.
inline constexpr std::string_view max_attempts = "max_attempts";
inline constexpr std::string_view retry_backoff_ms = "retry_backoff_ms";
inline constexpr std::string_view retry_max_backoff_ms = "retry_max_backoff_ms";
inline constexpr std::string_view failures = "failures";
inline constexpr std::string_view retry_at = "retry_at";
// Progress the model reported through the relay (lua/progress.lua): a fraction in [0, 1] (absent
// when only a message was given), a short message, when, the seq of reports so far, and the
// lease token of the attempt that reported it (progress of an earlier attempt is not shown).
inline constexpr std::string_view progress = "progress";
inline constexpr std::string_view progress_message = "progress_message";
inline constexpr std::string_view progress_at = "progress_at";
inline constexpr std::string_view progress_seq = "progress_seq";
inline constexpr std::string_view progress_holder = "progress_holder";
// An input given by reference (s3://bucket/key or https://...) instead of uploaded: input_key is
// then absent, and input_max_size is the most the relay reads from it.
inline constexpr std::string_view input_url = "input_url";
inline constexpr std::string_view input_max_size = "input_max_size";
// W3C Trace Context: the submission's traceparent (or a new trace's), and its tracestate.
inline constexpr std::string_view traceparent = "traceparent";
inline constexpr std::string_view tracestate = "tracestate";
// The events a submission wants webhooks for, comma-separated: "terminal" (absent = only that),
// "started", "progress".
inline constexpr std::string_view webhook_events = "webhook_events";
// Added by the gateway's webhook sender (SPEC §8: each attempt's outcome on the job).
inline constexpr std::string_view webhook_status = "webhook_status";
inline constexpr std::string_view webhook_attempts = "webhook_attempts";
inline constexpr std::string_view webhook_last = "webhook_last";
// The token of the operator's request that last requeued the job from the dead letter
// (lua/requeue_deadletter.lua: that request retried finds its own work done).
inline constexpr std::string_view requeued_by = "requeued_by";
}  // namespace field

enum class JobStatus { pending, processing, completed, failed, cancelled };
// A progress fraction as the record stores it (six significant digits).
std::string format_progress(double fraction);
std::string_view to_string(JobStatus s);
std::optional<JobStatus> parse_status(std::string_view s);
inline bool is_terminal(JobStatus s) {
  return s == JobStatus::completed || s == JobStatus::failed || s == JobStatus::cancelled;
}

using Fields = std::vector<std::pair<std::string, std::string>>;
// The same, viewing a reply's strings in place (valid as long as the reply).
using FieldViews = std::vector<std::pair<std::string_view, std::string_view>>;
using WallTime = std::chrono::system_clock::time_point;

// A stored value that does not parse as its field's type: a record written by something other
// than Relay's steps (a surprise, answered 500 where it is caught).
class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JobRecord {
  std::string id, service_type, model, operation;
  JobStatus status = JobStatus::pending;
  std::string tenant;
  std::string input_key, input_filename, input_content_type;
  std::uint64_t input_size = 0;
  std::string result_key, result_content_type;
  std::string params;  // JSON object text, as the client sent it (numbers kept verbatim)
  std::string callback_url;
  bool priority = false;
  std::int64_t attempts = 0;  // times a relay crashed holding it (the reaper counts)
  std::string error_code, error_message;
  std::optional<WallTime> created_at, started_at, finished_at;
  std::optional<WallTime> expires_at;                // the queue deadline (ttl)
  std::optional<std::chrono::milliseconds> timeout;  // the execution limit
  // Retries (absent: the seed's rule, no retry of a failed job).
  std::optional<std::int64_t> max_attempts;
  std::optional<std::chrono::milliseconds> retry_backoff, retry_max_backoff;
  std::string failures;              // JSON array, the failed attempts so far
  std::optional<WallTime> retry_at;  // waiting for its retry (not in pending) until then
  std::string holder;                // the relay holding it while processing
  std::string key_id;                // the encryption key of its input (empty: not encrypted)
  bool cancel_requested = false;
  bool watched = false;  // see field::watched (a submission that waits is born watched)
  std::string timings;   // JSON object text, written by the relay
  std::string webhook_status, webhook_last;
  std::int64_t webhook_attempts = 0;
  std::string webhook_events;  // empty: terminal only
  std::string input_url;       // an input by reference (input_key is then empty)
  std::string traceparent, tracestate;
  std::uint64_t input_max_size = 0;
  std::optional<double> progress;
  std::string progress_message, progress_holder;
  std::optional<WallTime> progress_at;
  std::int64_t progress_seq = 0;

  // Whether the job has a callback URL and its webhook_events include event.
  bool wants_webhook(std::string_view event) const;
  // The progress of the attempt in hand (or of the one that ended the job); nothing while
  // pending, or when the report came from an earlier attempt.
  bool has_current_progress() const;

  // Absent values (empty strings, false flags, unset times, a zero webhook_attempts) are left
  // out: HSET never writes an empty value. input_size and attempts are always written.
  Fields to_fields() const;
  // Unknown fields are ignored; a value that does not parse throws RecordError.
  static JobRecord from_fields(const FieldViews& fields);
  static JobRecord from_fields(const Fields& fields);
};

}  // namespace relay
