#pragma once
// Per-tenant quotas (quotas.* in the gateway's config) and the answer of admitting a submission
// under them.

#include <chrono>
#include <cstdint>

namespace relay::redis {

// A tenant's quotas (0: no limit); see lua/admit.lua.
struct Quota {
  std::int64_t max_pending = 0, submits_per_minute = 0, submit_burst = 0;
  bool any() const { return max_pending > 0 || submits_per_minute > 0; }
};
struct Admission {
  enum class Outcome { ok, max_pending, rate } outcome = Outcome::ok;
  std::chrono::milliseconds retry_after{0};  // rate: when a token is back
};

}  // namespace relay::redis
