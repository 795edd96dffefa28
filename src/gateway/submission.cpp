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
  else if (name == "webhook_events")
    webhook_events = std::move(value);
  else if (name == "input_url")
    input_url = std::move(value);
  else
    return false;
  return true;
}

std::size_t max_field_size(std::string_view name) {
  if (name == "operation") return 256;
  if (name == "callback_url" || name == "input_url") return 4096;
  if (name == "params") return 64 * 1024;
  if (name == "ttl" || name == "timeout" || name == "max_attempts" || name == "webhook_events")
    return 64;
  return 0;
}

namespace {

constexpr std::string_view kWebhookEvents[] = {"terminal", "started", "progress"};

// The names in a comma-separated list (spaces around them allowed); nullopt when one is not an
// event or the list is empty.
std::optional<std::vector<std::string_view>> webhook_event_names(std::string_view text) {
  std::vector<std::string_view> out;
  while (true) {
    const auto comma = text.find(',');
    std::string_view name = text.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (std::find(std::begin(kWebhookEvents), std::end(kWebhookEvents), name) ==
        std::end(kWebhookEvents))
      return std::nullopt;
    out.push_back(name);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

namespace {

// Why an input URL may not be used, or nullopt.
std::optional<Refusal> check_input_url(const std::string& url, const SubmissionRules& rules) {
  auto refuse = [](std::string code, std::string why) {
    return Refusal{400, std::move(code), std::move(why)};
  };
  if (url.size() > 2048) return refuse("invalid_input_url", "input_url is too long");
  const bool s3 = url.starts_with("s3://"), https = url.starts_with("https://");
  if (!s3 && !https)
    return refuse("invalid_input_url", "input_url must be s3://bucket/key or https://...");
  if (s3) {
    const auto slash = url.find('/', 5);
    if (slash == std::string::npos || slash == 5 || slash + 1 == url.size())
      return refuse("invalid_input_url", "input_url must be s3://bucket/key");
  }
  // Dot segments would be squashed on the way (by curl, or the server), past a prefix check.
  std::string path = url.substr(0, url.find_first_of("?#"));
  std::string lower;
  for (char c : path) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* dots : {"/../", "/./", "%2e", "\\"})
    if (lower.find(dots) != std::string::npos)
      return refuse("invalid_input_url", "input_url may not contain dot segments");
  if (lower.ends_with("/..") || lower.ends_with("/."))
    return refuse("invalid_input_url", "input_url may not contain dot segments");
  if (rules.input_urls.empty())
    return refuse("input_url_not_allowed", "service type '" + rules.service_type +
                                               "' takes no inputs by reference (service_types." +
                                               rules.service_type + ".input_urls)");
  const bool allowed =
      std::any_of(rules.input_urls.begin(), rules.input_urls.end(),
                  [&](const std::string& prefix) { return url.starts_with(prefix); });
  if (!allowed)
    return refuse("input_url_not_allowed", "input_url is not under a prefix service type '" +
                                               rules.service_type + "' allows");
  if (https && rules.check_input_host)
    if (auto why = rules.check_input_host(url))
      return why->transient ? Refusal{503, "input_url_unresolved", why->reason}
                            : refuse("input_url_not_allowed", why->reason);
  return std::nullopt;
}

}  // namespace

std::string normalized_webhook_events(const std::string& text) {
  auto names = webhook_event_names(text);
  if (!names) return {};
  std::string out;
  for (auto known : kWebhookEvents)
    if (std::find(names->begin(), names->end(), known) != names->end())
      out += (out.empty() ? "" : ",") + std::string(known);
  return out == "terminal" ? std::string() : out;
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
  if (!s.input_url.empty())
    if (auto bad = check_input_url(s.input_url, rules)) return bad;
  if (!s.webhook_events.empty()) {
    if (!webhook_event_names(s.webhook_events))
      return Refusal{400, "invalid_webhook_events",
                     "webhook_events is a comma-separated list of terminal, started and progress"};
    if (s.callback_url.empty())
      return Refusal{400, "invalid_webhook_events", "webhook_events needs a callback_url"};
  }
  if (!s.callback_url.empty()) {
    if (!rules.webhooks_configured)
      return Refusal{400, "webhooks_not_configured",
                     "this gateway has no webhooks.secret: callbacks cannot be signed"};
    if (s.callback_url.size() > 2048)
      return Refusal{400, "invalid_callback_url", "callback_url is too long"};
    if (rules.check_callback)
      if (auto why = rules.check_callback(s.callback_url))
        return why->transient ? Refusal{503, "callback_url_unresolved", why->reason}
                              : Refusal{400, "invalid_callback_url", why->reason};
  }
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> deadline_option(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parse_duration(text);
}

}  // namespace relay::gateway
