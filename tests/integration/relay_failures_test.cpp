// The relay end to end, when things go wrong: failing models and storage, cancels, lost leases,
// real signals (SIGTERM, SIGKILL), Redis restarts, bad configuration.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>

#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

TEST_F(RelayTest, WrongS3SecretIsRejectedAndTheJobFails) {
  S3Server s3;
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  auto id = submit(*st, "data");
  env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "download_failed");
  EXPECT_NE(rec.error_message.find("SignatureDoesNotMatch"), std::string::npos)
      << rec.error_message;
  EXPECT_TRUE(inference.events().empty());
}

TEST_F(RelayTest, UnhealthyInferenceExitsNonZeroAfterTheDeadline) {
  InferenceServer inference({.health_status = 503});
  auto env = base_env(inference);
  env["RELAY_RELAY_HEALTH_TIMEOUT"] = "1s";
  auto st = storage_for(env);
  auto id = submit(*st, "never processed");
  auto relay = start_relay(env);
  auto code = relay->wait_exit(10s);
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(relay->log().find("not healthy before relay.health_timeout"), std::string::npos);
  // Nothing was dequeued while the model was not ready.
  EXPECT_EQ(list(keys_.pending(model_)), std::vector<std::string>{id});
  EXPECT_EQ(status(id), "pending");
}

TEST_F(RelayTest, InferenceErrorFailsTheJobWithStatusAndBody) {
  InferenceServer inference({.status = 500});
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "inference_failed");
  EXPECT_NE(rec.error_message.find("HTTP 500"), std::string::npos) << rec.error_message;
  EXPECT_NE(rec.error_message.find("injected failure"), std::string::npos) << rec.error_message;
  EXPECT_TRUE(rec.result_key.empty());
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_EQ(events_count(), 1);
}

TEST_F(RelayTest, MissingInputObjectFailsTheJob) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "never stored", {.upload_input = false});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "download_failed");
  EXPECT_TRUE(inference.events().empty()) << "inference must not be called without an input";
}

TEST_F(RelayTest, MissingInputObjectOnS3FailsWithNoSuchKey) {
  S3Server s3;
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  auto id = submit(*st, "never stored", {.upload_input = false});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "download_failed");
  EXPECT_NE(rec.error_message.find("NoSuchKey"), std::string::npos) << rec.error_message;
}

// Storage away for longer than relay.storage_retry_timeout: the job fails, and says why.
TEST_F(RelayTest, S3UnreachableAtUploadFailsTheJob) {
  auto s3 = std::make_unique<S3Server>();
  InferenceServer inference({.delay_ms = 1500});
  auto env = base_env(inference, *s3);
  env["RELAY_STORAGE_S3_TIMEOUT"] = "2s";
  env["RELAY_RELAY_STORAGE_RETRY_TIMEOUT"] = "3s";
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  // The input has been read once inference has it; storage goes away before the upload.
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  s3->kill();
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "upload_failed") << rec.error_message;
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

// A storage outage is waited out, not failed through: the job whose answer is in hand keeps it
// until storage is back, and the jobs after it wait for their inputs. A relay left running
// through an outage used to fail the job in hand within seconds and then each job it took
// (download_failed, a few seconds each): the queue drained into failures, the model's work lost.
// Either outage: the store restarting (connections refused), or gone silent (SIGSTOP: every
// request waits out storage.s3_timeout).
enum class Outage { restart, silence };
class StorageOutage : public RelayTest, public ::testing::WithParamInterface<Outage> {};
INSTANTIATE_TEST_SUITE_P(Relay, StorageOutage, ::testing::Values(Outage::restart, Outage::silence),
                         [](const auto& info) {
                           return info.param == Outage::restart ? "Restart" : "Silence";
                         });

