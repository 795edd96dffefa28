#pragma once
// The loop the resuming readers share (ResumingSource: a stored object; the https input's
// reader), and the relay's upload of a result from its spool: a step tried again after a
// failure a retry may fix (ErrorKind::unavailable: a connection reset, an origin unreachable or
// answering 5xx), with backoff, up to `attempts`
// failures in a row — a read that got bytes starts the count again, since each call is one step.
// With a patience besides, failures in a row go on being retried until that long has passed
// since the step began: the relay waits out a storage outage (a store restarting) this way
// instead of failing the job it holds. With a limit, never past that long: a client's download
// from a store gone silent, each try waiting out storage.s3_timeout, is not held for five.

#include <chrono>
#include <stop_token>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "storage/storage.hpp"

namespace relay::storage {

// How long failures in a row are retried, counted from when the step began: `attempts` of them,
// or for `patience` if that is longer — but never past `limit` (0: none).
struct Persistence {
  int attempts = 5;
  std::chrono::milliseconds patience{0};
  std::chrono::milliseconds limit{0};
};

// step() again while it fails unavailable, resumable() holds and `persist` allows; before each
// retry, retrying(the error, failures in a row so far) drops what failed (and may say so).
template <class Step, class Resumable, class Retrying>
auto resume_after_failures(Step&& step, Persistence persist, Backoff& backoff,
                           const std::stop_token& stop, Resumable&& resumable, Retrying&& retrying)
    -> decltype(step()) {
  const auto began = std::chrono::steady_clock::now();
  for (int failures = 0;;) {
    try {
      return step();
    } catch (const StorageError& e) {
      if (e.kind() != ErrorKind::unavailable || !resumable()) throw;
      const auto spent = std::chrono::steady_clock::now() - began;
      ++failures;
      if (failures >= persist.attempts && spent >= persist.patience) throw;
      if (persist.limit.count() > 0 && spent >= persist.limit) throw;
      retrying(e, failures);
      if (!sleep_unless_stopped(backoff.next(), stop)) throw Aborted();
    }
  }
}

}  // namespace relay::storage
