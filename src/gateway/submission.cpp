#include "gateway/submission.hpp"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <charconv>

#include "common/time.hpp"

namespace relay::gateway {

bool Submission::set(std::string_view name, std::string value) {
  if (name == "operation")
    operation = std::move(value);
  else if (name == "callback_url")
    callback_url = std::move(value);
  else if (name == "params")
    params = std::move(value);
  else if (name == "filename")
    filename = std::move(value);
  else if (name == "ttl")
    ttl = std::move(value);
  else if (name == "timeout")
    timeout = std::move(value);
  else if (name == "max_attempts")
    max_attempts = std::move(value);
  else
    return false;
  return true;
}

std::size_t max_field_size(std::string_view name) {
  if (name == "operation") return 256;
  if (name == "callback_url") return 4096;
  if (name == "params") return 64 * 1024;
  if (name == "ttl" || name == "timeout" || name == "max_attempts") return 64;
  return 0;
}

std::optional<Refusal> validate(const Submission& s, const SubmissionRules& rules) {
  if (s.operation.size() > 128) return Refusal{400, "invalid_operation", "operation is too long"};
  if (!s.operation.empty() && !rules.operations.empty() &&
      std::find(rules.operations.begin(), rules.operations.end(), s.operation) ==
          rules.operations.end())
    return Refusal{
        400, "invalid_operation",
        "operation '" + s.operation + "' is not offered by '" + rules.service_type + "'"};
  if (!s.params.empty()) {
    boost::system::error_code ec;
    auto v = boost::json::parse(s.params, ec);
    if (ec || !v.is_object()) return Refusal{400, "invalid_params", "params must be a JSON object"};
  }
  for (const auto& [name, text] : {std::pair{"ttl", &s.ttl}, std::pair{"timeout", &s.timeout}}) {
    if (text->empty()) continue;
    auto d = parse_duration(*text);
    if (!d || d->count() <= 0 || *d > kMaxDeadline)
      return Refusal{400, std::string("invalid_") + name,
                     std::string(name) +
                         " must be a positive duration of at most 30 days (\"90\" seconds, "
                         "\"90s\", \"15m\", \"2h\")"};
  }
  if (!s.max_attempts.empty()) {
    int n = 0;
    auto [p, ec] =
        std::from_chars(s.max_attempts.data(), s.max_attempts.data() + s.max_attempts.size(), n);
    if (ec != std::errc() || p != s.max_attempts.data() + s.max_attempts.size() || n < 1 || n > 10)
      return Refusal{400, "invalid_max_attempts",
                     "max_attempts must be a whole number from 1 to 10"};
  }
  if (!s.callback_url.empty()) {
    if (!rules.webhooks_configured)
      return Refusal{400, "webhooks_not_configured",
                     "this gateway has no webhooks.secret: callbacks cannot be signed"};
    if (s.callback_url.size() > 2048)
      return Refusal{400, "invalid_callback_url", "callback_url is too long"};
    if (rules.check_callback)
      if (auto why = rules.check_callback(s.callback_url))
        return Refusal{400, "invalid_callback_url", *why};
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> deadline_option(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parse_duration(text);
}

}  // namespace relay::gateway
