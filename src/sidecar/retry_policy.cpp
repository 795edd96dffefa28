#include "sidecar/retry_policy.hpp"

#include <algorithm>
#include <boost/json.hpp>

#include "common/time.hpp"

namespace relay::sidecar {

namespace json = boost::json;

namespace {
json::array failures_of(const JobRecord& job) {
  if (job.failures.empty()) return {};
  boost::system::error_code ec;
  auto v = json::parse(job.failures, ec);
  return !ec && v.is_array() ? v.as_array() : json::array();
}
}  // namespace

bool retryable(const JobResult& r) {
  if (r.disposition != Disposition::failed) return false;
  if (r.error_code == "inference_unreachable" || r.error_code == "inference_timeout" ||
      r.error_code == "input_fetch_failed" || r.storage_unavailable)
    return true;
  return r.error_code == "inference_failed" && (r.http_status >= 500 || r.http_status == 429);
}

std::int64_t attempt_of(const JobRecord& job) {
  return static_cast<std::int64_t>(failures_of(job).size()) + 1;
}

std::optional<std::chrono::milliseconds> retry_delay(const JobRecord& job, const JobResult& r,
                                                     double jitter01) {
  using std::chrono::milliseconds;
  const std::int64_t attempt = attempt_of(job);
  if (!retryable(r) || attempt >= job.max_attempts.value_or(1)) return std::nullopt;
  const milliseconds base = job.retry_backoff.value_or(milliseconds(1000));
  const milliseconds cap = std::max(base, job.retry_max_backoff.value_or(milliseconds(60'000)));
  // Doubling, without overflow: past the cap it is the cap.
  milliseconds delay = base;
  for (std::int64_t i = 1; i < attempt && delay < cap; ++i) delay *= 2;
  delay = std::min(delay, cap);
  delay = delay / 2 + milliseconds(static_cast<std::int64_t>(
                          std::clamp(jitter01, 0.0, 1.0) * static_cast<double>(delay.count() / 2)));
  if (r.retry_after) delay = std::max(delay, std::min(*r.retry_after, milliseconds(3'600'000)));
  return delay;
}

std::string failures_with(const JobRecord& job, const JobResult& r, WallTime at) {
  json::array all = failures_of(job);
  all.push_back(json::object{{"attempt", attempt_of(job)},
                             {"code", r.error_code},
                             {"message", r.error_message.substr(0, 512)},
                             {"at", format_rfc3339(at)}});
  return json::serialize(all);
}

}  // namespace relay::sidecar
