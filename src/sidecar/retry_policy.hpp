#pragma once
// Retries of failed jobs (opt-in per service type or submission): whether a failed attempt is
// tried again, and when. Pure: the relay asks, tests call it without a server.
//
// Retried: the model unreachable or timing out, and its 5xx and 429 answers — failures that may
// pass. Never: its other 4xx answers, bad input, a cancel, the job's own timeout or deadline.

#include <chrono>
#include <optional>
#include <string>

#include "redis/job_record.hpp"
#include "sidecar/job_runner.hpp"

namespace relay::sidecar {

bool retryable(const JobResult& r);
// This run's attempt number: the failures recorded so far, plus one.
std::int64_t attempt_of(const JobRecord& job);
// How long until the retry, when this failure is retried (attempts left, retryable): doubling
// from the job's retry_backoff per attempt, up to retry_max_backoff, with equal jitter (jitter01
// in [0, 1): half the delay is fixed, half random); the model's Retry-After, when longer, wins
// (up to an hour).
std::optional<std::chrono::milliseconds> retry_delay(const JobRecord& job, const JobResult& r,
                                                     double jitter01);
// The job's failures with this one appended: [{attempt, code, message, at}] (JSON).
std::string failures_with(const JobRecord& job, const JobResult& r, WallTime at);

}  // namespace relay::sidecar