TEST_P(StorageOutage, IsWaitedOutNotFailedThrough) {
  S3Server s3;
  InferenceServer inference({.delay_ms = 300});
  auto env = base_env(inference, s3);
  env["RELAY_STORAGE_S3_TIMEOUT"] = "1s";
  env["RELAY_QUEUE_POP_TIMEOUT"] = "30s";
  auto st = storage_for(env);
  const auto ids = submit_many(*st, 4);
  auto relay = start_relay(env, {"--max-jobs", "4"});
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  GetParam() == Outage::restart ? s3.kill() : s3.pause();
  // Away for longer than a blip's retries — the result's four tries, each up to three PUTs by
  // the S3 client (refused: about 8 s; silent, each PUT waiting out s3_timeout: about 16 s), an
  // input's five reads (3 s; silent: 8 s) — and well within relay.storage_retry_timeout (5 min
  // by default).
  const auto back_at =
      std::chrono::steady_clock::now() + (GetParam() == Outage::restart ? 15s : 25s);
  while (std::chrono::steady_clock::now() < back_at) {
    for (const auto& id : ids) ASSERT_NE(status(id), "failed") << record(id).error_message;
    ASSERT_TRUE(relay->running()) << relay->log();
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u) << "no input, no request";
  GetParam() == Outage::restart ? s3.start() : s3.resume();
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& id : ids) {
    auto rec = record(id);
    EXPECT_EQ(rec.status, JobStatus::completed) << id << ": " << rec.error_message;
    EXPECT_TRUE(rec.failures.empty()) << rec.failures;
    EXPECT_FALSE(s3.aws_cat("jobs/" + rec.result_key).empty()) << "its result is stored";
  }
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 4u) << "each job once";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
}

TEST_F(RelayTest, UnknownOperationFailsTheJob) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input", {.operation = "translate"});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(record(id).error_code, "unknown_operation");
}

TEST_F(RelayTest, CancelDuringInferenceAbortsTheRequest) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "long job");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  // What the gateway does (SPEC §4.7): flag, then publish.
  conn_.command({"HSET", keys_.job(model_, id), "cancel_requested", "1"});
  conn_.command({"PUBLISH", keys_.cancel_channel(model_), id});
  // The inference server sees its connection dropped — long before its 30 s answer.
  ASSERT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 5s))
      << inference.events();
  ASSERT_EQ(relay->wait_exit(10s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::cancelled);
  EXPECT_TRUE(rec.result_key.empty());
  EXPECT_FALSE(exists(keys_.lease(model_, id)));
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_EQ(events_count(), 1);
}

TEST_F(RelayTest, CancelFlagSetBeforeTheRelayStartsIsHonoured) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  // The PUBLISH went out before any relay listened: only the flag remains.
  conn_.command({"HSET", keys_.job(model_, id), "cancel_requested", "1"});
  conn_.command({"PUBLISH", keys_.cancel_channel(model_), id});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(status(id), "cancelled");
  EXPECT_TRUE(inference.events().empty()) << "a cancelled job must not reach inference";
}

TEST_F(RelayTest, LongJobKeepsItsLeaseThroughout) {
  InferenceServer inference({.delay_ms = 7000});
  auto env = base_env(inference);
  env["RELAY_LEASE_TTL"] = "2s";
  auto st = storage_for(env);
  auto id = submit(*st, "seven seconds");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return exists(keys_.lease(model_, id)); }, 20s));
  // Sample the lease until the job ends: it must never lapse although the job outlives the TTL
  // three times over.
  int samples = 0;
  while (status(id) == "processing") {
    auto ttl = redis::as_integer(conn_.command({"PTTL", keys_.lease(model_, id)}).get());
    if (status(id) != "processing") break;
    ASSERT_GT(ttl, 0) << "lease lapsed mid-job after " << samples << " samples";
    ++samples;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_GT(samples, 40);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  EXPECT_EQ(status(id), "completed");
}

TEST_F(RelayTest, LostLeaseStopsTheJobWithoutWritingIt) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  env["RELAY_LEASE_TTL"] = "900ms";
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  // As if the reaper had taken it: the lease is gone.
  conn_.command({"DEL", keys_.lease(model_, id)});
  ASSERT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 5s));
  ASSERT_EQ(relay->wait_exit(10s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::processing)
      << "fencing: the relay must write nothing after losing its lease";
  EXPECT_FALSE(rec.finished_at);
  EXPECT_EQ(events_count(), 0);
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{id}) << "left for the reaper";
  EXPECT_NE(relay->log().find("lease lost"), std::string::npos);
}

