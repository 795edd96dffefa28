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
};

// Runs one Redis step for a request through redis::with_retry (a restarting, loading or
// failing-over Redis is waited for up to redis.retry_timeout; then the request gets 503).
// The JobStore is made per attempt: a retry may replace the connection under it.
template <typename F>
auto Api::step(Context& ctx, F&& f, const std::function<void(int)>& on_retry) {
  return redis::with_retry(
      ctx.conn, cfg_.redis_retry_timeout, stop_.get_token(),
      [&](redis::Connection& c) {
        redis::JobStore store(c, keys_);
        return f(store, c);
      },
      on_retry);
}

}  // namespace relay::gateway
