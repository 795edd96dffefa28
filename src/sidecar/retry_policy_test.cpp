#include "sidecar/retry_policy.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "common/time.hpp"

namespace relay::sidecar {
namespace {

using std::chrono::milliseconds;

JobResult failure(std::string code, long status = 0) {
  JobResult r;
  r.disposition = Disposition::failed;
  r.error_code = std::move(code);
  r.error_message = "boom";
  r.http_status = status;
  return r;
}

JobRecord job(std::int64_t max_attempts, int failures_so_far = 0) {
  JobRecord j;
  j.max_attempts = max_attempts;
  j.retry_backoff = milliseconds(1000);
  j.retry_max_backoff = milliseconds(5000);
  for (int i = 0; i < failures_so_far; ++i)
    j.failures = failures_with(j, failure("inference_failed", 503), wall_now());
  return j;
}

TEST(RetryPolicy, OnlyFailuresThatMayPassAreRetried) {
  EXPECT_TRUE(retryable(failure("inference_failed", 503)));
  EXPECT_TRUE(retryable(failure("inference_failed", 500)));
  EXPECT_TRUE(retryable(failure("inference_failed", 429)));
  EXPECT_TRUE(retryable(failure("inference_unreachable")));
  EXPECT_TRUE(retryable(failure("inference_timeout")));
  EXPECT_FALSE(retryable(failure("inference_failed", 400)));
  EXPECT_FALSE(retryable(failure("inference_failed", 422)));
  for (const char* never : {"timed_out", "expired", "download_failed", "invalid_job",
                            "unknown_operation", "decryption_failed"})
    EXPECT_FALSE(retryable(failure(never))) << never;
  // Storage that was unreachable (or 5xx, or kept dropping) may be back for a later attempt; a
  // missing or forbidden object will not.
  for (const char* storage : {"download_failed", "upload_failed"}) {
    JobResult blip = failure(storage);
    blip.storage_unavailable = true;
    EXPECT_TRUE(retryable(blip)) << storage;
    EXPECT_FALSE(retryable(failure(storage))) << storage;
  }
  JobResult cancelled = failure("inference_failed", 503);
  cancelled.disposition = Disposition::cancelled;
  EXPECT_FALSE(retryable(cancelled));
}

TEST(RetryPolicy, AttemptsAreCountedFromTheRecordedFailures) {
  EXPECT_EQ(attempt_of(job(3)), 1);
  EXPECT_EQ(attempt_of(job(3, 2)), 3);
  const auto f = boost::json::parse(job(3, 2).failures).as_array();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].at("attempt").as_int64(), 1);
  EXPECT_EQ(f[1].at("attempt").as_int64(), 2);
  EXPECT_EQ(f[1].at("code").as_string(), "inference_failed");
}

TEST(RetryPolicy, BackoffDoublesWithEqualJitterUpToTheCap) {
  const auto r = failure("inference_failed", 503);
  EXPECT_EQ(retry_delay(job(10, 0), r, 0.0), milliseconds(500));  // attempt 1: 1 s, half fixed
  EXPECT_EQ(retry_delay(job(10, 0), r, 0.999), milliseconds(999));
  EXPECT_EQ(retry_delay(job(10, 1), r, 0.0), milliseconds(1000));  // attempt 2: 2 s
  EXPECT_EQ(retry_delay(job(10, 2), r, 0.0), milliseconds(2000));  // attempt 3: 4 s
  EXPECT_EQ(retry_delay(job(10, 5), r, 0.0), milliseconds(2500));  // capped at 5 s
  EXPECT_EQ(retry_delay(job(10, 5), r, 1.0), milliseconds(5000));
}

TEST(RetryPolicy, NoRetryWithoutAttemptsLeftOrOptIn) {
  const auto r = failure("inference_failed", 503);
  EXPECT_FALSE(retry_delay(job(3, 2), r, 0.5)) << "the third attempt was the last";
  EXPECT_TRUE(retry_delay(job(3, 1), r, 0.5));
  EXPECT_FALSE(retry_delay(JobRecord{}, r, 0.5)) << "no max_attempts: the seed's rule";
  EXPECT_FALSE(retry_delay(job(3), failure("inference_failed", 400), 0.5));
}

TEST(RetryPolicy, TheModelsRetryAfterIsHonoured) {
  auto r = failure("inference_failed", 503);
  r.retry_after = milliseconds(30'000);
  EXPECT_EQ(retry_delay(job(3), r, 0.0), milliseconds(30'000)) << "longer than the backoff";
  r.retry_after = milliseconds(10);
  EXPECT_EQ(retry_delay(job(3), r, 0.0), milliseconds(500)) << "shorter: the backoff stands";
  r.retry_after = milliseconds(86'400'000);
  EXPECT_EQ(retry_delay(job(3), r, 0.0), milliseconds(3'600'000)) << "at most an hour";
}

}  // namespace
}  // namespace relay::sidecar