TEST_F(RelayTest, SigtermMidJobGivesTheJobBack) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto first = submit(*st, "first");
  auto second = submit(*st, "second");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{first, second}))
      << "back at the front";
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_FALSE(exists(keys_.lease(model_, first)));
  auto rec = record(first);
  EXPECT_EQ(rec.status, JobStatus::pending);
  EXPECT_TRUE(rec.holder.empty());
  EXPECT_EQ(events_count(), 0);
  // (The model notices the dropped request on its own time: waited for, not assumed.)
  EXPECT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 10s));
}

// SIGTERM mid-job while Redis is away: the give-back waits a few seconds, not the 30 s and more of
// a job's last step (the pod's grace is 30 s: it used to be SIGKILLed first). The relay exits 0,
// saying the job is left to the reaper; its lease then expires like a crashed relay's.
TEST_F(RelayTest, SigtermMidJobWithRedisDownExitsPromptly) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  auto st = storage_for(env);
  submit(*st, "stopped");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  redis_.stop();
  const auto t0 = std::chrono::steady_clock::now();
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(relay->log().find("left to the reaper"), std::string::npos) << relay->log();
}

TEST_F(RelayTest, SigtermWhileIdleExitsZeroPromptly) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "5m";
  auto relay = start_relay(env);
  // Wait until it blocks on BLMOVE (a blocked client shows up in INFO clients).
  ASSERT_TRUE(wait_for_blocked_client());
  relay->signal(SIGTERM);
  // Far sooner than the 5 minute pop timeout: the blocked BLMOVE is released.
  ASSERT_EQ(relay->wait_exit(10s), 0);
}

TEST_F(RelayTest, KillNineMidJobLeavesALeaseThatExpires) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  env["RELAY_LEASE_TTL"] = "1500ms";
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  relay->signal(SIGKILL);
  ASSERT_EQ(relay->wait_exit(5s), 128 + SIGKILL);
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{id});
  EXPECT_TRUE(exists(keys_.lease(model_, id)));
  // No heartbeat any more: the lease runs out — what the gateway's reaper looks for.
  ASSERT_TRUE(wait_until([&] { return !exists(keys_.lease(model_, id)); }, 10s));
  EXPECT_EQ(list(keys_.processing(model_)), std::vector<std::string>{id});
  EXPECT_EQ(status(id), "processing");
}

TEST_F(RelayTest, UnwritableSpoolDirectoryIsAConfigError) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_RELAY_SPOOL_DIR"] = "/nonexistent/spool";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(10s), 2);
  EXPECT_NE(relay->log().find("relay.spool_dir"), std::string::npos) << relay->log();
  EXPECT_TRUE(inference.events().empty());
}

TEST_F(RelayTest, BadConfigExitsTwoNamingTheKey) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_LEASE_TTL"] = "sixty";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(10s), 2);
  EXPECT_NE(relay->log().find("lease_ttl"), std::string::npos);
}

