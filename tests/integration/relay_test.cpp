// The relay end to end, when things go right: real redis-server, real storage (filesystem and
// S3 behind a SigV4 check), the no-op inference server, the relay binary as a process.

#include <filesystem>

#include "common/sha256.hpp"
#include "relay_fixture.hpp"
#include "storage/s3_storage.hpp"

namespace relay::testing {
namespace {

TEST_F(RelayTest, HappyPathOnFilesystemStorage) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  const std::string input = "hello, relay\n";
  auto id = submit(*st, input,
                   {.params = R"({"language":"eng","beam":5,"temperature":0.1,)"
                              R"("seed":123456789012345678901234567890})"});

  // Listen for the seed's completion signal like the gateway would.
  auto sub = redis_.connect();
  sub.append({"SUBSCRIBE", keys_.completed_channel(model_)});
  sub.read_reply();

  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);

  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::completed);
  EXPECT_EQ(rec.result_key, "svc/" + id + "/result.json");
  EXPECT_TRUE(rec.started_at);
  EXPECT_TRUE(rec.finished_at);
  EXPECT_TRUE(rec.holder.starts_with(rec.holder.substr(0, 1)));
  auto timings = boost::json::parse(rec.timings).as_object();
  for (const char* stage : {"queue_wait", "download", "inference", "upload", "total"})
    EXPECT_TRUE(timings.contains(stage)) << stage;

  // The inference server got the bytes intact, with filename, type and params as fields.
  auto result = read_all(*st, rec.result_key);
  auto part = file_part(result);
  EXPECT_EQ(part.at("sha256").as_string(), sha256_hex(input));
  EXPECT_EQ(part.at("filename").as_string(), "sample.txt");
  EXPECT_EQ(part.at("content_type").as_string(), "text/plain");
  EXPECT_NE(result.find(R"("name":"language")"), std::string::npos);
  EXPECT_NE(result.find(R"("value":"eng")"), std::string::npos);
  EXPECT_NE(result.find(R"("value":"5")"), std::string::npos);
  // Numbers byte for byte as the client wrote them (not 1E-1, not a rounded double).
  EXPECT_NE(result.find(R"("value":"0.1")"), std::string::npos) << result;
  EXPECT_NE(result.find(R"("value":"123456789012345678901234567890")"), std::string::npos);

  // Bookkeeping: out of processing, no lease, one durable event, one PUBLISH.
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_FALSE(exists(keys_.lease(model_, id)));
  EXPECT_EQ(events_count(), 1);
  auto msg = sub.read_reply();
  ASSERT_EQ(msg->elements, 3u);
  // The documented payload (redis/completion.hpp), agreeing with the record.
  auto payload = redis::Completion::from_payload(redis::as_string(msg->element[2]));
  ASSERT_TRUE(payload);
  EXPECT_EQ(payload->job_id, id);
  EXPECT_EQ(payload->status, JobStatus::completed);
  EXPECT_EQ(payload->service_type, "svc");
  EXPECT_EQ(payload->model, model_);
  EXPECT_EQ(payload->result_key, rec.result_key);
  EXPECT_EQ(payload->finished_at, rec.finished_at);
  // One structured summary line with the stage timings.
  EXPECT_NE(relay->log().find(R"("msg":"job finished","job_id":")" + id), std::string::npos);
}

TEST_F(RelayTest, HappyPathOnS3BehindSignatureCheck) {
  S3Server s3;
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  std::string input(3 * 1024 * 1024 + 17, 'x');  // several reads through the streaming GET
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>('a' + i % 26);
  auto id =
      submit(*st, input, {.filename = "audio.bin", .content_type = "application/octet-stream"});

  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(30s), 0);
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message << "\n" << s3.log();
  // Read back by an independent S3 client (awscli), under the prefix of storage.url.
  std::string result = s3.aws_cat("jobs/" + rec.result_key);
  ASSERT_FALSE(result.empty());
  EXPECT_EQ(file_part(result).at("sha256").as_string(), sha256_hex(input));
  EXPECT_EQ(s3.log().find("rejected"), std::string::npos) << s3.log();
}

