// The relay end to end: real redis-server, real storage (filesystem and S3 behind a SigV4
// check), the no-op inference server, the relay binary as a process killed with real signals.

#include <openssl/sha.h>

#include <filesystem>

#include "common/hex.hpp"
#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

std::string sha256_hex(const std::string& data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d);
  return to_hex(d, sizeof d);
}

std::string read_all(storage::Storage& st, const std::string& key) {
  auto src = st.open(key, {});
  std::string out, buf(65536, '\0');
  while (size_t n = src->read(buf)) out.append(buf.data(), n);
  return out;
}

// What the no-op server says it received, from the stored result.json.
boost::json::object file_part(const std::string& result_json) {
  auto v = boost::json::parse(result_json).as_object();
  for (auto& p : v.at("parts").as_array())
    if (p.as_object().at("name").as_string() == "file") return p.as_object();
  return {};
}

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

TEST_F(RelayTest, EmptyQueueTimesOutAndExitsZero) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_QUEUE_POP_TIMEOUT"] = "300ms";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(10s), 0);
  EXPECT_NE(relay->log().find("queue empty"), std::string::npos);
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

TEST_F(RelayTest, S3UnreachableAtUploadFailsTheJob) {
  auto s3 = std::make_unique<S3Server>();
  InferenceServer inference({.delay_ms = 1500});
  auto env = base_env(inference, *s3);
  env["RELAY_STORAGE_S3_TIMEOUT"] = "2s";
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

TEST_F(RelayTest, UnknownOperationFailsTheJob) {
  InferenceServer inference;
  auto env = base_env(inference);
  auto st = storage_for(env);
  auto id = submit(*st, "input", {.operation = "translate"});
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_EQ(record(id).error_code, "unknown_operation");
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
  EXPECT_TRUE(inference.saw("dropped /predict"));
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

TEST_F(RelayTest, LargeInputStreamsInBoundedMemory) {
  S3Server s3;
  InferenceServer inference;
  auto env = base_env(inference, s3);
  auto st = storage_for(env);
  // 512 MiB, generated as it is uploaded (multipart) rather than held in the test's memory.
  class Pattern final : public ByteSource {
   public:
    explicit Pattern(std::uint64_t n) : left_(n) {}
    size_t read(std::span<char> buf) override {
      size_t n = static_cast<size_t>(std::min<std::uint64_t>(buf.size(), left_));
      for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>((pos_ + i) * 2654435761u >> 24);
      pos_ += n;
      left_ -= n;
      return n;
    }
    std::optional<std::uint64_t> size() const override { return std::nullopt; }

   private:
    std::uint64_t left_, pos_ = 0;
  };
  const std::uint64_t size = 512ull << 20;
  Pattern pattern(size);
  const std::string id = submit(*st, pattern, {.filename = "big.bin", .size = size}, store_);

  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(300s), 0);
  auto rec = record(id);
  ASSERT_EQ(rec.status, JobStatus::completed) << rec.error_message;
  auto result = s3.aws_cat("jobs/" + rec.result_key);
  EXPECT_EQ(file_part(result).at("size").as_int64(), static_cast<std::int64_t>(size));
  std::cerr << "relay peak RSS: /proc VmHWM " << relay->peak_rss_proc_kib() << " KiB, ru_maxrss "
            << relay->peak_rss_rusage_kib() << " KiB\n";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP()
      << "the memory bound is not meaningful under AddressSanitizer (shadow memory, quarantine)";
#endif
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
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(relay->peak_rss_rusage_kib(), 64 * 1024) << "the answer was not held in memory";
#endif
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

TEST_F(RelayTest, BadConfigExitsTwoNamingTheKey) {
  InferenceServer inference;
  auto env = base_env(inference);
  env["RELAY_LEASE_TTL"] = "sixty";
  auto relay = start_relay(env);
  ASSERT_EQ(relay->wait_exit(10s), 2);
  EXPECT_NE(relay->log().find("lease_ttl"), std::string::npos);
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

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
  EXPECT_TRUE(inference.saw("dropped /predict"));
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

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

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

}  // namespace
}  // namespace relay::testing
