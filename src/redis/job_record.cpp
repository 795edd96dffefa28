#include "redis/job_record.hpp"

#include <charconv>
#include <cstdio>

#include "common/time.hpp"

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

std::string format_progress(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", fraction);
  return buf;
}

namespace {

// How each type of field is written and read. An empty result means "absent".
std::string encode(const std::string& v) {
  return v;
}
std::string encode(JobStatus v) {
  return std::string(to_string(v));
}
std::string encode(bool v) {
  return v ? "1" : "";
}
std::string encode(std::uint64_t v) {
  return std::to_string(v);
}
std::string encode(std::int64_t v) {
  return std::to_string(v);
}
std::string encode(const std::optional<WallTime>& v) {
  return v ? format_rfc3339(*v) : "";
}
std::string encode(const std::optional<std::int64_t>& v) {
  return v ? std::to_string(*v) : "";
}
std::string encode(const std::optional<double>& v) {
  return v ? format_progress(*v) : "";
}
std::string encode(const std::optional<std::chrono::milliseconds>& v) {
  return v ? std::to_string(v->count()) : "";
}

[[noreturn]] void bad(std::string_view name, std::string_view value) {
  throw RecordError("job record field " + std::string(name) + ": cannot read \"" +
                    std::string(value.substr(0, 64)) + "\"");
}
void decode(std::string_view, std::string_view s, std::string& v) {
  v = s;
}
void decode(std::string_view name, std::string_view s, JobStatus& v) {
  auto st = parse_status(s);
  if (!st) bad(name, s);
  v = *st;
}
void decode(std::string_view, std::string_view s, bool& v) {
  v = s == "1";
}
template <typename Int>
void decode(std::string_view name, std::string_view s, Int& v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) bad(name, s);
}
void decode(std::string_view name, std::string_view s, std::optional<std::int64_t>& v) {
  std::int64_t n = 0;
  decode(name, s, n);
  v = n;
}
void decode(std::string_view name, std::string_view s,
            std::optional<std::chrono::milliseconds>& v) {
  std::int64_t ms = 0;
  decode(name, s, ms);
  v = std::chrono::milliseconds(ms);
}
void decode(std::string_view name, std::string_view s, std::optional<double>& v) {
  double d = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || end != s.data() + s.size()) bad(name, s);
  v = d;
}
void decode(std::string_view name, std::string_view s, std::optional<WallTime>& v) {
  v = parse_rfc3339(s);
  if (!v) bad(name, s);
}

// The one list of fields: to_fields and from_fields both walk it, so they cannot disagree.
template <typename Record, typename F>
void for_each_field(Record& r, F&& f) {
  f(field::id, r.id);
  f(field::service_type, r.service_type);
  f(field::model, r.model);
  f(field::operation, r.operation);
  f(field::status, r.status);
  f(field::tenant, r.tenant);
  f(field::input_key, r.input_key);
  f(field::input_filename, r.input_filename);
  f(field::input_content_type, r.input_content_type);
  f(field::input_size, r.input_size);
  f(field::result_key, r.result_key);
  f(field::result_content_type, r.result_content_type);
  f(field::params, r.params);
  f(field::callback_url, r.callback_url);
  f(field::priority, r.priority);
  f(field::attempts, r.attempts);
  f(field::error_code, r.error_code);
  f(field::error_message, r.error_message);
  f(field::created_at, r.created_at);
  f(field::started_at, r.started_at);
  f(field::finished_at, r.finished_at);
  f(field::holder, r.holder);
  f(field::key_id, r.key_id);
  f(field::cancel_requested, r.cancel_requested);
  f(field::watched, r.watched);
  f(field::timings, r.timings);
  f(field::expires_at, r.expires_at);
  f(field::timeout_ms, r.timeout);
  f(field::max_attempts, r.max_attempts);
  f(field::retry_backoff_ms, r.retry_backoff);
  f(field::retry_max_backoff_ms, r.retry_max_backoff);
  f(field::failures, r.failures);
  f(field::retry_at, r.retry_at);
  f(field::webhook_status, r.webhook_status);
  f(field::webhook_attempts, r.webhook_attempts);
  f(field::webhook_last, r.webhook_last);
  f(field::webhook_events, r.webhook_events);
  f(field::input_url, r.input_url);
  f(field::traceparent, r.traceparent);
  f(field::tracestate, r.tracestate);
  f(field::input_max_size, r.input_max_size);
  f(field::progress, r.progress);
  f(field::progress_message, r.progress_message);
  f(field::progress_at, r.progress_at);
  f(field::progress_seq, r.progress_seq);
  f(field::progress_holder, r.progress_holder);
}

}  // namespace

Fields JobRecord::to_fields() const {
  Fields out;
  for_each_field(*this, [&](std::string_view name, const auto& value) {
    std::string text = encode(value);
    // webhook_attempts stays absent until the first attempt (the job JSON shows no webhook).
    if ((name == field::webhook_attempts || name == field::progress_seq ||
         name == field::input_max_size) &&
        text == "0")
      text.clear();
    if (!text.empty()) out.emplace_back(std::string(name), std::move(text));
  });
  return out;
}

bool JobRecord::wants_webhook(std::string_view event) const {
  if (callback_url.empty()) return false;
  const std::string wanted = "," + (webhook_events.empty() ? "terminal" : webhook_events) + ",";
  return wanted.find("," + std::string(event) + ",") != std::string::npos;
}

bool JobRecord::has_current_progress() const {
  if (progress_holder.empty() || progress_seq == 0) return false;
  if (status == JobStatus::processing) return progress_holder == holder;
  return status != JobStatus::pending;
}

JobRecord JobRecord::from_fields(const FieldViews& fields) {
  JobRecord r;
  if (fields.empty()) return r;
  // Each field of the list looked up in the reply, from where the last one was found: a small
  // hash (listpack) gives its fields in the order they were first written, to_fields' order but
  // for the few a later step added, so the next one is nearly always the one after (a hash
  // Redis turned into a table comes in any order: then a search, as it always was).
  size_t at = 0;
  for_each_field(r, [&](std::string_view name, auto& member) {
    for (size_t n = 0; n < fields.size(); ++n) {
      const size_t i = (at + n) % fields.size();
      if (fields[i].first != name) continue;
      decode(name, fields[i].second, member);
      at = i + 1;
      return;
    }
  });
  return r;
}

JobRecord JobRecord::from_fields(const Fields& fields) {
  FieldViews views;
  views.reserve(fields.size());
  for (const auto& [k, v] : fields) views.emplace_back(k, v);
  return from_fields(views);
}

}  // namespace relay