TEST_F(RelayTest, InferenceTimeoutFailsTheJob) {
  InferenceServer inference({.delay_ms = 30'000});
  auto env = base_env(inference);
  env["RELAY_INFERENCE_TIMEOUT"] = "500ms";
  auto st = storage_for(env);
  auto id = submit(*st, "slow");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "inference_timeout") << rec.error_message;
  // (The model notices the dropped request on its own time: waited for, not assumed.)
  EXPECT_TRUE(wait_until([&] { return inference.saw("dropped /predict"); }, 10s));
}

// A model server whose answer never ends its first chunk line (broken, or hostile): the job
// fails as a broken answer, and the relay's memory stays bounded — its read buffer used to grow
// with every byte sent.
TEST_F(RelayTest, AnAnswerWithAnEndlessChunkLineFailsTheJobInBoundedMemory) {
  InferenceServer inference({.endless_chunk_line = true});
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(60s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "inference_unreachable") << rec.error_message;
  EXPECT_NE(rec.error_message.find("reading the answer"), std::string::npos) << rec.error_message;
  // The model sent the relay more than its 1 MiB buffer, not everything it had (256 MiB).
  EXPECT_TRUE(wait_until(
      [&] { return inference.events().find("endless answer cut after ") != std::string::npos; },
      10s))
      << inference.events();
  if (kSanitized) GTEST_SKIP() << kSanitizedSkip;
  EXPECT_LT(relay->peak_rss_proc_kib(), 64 * 1024) << "KiB at peak";
}

// An answer larger than relay.max_result_size fails its job at once (result_too_large), before
// it fills the spool directory (in the chart an emptyDir whose size limit evicts the pod);
// nothing is stored, and the relay goes on to its next job.
TEST_F(RelayTest, AnAnswerOverTheResultSizeLimitFailsTheJobAndStoresNothing) {
  InferenceServer inference({.result_bytes = 3 << 20});
  auto env = base_env(inference);
  TempDir spool;
  env["RELAY_RELAY_SPOOL_DIR"] = spool.path();
  env["RELAY_RELAY_MAX_RESULT_SIZE"] = std::to_string(1 << 20);
  env["RELAY_MAX_JOBS"] = "2";
  auto st = storage_for(env);
  auto first = submit(*st, "input");
  auto second = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(60s), 0);
  for (const auto& id : {first, second}) {
    auto rec = record(id);
    EXPECT_EQ(rec.status, JobStatus::failed);
    EXPECT_EQ(rec.error_code, "result_too_large") << rec.error_message;
    EXPECT_NE(rec.error_message.find("relay.max_result_size"), std::string::npos)
        << rec.error_message;
    EXPECT_TRUE(rec.result_key.empty());
  }
  EXPECT_TRUE(std::filesystem::is_empty(spool.path()));
}

TEST_F(RelayTest, InferenceServerDyingMidJobFailsTheJob) {
  auto inference = std::make_unique<InferenceServer>(InferenceOptions{.delay_ms = 30'000});
  auto env = base_env(*inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference->saw("request /predict"); }, 20s));
  inference.reset();  // SIGKILL: the model server crashed
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::failed);
  EXPECT_EQ(rec.error_code, "inference_unreachable") << rec.error_message;
}

// A model server that restarts — crashed, or its container OOM-killed and started again — is
// waited for, healthy, before the relay takes another job (up to relay.health_timeout; then it
// exits 1). A relay taking jobs until stopped used to fail each job it took meanwhile, a refused
// connection in a millisecond: the queue drained into failures while the model came back.
// A job the model never got (its connection refused) goes back to the front of pending.
TEST_F(RelayTest, AModelServerDownWhenJobsComeIsWaitedForNotFailedThrough) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "30s";
  auto relay = start_relay(env, {"--max-jobs", "3"});
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("inference server healthy") != std::string::npos; }, 20s));
  inference.kill();
  auto st = storage_for(env);
  const auto ids = submit_many(*st, 3);
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("waiting for it to be healthy") != std::string::npos; }, 20s))
      << relay->log();
  // Down 2 s more: the jobs wait in pending, the first given back to its front.
  const auto back_at = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < back_at) {
    for (const auto& id : ids) ASSERT_EQ(status(id), "pending") << record(id).error_message;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(relay->running());
  inference.start();
  ASSERT_EQ(relay->wait_exit(30s), 0) << relay->log();
  for (const auto& id : ids) {
    auto rec = record(id);
    EXPECT_EQ(rec.status, JobStatus::completed) << id << ": " << rec.error_message;
    EXPECT_TRUE(rec.failures.empty()) << rec.failures;
  }
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 3u) << "each job once";
}

// The model dying with a job in hand fails that job (inference_unreachable: it may be what
// killed it; retried only if the job asks for attempts), and the jobs after it wait for the
// model to be back, as above.
TEST_F(RelayTest, AModelServerDyingMidJobIsWaitedForBeforeTheNextJob) {
  InferenceServer inference({.delay_ms = 1500});
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "30s";
  auto st = storage_for(env);
  const auto ids = submit_many(*st, 3);
  auto relay = start_relay(env, {"--max-jobs", "3"});
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  inference.kill();
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("waiting for it to be healthy") != std::string::npos; }, 20s))
      << relay->log();
  const auto back_at = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < back_at) {
    for (size_t i = 1; i < ids.size(); ++i)
      ASSERT_EQ(status(ids[i]), "pending") << record(ids[i]).error_message;
    std::this_thread::sleep_for(100ms);
  }
  inference.start();
  ASSERT_EQ(relay->wait_exit(30s), 0) << relay->log();
  auto first = record(ids[0]);
  EXPECT_EQ(first.status, JobStatus::failed);
  EXPECT_EQ(first.error_code, "inference_unreachable") << first.error_message;
  for (size_t i = 1; i < ids.size(); ++i) {
    auto rec = record(ids[i]);
    EXPECT_EQ(rec.status, JobStatus::completed) << ids[i] << ": " << rec.error_message;
  }
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 3u) << "each job once";
}

