#include "redis/completion.hpp"

#include <boost/json.hpp>

#include "common/time.hpp"

namespace relay::redis {

namespace json = boost::json;

namespace {
constexpr std::size_t kMaxErrorMessage = 2048;
}

Fields Completion::fields() const {
  JobRecord r;  // only the transition's fields are set: to_fields leaves the rest out
  r.status = status;
  r.finished_at = finished_at;
  r.timings = timings;
  r.failures = failures;
  if (status == JobStatus::completed) {
    r.result_key = result_key;
    r.result_content_type = result_content_type;
  }
  if (status == JobStatus::failed) {
    r.error_code = error_code;
    r.error_message = error_message.substr(0, kMaxErrorMessage);
  }
  Fields out;
  for (auto& [k, v] : r.to_fields())
    // A partial record: what to_fields writes for every record (sizes, counts) is not ours.
    if (k != field::input_size && k != field::attempts)
      out.emplace_back(std::move(k), std::move(v));
  return out;
}

std::string Completion::payload() const {
  json::object o{{"job_id", job_id},
                 {"status", to_string(status)},
                 {"model", model},
                 {"service_type", service_type},
                 {"finished_at", format_rfc3339(finished_at)}};
  if (status == JobStatus::completed) o["result_key"] = result_key;
  if (status == JobStatus::failed) o["error_code"] = error_code;
  return json::serialize(o);
}

std::optional<Completion> Completion::from_payload(std::string_view text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const auto& o = v.as_object();
  auto str = [&](const char* k) -> std::optional<std::string> {
    auto it = o.find(k);
    if (it == o.end() || !it->value().is_string()) return std::nullopt;
    return std::string(it->value().as_string());
  };
  Completion c;
  auto id = str("job_id"), status = str("status"), at = str("finished_at");
  if (!id || !status || !at) return std::nullopt;
  auto st = parse_status(*status);
  auto when = parse_rfc3339(*at);
  if (!st || !is_terminal(*st) || !when) return std::nullopt;
  c.job_id = *id;
  c.status = *st;
  c.finished_at = *when;
  c.model = str("model").value_or("");
  c.service_type = str("service_type").value_or("");
  c.result_key = str("result_key").value_or("");
  c.error_code = str("error_code").value_or("");
  return c;
}

}  // namespace relay::redis
