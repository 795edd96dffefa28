#pragma once
// The job record `job:<id>` (a Redis hash). Field names are SPEC §3's, defined once here; operators
// read them with `redis-cli HGETALL job:<id>`, so they never change.

#include <optional>
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
inline constexpr std::string_view timings = "timings";
// Added by the gateway's webhook sender (SPEC §8: each attempt's outcome on the job).
inline constexpr std::string_view webhook_status = "webhook_status";
inline constexpr std::string_view webhook_attempts = "webhook_attempts";
inline constexpr std::string_view webhook_last = "webhook_last";
}  // namespace field

enum class JobStatus { pending, processing, completed, failed, cancelled };
std::string_view to_string(JobStatus s);
std::optional<JobStatus> parse_status(std::string_view s);
inline bool is_terminal(JobStatus s) {
  return s == JobStatus::completed || s == JobStatus::failed || s == JobStatus::cancelled;
}

using Fields = std::vector<std::pair<std::string, std::string>>;

// Every field is a string, as stored; empty means absent (HSET never writes empty values).
struct JobRecord {
  std::string id, service_type, model, operation, status, tenant;
  std::string input_key, input_filename, input_content_type, input_size, result_key;
  std::string result_content_type;
  std::string params, callback_url, priority, attempts;
  std::string error_code, error_message;
  std::string created_at, started_at, finished_at;
  std::string holder, key_id, cancel_requested, timings;
  std::string webhook_status, webhook_attempts, webhook_last;

  Fields to_fields() const;
  static JobRecord from_fields(const Fields& fields);
  std::optional<JobStatus> parsed_status() const { return parse_status(status); }
};

}  // namespace relay