// A storage blip does not fail a job: an input download whose connection drops mid-way resumes
// from where it stopped (the model receives the input whole, once), and a result upload S3
// refuses (503) is tried again — by the S3 client (kPutAttempts), then by the relay — and the
// model's work is not lost.
TEST_F(RelayTest, StorageBlipsAreRiddenOut) {
  S3Server s3({}, {"--cut-gets", "2", "--cut-match", "/input", "--cut-after", "300000",
                   "--fail-puts", "4", "--fail-match", "result.json"});
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  std::string input(1024 * 1024 + 5, '\0');
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>(i * 7 + i / 1000);
  auto id = submit(*st, input, {.filename = "clip.bin"});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message << "\n" << s3.log();
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u) << "the model was asked once";
  std::string result = s3.aws_cat("jobs/" + rec.result_key);
  EXPECT_EQ(file_part(result).at("sha256").as_string(), sha256_hex(input)) << "the whole input";
  // Both faults happened, both times.
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: GET"), 2u) << s3.log();
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: 503 for PUT"), 4u) << s3.log();
  EXPECT_EQ(occurrences(relay->log(), "storage read failed; resuming"), 2u) << relay->log();
  static_assert(storage::S3Storage::kPutAttempts == 3, "four 503s: one put failed, one retried");
  EXPECT_EQ(occurrences(relay->log(), "result upload failed; retrying"), 1u) << relay->log();
}

// A result larger than an S3 part is stored in parts, one at a time: a part S3 refuses is sent
// again alone, by the S3 client, and the relay never sends the result again from its start
// (it did, from its spool, when the result was one streamed PUT).
TEST_F(RelayTest, ALargeResultRefusedMidWayIsSentAgainAPartNotWhole) {
  S3Server s3({}, {"--log-puts", "--fail-puts", "1", "--fail-match", "partNumber=2&"});
  InferenceServer inference({.result_bytes = 11 << 20});
  auto env = base_env(inference, s3);
  env["RELAY_STORAGE_S3_PART_SIZE"] = std::to_string(5 << 20);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message << "\n" << s3.log();
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: 503 for PUT"), 1u) << s3.log();
  EXPECT_EQ(occurrences(relay->log(), "result upload failed; retrying"), 0u) << relay->log();
  EXPECT_EQ(occurrences(s3.log(), "partNumber=1&"), 1u) << "part 1 went once: " << s3.log();
  auto stored = st->open(rec.result_key, {});
  ASSERT_TRUE(stored->size());
  EXPECT_GT(*stored->size(), std::uint64_t{11} << 20);
}

TEST_F(RelayTest, PriorityJobIsTakenFirst) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto a = submit(*st, "a");
  auto b = submit(*st, "b");
  auto urgent = submit(*st, "urgent", {.priority = true});
  EXPECT_EQ(list(keys_.pending(model_)).front(), urgent);
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(status(urgent), "completed");
  EXPECT_EQ(status(a), "pending");
  EXPECT_EQ(status(b), "pending");
  EXPECT_EQ(list(keys_.pending(model_)), (std::vector<std::string>{a, b}));
}

TEST_F(RelayTest, MaxJobsZeroDrainsTheQueueThenExitsOnTimeout) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "500ms";
  auto st = storage_for(env);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(submit(*st, "job " + std::to_string(i)));
  auto relay = start_relay(env, {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(20s), 0);
  for (auto& id : ids) EXPECT_EQ(status(id), "completed");
  EXPECT_EQ(events_count(), 5);
}

TEST_F(RelayTest, MaxJobsNStopsAfterN) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  for (int i = 0; i < 3; ++i) submit(*st, "job");
  auto relay = start_relay(env, {"--max-jobs", "2"});
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(events_count(), 2);
  EXPECT_EQ(list(keys_.pending(model_)).size(), 1u);
}

TEST_F(RelayTest, AOneShotRelayTakesTheJobWaitingInOneStepAndAJobToComeByBlmove) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  // A job waiting when the relay starts (why KEDA starts it): the look made with the connect
  // finds it, and take.lua moves, leases and marks it at once — no BLMOVE.
  auto waiting = submit(*st, "waiting");
  const auto before = calls_of("blmove");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(status(waiting), "completed");
  EXPECT_EQ(calls_of("blmove"), before) << relay->log();

  // None waiting: the relay waits in BLMOVE, and runs the job that comes.
  relay = start_relay(env);
  ASSERT_TRUE(wait_for_blocked_client()) << relay->log();
  auto later = submit(*st, "later");
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(status(later), "completed");
  EXPECT_GT(calls_of("blmove"), before);
}

TEST_F(RelayTest, EmptyQueueTimesOutAndExitsZero) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "300ms";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  EXPECT_NE(relay->log().find("queue empty"), std::string::npos);
}

