// The gateway's check of the Redis settings Relay depends on (src/gateway/redis_settings.hpp),
// against real redis-servers configured each way.

#include "gateway/redis_settings.hpp"

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

using gateway::SettingProblem;

// The settings found wrong, by name (a standalone server: the check is the same per master).
std::map<std::string, SettingProblem> problems_of(std::vector<std::string> args,
                                                  bool persistent = false) {
  RedisServer redis(persistent, std::move(args), /*tls=*/false, /*cluster=*/false);
  auto c = redis.connect();
  auto found = gateway::redis_setting_problems(c);
  EXPECT_TRUE(found.has_value()) << "CONFIG GET is allowed here";
  std::map<std::string, SettingProblem> out;
  for (auto& p : found.value_or(std::vector<SettingProblem>{})) out.emplace(p.setting, p);
  return out;
}

TEST(RedisSettings, WhatLosesJobsIsAWarningAndWhatCostsMemoryAnInfo) {
  // No append-only file nor snapshots (the test servers' default), an evicting policy, and
  // Redis's default hash-max-listpack-value.
  auto p = problems_of({"--maxmemory-policy", "allkeys-lru"});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("maxmemory-policy").level, log::Level::warn);
  EXPECT_EQ(p.at("maxmemory-policy").value, "allkeys-lru");
  EXPECT_EQ(p.at("appendonly").level, log::Level::warn);
  EXPECT_NE(p.at("appendonly").why.find("every job"), std::string::npos)
      << "save is empty too: " << p.at("appendonly").why;
  EXPECT_EQ(p.at("hash-max-listpack-value").level, log::Level::info);
  EXPECT_EQ(p.at("hash-max-listpack-value").value, "64");

  // Snapshots without an append-only file lose less, but still lose jobs.
  p = problems_of({"--save", "3600 1", "--hash-max-listpack-value", "256"});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p.at("appendonly").why.find("since its last snapshot"), std::string::npos);
}

TEST(RedisSettings, ARedisSetUpAsTheReadmeSaysHasNone) {
  // (persistent: appendonly yes, appendfsync always; noeviction is Redis's default.)
  EXPECT_TRUE(problems_of({"--hash-max-listpack-value", "256"}, true).empty());
  auto p = problems_of({"--hash-max-listpack-value", "512", "--appendfsync", "no"}, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.at("appendfsync").level, log::Level::warn);
}

TEST(RedisSettings, AServerThatRefusesConfigIsNotChecked) {
  RedisServer redis(false, {"--rename-command", "CONFIG", ""}, false, false);
  auto c = redis.connect();
  EXPECT_FALSE(gateway::redis_setting_problems(c).has_value());
}

// The gateway says so in its log once Redis is reachable — here at start (the test servers keep
// nothing on disk), every master's in cluster mode.
TEST_F(GatewayTest, RedisSettingsThatLoseJobsAreLoggedAtStart) {
  start_gateway();
  EXPECT_TRUE(wait_until(
      [&] {
        const std::string log = gateway_->log();
        return log.find(R"("level":"warn","component":"gateway","msg":"redis setting")") !=
                   std::string::npos &&
               log.find(R"("setting":"appendonly","value":"no")") != std::string::npos;
      },
      10s))
      << gateway_->log();
}

}  // namespace
}  // namespace relay::testing
