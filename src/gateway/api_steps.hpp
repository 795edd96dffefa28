#pragma once
// Shared by the API's translation units (api.cpp, submit.cpp): a request's Redis context and
// how one Redis step of it runs.

#include "gateway/api.hpp"
#include "redis/job_store.hpp"
#include "redis/retry.hpp"

namespace relay::gateway {

struct Api::Context {
  redis::LazyConnection& conn;
  std::string tenant;
  // A step tried first in a group commit that failed: when it went there (its wait counts).
  std::chrono::steady_clock::time_point since{};
};

// Runs one Redis step for a request through redis::with_retry (a restarting, loading or
// failing-over Redis is waited for up to redis.retry_timeout; then the request gets 503).
// The JobStore is made per attempt: a retry may replace the connection under it.
template <typename F>
auto Api::step(Context& ctx, F&& f, const std::function<void(int)>& on_retry) {
  auto patience = cfg_.redis_retry_timeout;
  if (ctx.since != std::chrono::steady_clock::time_point{})  // (past it: one try)
    patience -= std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - ctx.since);
  return redis::with_retry(
      ctx.conn, patience, stop_.get_token(),
      [&](redis::Connection& c) {
        redis::JobStore store(c, keys_);
        return f(store, c);
      },
      on_retry);
}

}  // namespace relay::gateway