TEST_F(RelayTest, RedisRestartMidJobIsSurvived) {
  // A Redis with AOF, as in production: a restart loses nothing, the relay reconnects.
  RedisServer durable(true);
  auto conn = durable.connect();
  redis::JobStore store(conn, keys_);
  InferenceServer inference({.delay_ms = 2500});
  auto env = base_env(inference);
  for (auto& [k, v] : durable.env()) env[k] = v;
  env["RELAY_LEASE_TTL"] = "3s";
  auto st = storage_for(env);
  MemorySource src("input");
  const std::string id = submit(*st, src, {}, store);
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  durable.stop();
  durable.start();
  ASSERT_EQ(relay->wait_exit(30s), 0);
  auto conn2 = durable.connect();
  redis::JobStore store2(conn2, keys_);
  auto rec = store2.get(model_, id);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->status, JobStatus::completed) << rec->error_message;
  EXPECT_EQ(redis::as_integer(conn2.command({"XLEN", keys_.events(model_)}).get()), 1);
}

TEST_F(RelayTest, RedisRestartWhileIdleIsSurvived) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "30s";
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_for_blocked_client());
  redis_.stop();
  redis_.start();
  // The relay reconnects and blocks again; then a job arrives.
  auto conn = redis_.connect();
  ASSERT_TRUE(wait_for_blocked_client()) << "relay did not come back to BLMOVE";
  redis::JobStore store(conn, keys_);
  auto st = storage_for(env);
  MemorySource src("after restart");
  const std::string id = submit(*st, src, {}, store);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(store.get(model_, id)->status, JobStatus::completed);
}

// Storage that is not there yet (a volume still mounting) is waited for like Redis, not
// reported as a configuration error (exit 2).
TEST_F(RelayTest, StorageNotYetAvailableIsWaitedFor) {
  InferenceServer inference;
  auto env = base_env(inference);
  TempDir d;
  const std::string blocker = d.path() + "/mount";
  std::ofstream(blocker) << "a file where the folder should be";
  env["RELAY_STORAGE_URL"] = "file://" + blocker + "/objects";
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("storage not available yet") != std::string::npos; }, 10s))
      << relay->log();
  EXPECT_TRUE(relay->running());
  std::filesystem::remove(blocker);
  std::filesystem::create_directories(blocker + "/objects");
  auto st = storage_for(env);
  auto id = submit(*st, "once mounted");
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(record(id).status, JobStatus::completed);
}

TEST_F(RelayTest, SigtermDuringTheHealthWaitExitsZero) {
  InferenceServer inference({.health_status = 503});
  auto env = base_env(inference);
  env["RELAY_RELAY_HEALTH_TIMEOUT"] = "5m";
  auto relay = start_relay(env);
  ASSERT_TRUE(wait_until(
      [&] { return relay->log().find("waiting for the inference server") != std::string::npos; },
      20s));
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(10s), 0);
}

// A relay that cannot open its parts (here: the progress endpoint's port is taken) says so and
// exits 1; it used to abort in terminate() (a core dump, exit 134, no log line).
TEST_F(RelayTest, APartThatCannotOpenIsLoggedAndExitsOne) {
  InferenceServer inference;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  Env env = base_env(inference);
  env["RELAY_RELAY_PROGRESS_LISTEN"] = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto relay = start_relay(env);
  EXPECT_EQ(relay->wait_exit(20s), 1);
  EXPECT_NE(relay->log().find("cannot start"), std::string::npos) << relay->log();
  EXPECT_NE(relay->log().find("progress reports"), std::string::npos) << relay->log();
  ::close(fd);
}

}  // namespace
}  // namespace relay::testing
