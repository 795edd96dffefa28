#include "gateway/job_json.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>

namespace relay::gateway {

namespace json = boost::json;

std::string job_json(const JobRecord& r) {
  auto or_null = [](const std::string& s) -> json::value {
    if (s.empty()) return nullptr;
    return json::value(s);
  };
  json::object o;
  o["id"] = r.id;
  o["service_type"] = r.service_type;
  o["model"] = r.model;
  o["operation"] = or_null(r.operation);
  o["status"] = r.status;
  o["created_at"] = or_null(r.created_at);
  o["started_at"] = or_null(r.started_at);
  o["finished_at"] = or_null(r.finished_at);
  std::int64_t attempts = 0;
  std::from_chars(r.attempts.data(), r.attempts.data() + r.attempts.size(), attempts);
  o["attempts"] = attempts;
  if (r.error_code.empty())
    o["error"] = nullptr;
  else
    o["error"] = json::object{{"code", r.error_code}, {"message", r.error_message}};
  o["result_url"] = r.status == "completed"
                        ? json::value("/jobs/" + r.service_type + "/" + r.id + "/result")
                        : nullptr;
  std::int64_t size = 0;
  std::from_chars(r.input_size.data(), r.input_size.data() + r.input_size.size(), size);
  o["input"] = json::object{{"filename", or_null(r.input_filename)},
                            {"content_type", or_null(r.input_content_type)},
                            {"size", size}};
  o["priority"] = r.priority == "1";
  o["cancel_requested"] = r.cancel_requested == "1";
  o["callback_url"] = or_null(r.callback_url);
  if (!r.webhook_status.empty()) {
    json::object w{{"status", r.webhook_status}};
    std::int64_t n = 0;
    std::from_chars(r.webhook_attempts.data(),
                    r.webhook_attempts.data() + r.webhook_attempts.size(), n);
    w["attempts"] = n;
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
