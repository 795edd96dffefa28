#pragma once
// What a submission asks for, apart from its input: the options a client may set (query
// parameters of a raw-body submission, form fields of a multipart one) and the rules they must
// meet. Pure functions: the API calls them, tests call them without a server.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/destination.hpp"

namespace relay::gateway {

struct Submission {
  std::string operation, callback_url, params, filename, content_type;
  std::string ttl, timeout;  // deadlines, as durations ("90", "90s", "15m", "2h")
  std::string max_attempts;  // retries: attempts in all, 1 to 10
  // Which events get webhooks: comma-separated "terminal", "started", "progress" (default:
  // terminal). Needs a callback_url.
  std::string webhook_events;
  // An input by reference instead of an uploaded one: s3://bucket/key or https://...
  std::string input_url;
  // Sets a named option; false when the name is not one (unknown options are ignored).
  bool set(std::string_view name, std::string value);
};

// The most a form field may hold (a larger one is malformed input); 0 for "file" and for names
// that are not options (these are read through and dropped, up to kMaxIgnoredField).
std::size_t max_field_size(std::string_view name);
inline constexpr std::size_t kMaxIgnoredField = 64 * 1024;

// A request refused before its job exists: the HTTP status and the API's error code.
struct Refusal {
  unsigned status;
  std::string code, message;
};

struct SubmissionRules {
  std::string service_type;
  std::vector<std::string> operations;  // empty: any
  bool webhooks_configured = false;     // webhooks.secret is set
  // Why a callback URL is refused (scheme, resolution to a private address; 400), or cannot be
  // checked now (its host does not resolve in time; 503); nullopt: fine.
  using DestinationCheck =
      std::function<std::optional<http::DestinationProblem>(const std::string& url)>;
  DestinationCheck check_callback;
  // Inputs by reference: the URL prefixes the service type allows (none: not offered), and why
  // an https:// URL's host is refused (as check_callback).
  std::vector<std::string> input_urls;
  DestinationCheck check_input_host;
};

std::optional<Refusal> validate(const Submission& s, const SubmissionRules& rules);

// webhook_events as the record stores it: the known names in a fixed order, no repeats; empty
// for the default (terminal only). Call after validate().
std::string normalized_webhook_events(const std::string& text);

// A deadline option as a duration; nullopt when not given. Call after validate().
std::optional<std::chrono::milliseconds> deadline_option(const std::string& text);
// The longest ttl and timeout a submission may ask for.
inline constexpr std::chrono::hours kMaxDeadline{24 * 30};

}  // namespace relay::gateway
