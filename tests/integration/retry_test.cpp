// Retries of failed jobs end to end (opt-in, per submission or service type): a failure the model
// may get over is tried again after a backoff, the job waiting outside pending; every failed
// attempt is recorded; the terminal transition — and so the webhook — happens once.

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

json::array failures_of(const json::object& job) {
  auto it = job.find("failures");
  return it != job.end() && it->value().is_array() ? it->value().as_array() : json::array();
}

size_t predicts(const InferenceServer& inference) {
  size_t n = 0;
  const std::string text = inference.events();
  for (size_t at = text.find("request /predict"); at != std::string::npos;
       at = text.find("request /predict", at + 1))
    ++n;
  return n;
}

// 503, 503, then 200: completed on the third attempt, two failures recorded, one terminal event.
TEST_F(GatewayTest, AModelThatRecoversCompletesOnALaterAttempt) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "100ms"}});
  InferenceServer inference({.status = 503, .fail_first = 2});
  const std::string id = str(parse(submit("input", {}, {{"max_attempts", "3"}})), "id");
  EXPECT_EQ(job(id).at("max_attempts").as_int64(), 3);
  auto relay = start_relay(inference, {{"RELAY_QUEUE_POP_TIMEOUT", "8s"}}, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 30s))
      << relay->log();
  auto j = job(id);
  auto failures = failures_of(j);
  ASSERT_EQ(failures.size(), 2u) << j;
  EXPECT_EQ(failures[0].at("attempt").as_int64(), 1);
  EXPECT_EQ(failures[1].at("attempt").as_int64(), 2);
  EXPECT_EQ(failures[0].at("code").as_string(), "inference_failed");
  EXPECT_NE(std::string(failures[0].at("message").as_string()).find("503"), std::string::npos);
  EXPECT_TRUE(j.at("retry_at").is_null());
  EXPECT_EQ(predicts(inference), 3u);
  EXPECT_EQ(redis::as_integer(conn_.command({"ZCARD", keys_.retries("m1")}).get()), 0);
  // One terminal transition: one event, so one webhook.
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events("m1")}).get()), 1);
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait_exit(20s), 0);
}

// Storage that stays unavailable through the retries of the upload (the S3 client's three tries
// of each of the relay's four: twelve 503s) fails the attempt, not the job: a later attempt
// stores the result. (A missing object would
// not be retried: RetryPolicy.OnlyFailuresThatMayPassAreRetried.)
TEST_F(GatewayTest, AnAttemptThatCouldNotReachStorageIsRetried) {
  S3Server s3({}, {"--fail-puts", "12", "--fail-match", "result.json"});
  Env env = s3.env();
  env["RELAY_GC_EXPIRE_INTERVAL"] = "100ms";
  start_gateway(env);
  InferenceServer inference;
  const std::string id = str(parse(submit("input", {}, {{"max_attempts", "2"}})), "id");
  env["RELAY_RELAY_STORAGE_RETRY_TIMEOUT"] = "1ms";  // (the four tries only, not an outage's wait)
  env["RELAY_QUEUE_POP_TIMEOUT"] = "8s";
  auto relay = start_relay(inference, env, {"--max-jobs", "0"});
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 40s))
      << relay->log() << s3.log();
  auto failures = failures_of(job(id));
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].at("code").as_string(), "upload_failed");
  EXPECT_NE(std::string(failures[0].at("message").as_string()).find("503"), std::string::npos);
  EXPECT_EQ(predicts(inference), 2u);
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: 503 for PUT"), 12u);
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait_exit(20s), 0);
}

// A 4xx says the request is wrong: trying again cannot help. One attempt, failed, recorded.
TEST_F(GatewayTest, AModelsBadRequestIsNotRetried) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "100ms"}});
  InferenceServer inference({.status = 400});
  const std::string id = str(parse(submit("input", {}, {{"max_attempts", "3"}})), "id");
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "failed");
  EXPECT_EQ(failures_of(j).size(), 1u) << "the final failure is recorded with the rest";
  EXPECT_EQ(predicts(inference), 1u);
}

// A job waiting for its retry is in neither pending (the scaler does not count it) nor
// processing; a cancel ends it at once, and it never comes back.
TEST_F(GatewayTest, AJobWaitingForItsRetryIsOutOfTheQueueAndCancellable) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "100ms"}});
  InferenceServer inference({.status = 503, .fail_first = 1000, .retry_after = "60"});
  const std::string id = str(parse(submit("input", {}, {{"max_attempts", "5"}})), "id");
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "pending");
  ASSERT_TRUE(j.at("retry_at").is_string()) << j;
  const auto due = parse_rfc3339(str(j, "retry_at"));
  ASSERT_TRUE(due);
  EXPECT_GT(*due - wall_now(), std::chrono::seconds(50)) << "the model's Retry-After: 60";
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
  EXPECT_TRUE(list(keys_.processing("m1")).empty());
  EXPECT_EQ(redis::as_integer(conn_.command({"ZCARD", keys_.retries("m1")}).get()), 1);
  auto r = http("DELETE", url("/jobs/echo/" + id));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(str(job(id), "status"), "cancelled");
  EXPECT_EQ(redis::as_integer(conn_.command({"ZCARD", keys_.retries("m1")}).get()), 0);
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events("m1")}).get()), 1);
}

// A relay killed during a retry: the crash is reaped as ever (it is not a failure: it uses no
// attempt), and another relay finishes the job, the first attempt's failure still on record.
TEST_F(GatewayTest, ARelayKilledMidRetryIsReapedAndTheJobStillFinishes) {
  start_gateway({{"RELAY_GC_EXPIRE_INTERVAL", "100ms"}});
  const std::string id = str(parse(submit("input", {}, {{"max_attempts", "3"}})), "id");
  {
    InferenceServer failing({.status = 503});
    auto relay = start_relay(failing);
    ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  }
  ASSERT_EQ(failures_of(job(id)).size(), 1u);
  {
    // The retry comes back within the backoff (0.5 to 1 s); a model that hangs takes it.
    InferenceServer hanging({.delay_ms = 30'000});
    auto doomed = start_relay(hanging, {{"RELAY_LEASE_TTL", "600ms"}});
    ASSERT_TRUE(wait_until([&] { return hanging.saw("request /predict"); }, 20s));
    doomed->signal(SIGKILL);
    doomed->wait_exit(5s);
  }
  ASSERT_TRUE(
      wait_until([&] { return list(keys_.pending("m1")) == std::vector<std::string>{id}; }, 20s))
      << gateway_->log();
  InferenceServer healthy;
  auto last = start_relay(healthy);
  ASSERT_EQ(last->wait_exit(20s), 0) << last->log();
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "completed");
  EXPECT_EQ(j.at("attempts").as_int64(), 1) << "the crash, counted by the reaper";
  EXPECT_EQ(failures_of(j).size(), 1u) << "the crash is not a failure";
  EXPECT_EQ(redis::as_integer(conn_.command({"XLEN", keys_.events("m1")}).get()), 1);
}

TEST_F(GatewayTest, MaxAttemptsIsBounded) {
  start_gateway();
  for (const char* bad : {"0", "11", "three", "-1"}) {
    auto r = submit("x", {}, {{"max_attempts", bad}});
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(error_code(r), "invalid_max_attempts");
  }
  EXPECT_TRUE(list(keys_.pending("m1")).empty());
}

}  // namespace
}  // namespace relay::testing
