#pragma once
// The one retry rule for Redis steps. A step that fails because Redis is restarting, loading,
// busy or failing over (TransientError), or because the connection broke (IoError), is run
// again with jittered backoff until it succeeds, `max_wait` passes (the last error is rethrown)
// or stop is requested (relay::Aborted). After an I/O error the connection is replaced; after a
// transient reply it is kept (it works; Redis said "not now") — unless the server stopped being
// the master (READONLY, MASTERDOWN, UNBLOCKED): then a new connection finds the new one.
//
// A step retried after an I/O error may already have run: the reply, not the command, was lost.
// So only steps that are safe to repeat go through here — reads, and the Lua steps whose
// repetition is harmless by design (fenced by the lease token, refusing an existing job id,
// no-ops on terminal jobs). `on_retry(attempt)` lets a caller note that an earlier attempt may
// have run (the gateway's submit reads "id exists" then as its own success).
// `patient(error)`, when given, is asked about each transient error: a duration retries it past
// max_wait, waiting at most that long before the next try (a relay's outcome refused while
// Redis is out of memory, its lease kept by each call meanwhile); nullopt: as any other. Those
// retries are logged once a minute, not each time.
// Each try waits for Redis — to connect, for each reply — no longer than half of what max_wait
// has left (at least kLeastReadWait; ReadWithin): a Redis that stops answering without closing
// the connection (a frozen process, a network dropping packets, a master gone without a word)
// ends the step about when its caller gives up — a gateway request's 503 comes after
// redis.retry_timeout, not after kReadTimeout (30 s) — and a new connection is tried within it
// (after a failover, the new master).

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <stop_token>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "common/log.hpp"
#include "redis/connection.hpp"

namespace relay::redis {

// What one try waits for Redis with `left` of its window: half of it, in whole seconds (a
// connection whose timeout is that already is not told again: no system call), at least
// kLeastReadWait, at most kReadTimeout.
inline std::chrono::milliseconds try_wait(std::chrono::milliseconds left) {
  return std::clamp<std::chrono::milliseconds>(std::chrono::ceil<std::chrono::seconds>(left / 2),
                                               kLeastReadWait, kReadTimeout);
}

template <typename F>
auto with_retry(
    LazyConnection& conn, std::chrono::milliseconds max_wait, std::stop_token stop, F&& step,
    const std::function<void(int attempt)>& on_retry = {},
    const std::function<std::optional<std::chrono::milliseconds>(const TransientError&)>& patient =
        {}) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + max_wait;
  Backoff backoff;
  std::optional<clock::time_point> logged;
  for (int attempt = 1;; ++attempt) {
    try {
      if (attempt > 1 && on_retry) on_retry(attempt);
      const auto within =
          try_wait(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()));
      auto& c = conn.get(within);
      ReadWithin bounded(c, within);
      return step(c);
    } catch (const TransientError& e) {
      // A demoted master (READONLY...) stays a replica: reconnect (sentinel mode re-resolves).
      if (e.new_connection()) conn.reset();
      auto delay = backoff.next();
      const auto waits_on = patient ? patient(e) : std::nullopt;
      if (waits_on) delay = std::min(delay, *waits_on);
      if (!waits_on && clock::now() + delay > deadline) throw;
      if (!waits_on || !logged || clock::now() - *logged >= std::chrono::minutes(1)) {
        log::warn("redis not ready, retrying",
                  {{"error", e.what()}, {"retry_in_ms", delay.count()}});
        logged = clock::now();
      }
      if (!sleep_unless_stopped(delay, stop)) throw Aborted();
    } catch (const IoError& e) {
      conn.reset();
      auto delay = backoff.next();
      if (clock::now() + delay > deadline) throw;
      log::warn("redis unavailable, retrying",
                {{"error", e.what()}, {"retry_in_ms", delay.count()}});
      if (!sleep_unless_stopped(delay, stop)) throw Aborted();
    }
  }
}

}  // namespace relay::redis
