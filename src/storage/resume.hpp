#pragma once
// The loop both resuming readers share (ResumingSource: a stored object; the https input's
// reader): a step tried again after a failure a retry may fix (ErrorKind::unavailable: a
// connection reset, an origin unreachable or answering 5xx), with backoff, up to `attempts`
// failures in a row — a read that got bytes starts the count again, since each call is one step.

#include <stop_token>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "storage/storage.hpp"

namespace relay::storage {

// step() again while it fails unavailable, resumable() holds and fewer than `attempts` failed
// in a row; before each retry, retrying(the error) drops what failed (and may say so).
template <class Step, class Resumable, class Retrying>
auto resume_after_failures(Step&& step, int attempts, Backoff& backoff, const std::stop_token& stop,
                           Resumable&& resumable, Retrying&& retrying) -> decltype(step()) {
  for (int failures = 0;;) {
    try {
      return step();
    } catch (const StorageError& e) {
      if (e.kind() != ErrorKind::unavailable || !resumable() || ++failures >= attempts) throw;
      retrying(e);
      if (!sleep_unless_stopped(backoff.next(), stop)) throw Aborted();
    }
  }
}

}  // namespace relay::storage