TEST_F(RelayTest, OperationSelectsTheRoute) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_INFERENCE_ROUTES"] = "default=/predict,transcribe=/v1/transcribe";
  auto st = storage_for(env);
  auto id = submit(*st, "input", {.operation = "transcribe"});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(status(id), "completed");
  EXPECT_TRUE(inference.saw("request /v1/transcribe"));
}

TEST_F(RelayTest, LargeInputStreamsInBoundedMemory) {
  S3Server s3;
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  // 512 MiB, generated as it is uploaded (multipart) rather than held in the test's memory.
  const std::uint64_t size = 512ull << 20;
  PatternSource pattern(size);
  const std::string id = submit(*st, pattern, {.filename = "big.bin", .size = size}, store_);

  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(300s), 0);
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message;
  auto result = s3.aws_cat("jobs/" + rec.result_key);
  EXPECT_EQ(file_part(result).at("size").as_int64(), static_cast<std::int64_t>(size));
  std::cerr << "relay peak RSS: /proc VmHWM " << relay->peak_rss_proc_kib() << " KiB, ru_maxrss "
            << relay->peak_rss_rusage_kib() << " KiB\n";
  if (kSanitized) GTEST_SKIP() << kSanitizedSkip;
  EXPECT_GT(relay->peak_rss_proc_kib(), 0);
  EXPECT_LT(relay->peak_rss_proc_kib(), 64 * 1024);
  EXPECT_LT(relay->peak_rss_rusage_kib(), 64 * 1024);
}

TEST_F(RelayTest, TerminalJobInThePendingListIsDroppedUnchanged) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  // A stale queue entry for a job that already ended.
  conn_.command({"HSET", keys_.job(model_, id), "status", "cancelled", "finished_at",
                 "2026-01-01T00:00:00.000Z"});
  env["RELAY_QUEUE_POP_TIMEOUT"] = "300ms";
  auto relay = start_relay(env, {"--max-jobs", "1"});
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto rec = record(id);
  EXPECT_EQ(rec.status, JobStatus::cancelled);
  EXPECT_EQ(rec.finished_at, parse_rfc3339("2026-01-01T00:00:00.000Z"));
  EXPECT_FALSE(rec.started_at);
  EXPECT_TRUE(list(keys_.processing(model_)).empty());
  EXPECT_TRUE(inference.events().empty());
}

// A 100 MiB model answer goes to an unnamed file in relay.spool_dir (not /tmp, which is
// read-only in the chart's pods) and is uploaded whole, in bounded memory. The read-only root
// itself is exercised by the container test (tests/deploy/pod_test.sh).
TEST_F(RelayTest, LargeResultIsSpooledInTheConfiguredDirectory) {
  InferenceServer inference({.result_bytes = 100ull << 20});
  auto env = base_env(inference);
  TempDir spool;
  env["RELAY_RELAY_SPOOL_DIR"] = spool.path();
  env["TMPDIR"] = "/nonexistent-tmpdir";  // ignored once the spool directory is set
  auto st = storage_for(env);
  auto id = submit(*st, "input");
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(120s), 0);
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message;
  auto src = st->open(rec.result_key, {});
  ASSERT_TRUE(src->size());
  EXPECT_GT(*src->size(), 100ull << 20);
  EXPECT_TRUE(std::filesystem::is_empty(spool.path())) << "the spool file is unnamed";
  if (!kSanitized) {
    EXPECT_LT(relay->peak_rss_rusage_kib(), 64 * 1024) << "the answer was not held in memory";
  }
}

// The example model servers run as PID 1 of their containers, where a signal without a handler is
// dropped: each must end on SIGTERM by itself, promptly, with exit code 0.
TEST(ModelServers, ExitZeroPromptlyOnSigterm) {
  std::vector<std::string> servers{noop_binary()};
  std::string ocr = std::filesystem::path(noop_binary()).parent_path() / "relay-model-ocr";
  if (std::filesystem::exists(ocr)) servers.push_back(ocr);
  for (const auto& bin : servers) {
    TempDir dir;
    int port = free_port();
    Process p({bin, "--listen", "127.0.0.1:" + std::to_string(port)}, Env{}, dir.path() + "/log");
    ASSERT_TRUE(wait_until([&] { return port_open(port); }, 20s)) << bin << ": " << p.log();
    auto t0 = std::chrono::steady_clock::now();
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait_exit(2s), 0) << bin;
    std::cerr << bin << " stopped in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count()
              << " ms\n";
  }
}

}  // namespace
}  // namespace relay::testing
