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
    EXPECT_EQ(error_code(over), "max_pending_exceeded");
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
  EXPECT_EQ(error_code(over), "submit_rate_exceeded");
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

}  // namespace
}  // namespace relay::testing
