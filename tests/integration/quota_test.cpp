// Tenant quotas end to end: max_pending (jobs not yet ended) and a submit rate, enforced
// atomically across gateway replicas (one Lua step on the tenant's keys), refused with 429,
// Retry-After and an error code naming the limit; nothing is stored for a refused submission.

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

TEST_F(GatewayTest, MaxPendingIsHeldAcrossReplicasAndFreedWhenJobsEnd) {
  start_gateway({{"RELAY_QUOTAS_MAX_PENDING", "2"}});
  GatewayServer second(gateway_env({{"RELAY_QUOTAS_MAX_PENDING", "2"}}));
  const std::string first_id = submit_id("a");
  auto r =
      http("POST", second.url() + "/jobs/echo", {}, {}, {{"file", "b", "b.txt", "text/plain"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const size_t files = stored_files();
  // Both replicas refuse the third: the limit is the tenant's, not a replica's.
  for (const std::string& base : {gateway_->url(), second.url()}) {
    auto over = http("POST", base + "/jobs/echo", {}, {}, {{"file", "c", "c.txt", "text/plain"}});
    EXPECT_EQ(over.status, 429) << over.body;
    EXPECT_EQ(error_code(over), "quota_exceeded");  // SPEC §12.3
    EXPECT_EQ(str(parse(over).at("error").as_object(), "limit"), "max_pending") << over.body;
    EXPECT_FALSE(over.headers["retry-after"].empty());
  }
  EXPECT_EQ(stored_files(), files) << "a refused submission stores nothing";
  EXPECT_EQ(list(keys_.pending("m1")).size(), 2u);
  // A cancelled job frees its slot once the gateway has seen it end.
  ASSERT_EQ(http("DELETE", url("/jobs/echo/" + first_id)).status, 200);
  EXPECT_TRUE(wait_until([&] { return submit("d").status == 202; }, 10s));
  EXPECT_EQ(submit("e").status, 429);
  // So does a completed one.
  InferenceServer inference;
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_TRUE(wait_until([&] { return submit("f").status == 202; }, 10s));
  auto metrics = http("GET", url("/metrics")).body;
  EXPECT_NE(metrics.find(R"(relay_quota_refusals_total{tenant="default",limit="max_pending"})"),
            std::string::npos)
      << metrics;
}

TEST_F(GatewayTest, SubmitRateIsATokenBucketSharedByReplicas) {
  // 60 a minute (one a second) with a burst of 2.
  Env quota{{"RELAY_QUOTAS_SUBMITS_PER_MINUTE", "60"}, {"RELAY_QUOTAS_SUBMIT_BURST", "2"}};
  start_gateway(quota);
  GatewayServer second(gateway_env(quota));
  EXPECT_EQ(submit("a").status, 202);
  EXPECT_EQ(
      http("POST", second.url() + "/jobs/echo", {}, {}, {{"file", "b", "b.txt", "text/plain"}})
          .status,
      202);
  auto over =
      http("POST", second.url() + "/jobs/echo", {}, {}, {{"file", "c", "c.txt", "text/plain"}});
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(error_code(over), "rate_limited");  // SPEC §12.3
  EXPECT_EQ(str(parse(over).at("error").as_object(), "limit"), "submit_rate") << over.body;
  EXPECT_EQ(over.headers["retry-after"], "1");
  EXPECT_EQ(submit("d").status, 429) << "the first replica sees the same bucket";
  EXPECT_EQ(list(keys_.pending("m1")).size(), 2u);
  // A token comes back within a second or so.
  EXPECT_TRUE(wait_until([&] { return submit("e").status == 202; }, 5s));
}

// A tenant's own limits override the defaults; other tenants keep theirs.
TEST_F(GatewayTest, PerTenantQuotasOverrideTheDefault) {
  start_gateway({{"RELAY_AUTH_ENABLED", "true"},
                 {"RELAY_AUTH_API_KEYS",
                  sha256_hex("key-a") + "=tenant-a," + sha256_hex("key-b") + "=tenant-b"},
                 {"RELAY_QUOTAS_MAX_PENDING", "1"},
                 {"RELAY_QUOTAS_TENANTS", "tenant-b=max_pending=3"}});
  auto as = [&](const std::string& key) {
    return submit("x", {"Authorization: Bearer " + key}).status;
  };
  EXPECT_EQ(as("key-a"), 202);
  EXPECT_EQ(as("key-a"), 429);
  EXPECT_EQ(as("key-b"), 202);
  EXPECT_EQ(as("key-b"), 202);
  EXPECT_EQ(as("key-b"), 202);
  EXPECT_EQ(as("key-b"), 429);
}

// A submission waiting for its quota admission holds no thread: the admission goes to Redis with
// other requests' steps and the request's coroutine, not a pool thread, waits for the reply.
// With one request thread and Redis pausing writes for 3 s, three submissions wait at their
// admission while a status read (not paused) is answered at once; then the three are admitted,
// their inputs stored and their jobs made, each holding its max_pending slot. (A thread that
// waited for an admission would have held the status read for the whole pause.)
TEST_F(GatewayTest, ASubmissionWaitingForItsQuotaAdmissionHoldsNoThread) {
  if (redis_.cluster()) GTEST_SKIP() << "CLIENT PAUSE is per node";
  start_gateway({{"RELAY_SERVER_BLOCKING_THREADS", "1"},
                 {"RELAY_SERVER_UPLOAD_THREADS", "1"},
                 {"RELAY_QUOTAS_MAX_PENDING", "10"}});
  const std::string done_id = submit_id("before");
  conn_.command({"CLIENT", "PAUSE", "3000", "WRITE"});
  const auto paused = std::chrono::steady_clock::now();
  auto waiting = submit_at_once(3, "waits for its admission");
  // An admission held by the pause: a client blocked on a script.
  ASSERT_TRUE(wait_until([&] { return held_at_redis("cmd=evalsha"); }, 10s)) << gateway_->log();
  EXPECT_EQ(stored_files(), 1u) << "nothing is stored before the admission";
  auto status = http("GET", url("/jobs/echo/" + done_id), {}, {}, {}, 1500);
  EXPECT_EQ(status.status, 200) << status.body;
  EXPECT_LT(std::chrono::steady_clock::now() - paused, std::chrono::milliseconds(2500))
      << "the status read came after the pause: a thread waited on an admission";
  expect_pending(waiting);
  EXPECT_EQ(list(keys_.pending("m1")).size(), 4u);
  EXPECT_EQ(stored_files(), 4u);
  EXPECT_EQ(conn_.command({"ZCARD", keys_.quota_admitted("default")})->integer, 4);
}

// An upload with an Idempotency-Key whose body is still to come passes two gates before its
// body is taken — its key reserved, then its quota admission —, each a round trip no thread
// waits for: with Redis pausing writes and one request thread, a status read is answered at
// once. Then: the job made from the whole body; a retry of it is answered with that job at its
// first gate (nothing stored, no slot taken); an upload refused at the second gate frees the
// key the first one reserved.
TEST_F(GatewayTest, AnUploadPassesItsGatesWithoutHoldingAThread) {
  if (redis_.cluster()) GTEST_SKIP() << "CLIENT PAUSE is per node";
  start_gateway({{"RELAY_SERVER_BLOCKING_THREADS", "1"},
                 {"RELAY_SERVER_UPLOAD_THREADS", "1"},
                 {"RELAY_QUOTAS_MAX_PENDING", "2"}});
  const std::string done_id = submit_id("before");
  // Larger than the gateway reads before the handler: the key is reserved, not claimed later.
  std::string big(200'000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  auto upload = [&](const std::string& key) {
    return http("POST", url("/jobs/echo?filename=big.bin"),
                {"Content-Type: application/octet-stream", "Idempotency-Key: " + key}, big);
  };
  conn_.command({"CLIENT", "PAUSE", "3000", "WRITE"});
  const auto paused = std::chrono::steady_clock::now();
  auto first = std::async(std::launch::async, [&] { return upload("big-1"); });
  ASSERT_TRUE(wait_until([&] { return held_at_redis("cmd=set"); }, 10s)) << gateway_->log();
  auto status = http("GET", url("/jobs/echo/" + done_id), {}, {}, {}, 1500);
  EXPECT_EQ(status.status, 200) << status.body;
  EXPECT_LT(std::chrono::steady_clock::now() - paused, std::chrono::milliseconds(2500))
      << "the status read came after the pause: a thread waited at a gate";
  auto made = first.get();
  ASSERT_EQ(made.status, 202) << made.body;
  const std::string id = str(parse(made), "id");
  const std::string key = keys_.idempotency("m1", "default", sha256_hex("big-1"));
  EXPECT_EQ(redis::as_optional_string(conn_.command({"GET", key}).get()),
            std::optional<std::string>(id));
  EXPECT_EQ(conn_.command({"ZCARD", keys_.quota_admitted("default")})->integer, 2);
  EXPECT_EQ(stored_files(), 2u);

  auto again = upload("big-1");
  ASSERT_EQ(again.status, 202) << again.body;
  EXPECT_EQ(str(parse(again), "id"), id);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  EXPECT_EQ(stored_files(), 2u);

  auto over = upload("big-2");
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(error_code(over), "quota_exceeded");
  // (Freed with a TTL of 1 ms: a key another request took meanwhile would be that request's.)
  const std::string refused_key = keys_.idempotency("m1", "default", sha256_hex("big-2"));
  EXPECT_TRUE(wait_until(
      [&] {
        return conn_.command({"EXISTS", refused_key})->integer == 0;
      },
      5s))
      << "the refused upload's reservation is freed";
  EXPECT_EQ(stored_files(), 2u);
  EXPECT_EQ(list(keys_.pending("m1")).size(), 2u);
}

// Once admitted, a submission's body is taken whole, in order: the bytes that came with its
// header first (read before the admission), then the rest as it streams — raw and multipart,
// larger than the first read. A client that asks before sending its body (Expect:
// 100-continue) is told to send it once admitted, and refused without sending it when not.
TEST_F(GatewayTest, AnAdmittedUploadIsStoredWholeAndARefusalNeedsNoBody) {
  start_gateway({{"RELAY_QUOTAS_MAX_PENDING", "3"}});
  auto stored_input = [&](const std::string& id) {
    std::string content;
    int found = 0;
    for (const auto& f : storage_files())
      if (f.string().find(id) != std::string::npos) {
        std::ifstream in(f, std::ios::binary);
        content.assign(std::istreambuf_iterator<char>(in), {});
        ++found;
      }
    EXPECT_EQ(found, 1) << id;
    return content;
  };
  std::string big(300'000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>('a' + (i * 7 + i / 997) % 26);
  auto raw = http("POST", url("/jobs/echo?filename=big.bin"),
                  {"Content-Type: application/octet-stream"}, big);
  ASSERT_EQ(raw.status, 202) << raw.body;
  EXPECT_EQ(stored_input(str(parse(raw), "id")), big);
  auto form = http("POST", url("/jobs/echo"), {}, {}, {{"file", big, "big.bin", "text/plain"}});
  ASSERT_EQ(form.status, 202) << form.body;
  EXPECT_EQ(stored_input(str(parse(form), "id")), big);

  auto ask_first = [&](const std::string& body) {
    int fd = raw_connect(gateway_->url());
    const std::string head =
        "POST /jobs/echo?filename=c.txt HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        "Expect: 100-continue\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    std::string answer = recv_some(fd, 5);
    if (answer.starts_with("HTTP/1.1 100 Continue\r\n")) {
      ::send(fd, body.data(), body.size(), MSG_NOSIGNAL);
      answer = recv_some(fd, 5);
    } else {
      answer = "(no 100) " + answer;
    }
    ::close(fd);
    return answer;
  };
  EXPECT_TRUE(ask_first("third").starts_with("HTTP/1.1 202")) << "the third slot";
  const std::string over = ask_first("fourth");
  EXPECT_TRUE(over.starts_with("(no 100) HTTP/1.1 429")) << over;
  EXPECT_NE(over.find("quota_exceeded"), std::string::npos) << over;
  EXPECT_EQ(list(keys_.pending("m1")).size(), 3u);
  EXPECT_EQ(stored_files(), 3u) << "a refused submission stores nothing";
}

}  // namespace
}  // namespace relay::testing
