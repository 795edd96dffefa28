#include "redis/job_record.hpp"

#include <stdexcept>

#include "common/random.hpp"

namespace relay {

std::string_view to_string(JobStatus s) {
  switch (s) {
    case JobStatus::pending:
      return "pending";
    case JobStatus::processing:
      return "processing";
    case JobStatus::completed:
      return "completed";
    case JobStatus::failed:
      return "failed";
    case JobStatus::cancelled:
      return "cancelled";
  }
  return "pending";
}

std::optional<JobStatus> parse_status(std::string_view s) {
  for (auto st : {JobStatus::pending, JobStatus::processing, JobStatus::completed,
                  JobStatus::failed, JobStatus::cancelled})
    if (to_string(st) == s) return st;
  return std::nullopt;
}

namespace {

// One table maps field names to members, so to_fields and from_fields cannot disagree.
using Member = std::string JobRecord::*;
constexpr std::pair<std::string_view, Member> kMembers[] = {
    {field::id, &JobRecord::id},
    {field::service_type, &JobRecord::service_type},
    {field::model, &JobRecord::model},
    {field::operation, &JobRecord::operation},
    {field::status, &JobRecord::status},
    {field::tenant, &JobRecord::tenant},
    {field::input_key, &JobRecord::input_key},
    {field::input_filename, &JobRecord::input_filename},
    {field::input_content_type, &JobRecord::input_content_type},
    {field::input_size, &JobRecord::input_size},
    {field::result_key, &JobRecord::result_key},
    {field::result_content_type, &JobRecord::result_content_type},
    {field::params, &JobRecord::params},
    {field::callback_url, &JobRecord::callback_url},
    {field::priority, &JobRecord::priority},
    {field::attempts, &JobRecord::attempts},
    {field::error_code, &JobRecord::error_code},
    {field::error_message, &JobRecord::error_message},
    {field::created_at, &JobRecord::created_at},
    {field::started_at, &JobRecord::started_at},
    {field::finished_at, &JobRecord::finished_at},
    {field::holder, &JobRecord::holder},
    {field::key_id, &JobRecord::key_id},
    {field::cancel_requested, &JobRecord::cancel_requested},
    {field::timings, &JobRecord::timings},
    {field::webhook_status, &JobRecord::webhook_status},
    {field::webhook_attempts, &JobRecord::webhook_attempts},
    {field::webhook_last, &JobRecord::webhook_last},
};

}  // namespace

Fields JobRecord::to_fields() const {
  Fields out;
  for (const auto& [name, member] : kMembers)
    if (!(this->*member).empty()) out.emplace_back(std::string(name), this->*member);
  return out;
}

JobRecord JobRecord::from_fields(const Fields& fields) {
  JobRecord r;
  for (const auto& [k, v] : fields)
    for (const auto& [name, member] : kMembers)
      if (name == k) r.*member = v;
  return r;
}

}  // namespace relay
