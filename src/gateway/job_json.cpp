#include "gateway/job_json.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "common/time.hpp"
#include "common/trace.hpp"

namespace relay::gateway {

namespace json = boost::json;

std::string job_json(const JobRecord& r) {
  auto or_null = [](const std::string& s) -> json::value {
    if (s.empty()) return nullptr;
    return json::value(s);
  };
  // Every job answer and status read builds one: its values come from a buffer on the stack
  // rather than an allocation each (the heap only if a record outgrows it).
  unsigned char scratch[4096];
  json::monotonic_resource mr(scratch, sizeof scratch);
  json::object o(32, &mr);
  o["id"] = r.id;
  o["service_type"] = r.service_type;
  o["model"] = r.model;
  o["operation"] = or_null(r.operation);
  auto time_or_null = [](const std::optional<WallTime>& t) -> json::value {
    if (!t) return nullptr;
    return json::value(format_rfc3339(*t));
  };
  o["status"] = to_string(r.status);
  o["created_at"] = time_or_null(r.created_at);
  o["started_at"] = time_or_null(r.started_at);
  o["finished_at"] = time_or_null(r.finished_at);
  o["expires_at"] = time_or_null(r.expires_at);
  o["max_attempts"] = r.max_attempts.value_or(1);
  o["retry_at"] = time_or_null(r.retry_at);
  {
    // The failed attempts so far (with retries), as the relay recorded them.
    boost::system::error_code ec;
    auto failures = r.failures.empty() ? json::value(json::array()) : json::parse(r.failures, ec);
    o["failures"] = !ec && failures.is_array() ? failures : json::value(json::array());
  }
  if (r.timeout)
    o["timeout"] = static_cast<double>(r.timeout->count()) / 1000.0;
  else
    o["timeout"] = nullptr;
  o["attempts"] = r.attempts;
  if (auto t = parse_traceparent(r.traceparent))
    o["trace_id"] = t->trace_id;
  else
    o["trace_id"] = nullptr;
  if (r.has_current_progress()) {
    json::object p;
    p["fraction"] = r.progress ? json::value(*r.progress) : json::value(nullptr);
    p["message"] = or_null(r.progress_message);
    p["updated_at"] = time_or_null(r.progress_at);
    o["progress"] = std::move(p);
  } else {
    o["progress"] = nullptr;
  }
  if (r.error_code.empty())
    o["error"] = nullptr;
  else
    o["error"] = json::object{{"code", r.error_code}, {"message", r.error_message}};
  o["result_url"] = r.status == JobStatus::completed
                        ? json::value("/jobs/" + r.service_type + "/" + r.id + "/result")
                        : nullptr;
  o["input"] = json::object{{"filename", or_null(r.input_filename)},
                            {"content_type", or_null(r.input_content_type)},
                            {"size", r.input_size},
                            {"url", or_null(r.input_url)}};
  o["priority"] = r.priority;
  o["cancel_requested"] = r.cancel_requested;
  o["callback_url"] = or_null(r.callback_url);
  if (!r.webhook_status.empty()) {
    json::object w{{"status", r.webhook_status}};
    w["attempts"] = r.webhook_attempts;
    boost::system::error_code ec;
    auto last = json::parse(r.webhook_last, ec);
    w["last_attempt"] = ec ? json::value(nullptr) : last;
    o["webhook"] = w;
  } else {
    o["webhook"] = nullptr;
  }
  // The relay wrote timings as JSON with fixed decimals; passed through as written (re-encoding
  // would turn 12.5 into 1.25E1).
  std::string timings = "{}";
  if (!r.timings.empty()) {
    boost::system::error_code ec;
    auto v = json::parse(r.timings, ec);
    if (!ec && v.is_object()) timings = r.timings;
  }
  std::string out = json::serialize(o);
  out.insert(out.size() - 1, ",\"timings\":" + timings);
  return out;
}

}  // namespace relay::gateway
