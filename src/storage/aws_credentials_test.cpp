// Credential parsing and refresh timing, without a network: the fetch function and the clock
// are injected. The real STS and container endpoints are exercised in
// tests/integration/credentials_test.cpp.

#include "storage/aws_credentials.hpp"

#include <gtest/gtest.h>

#include "storage/storage.hpp"

namespace relay::storage {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    return it == vars.end() ? std::nullopt : std::optional(it->second);
  };
}

TEST(AwsCredentials, ParsesAwsTimestamps) {
  auto t = parse_aws_time("2026-11-30T10:00:00Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(Clock::to_time_t(*t), 1796032800);
  EXPECT_EQ(parse_aws_time("2026-11-30T10:00:00.123456Z"), t);
  EXPECT_EQ(parse_aws_time("2026-11-30T11:00:00+01:00"), t);
  EXPECT_EQ(parse_aws_time("2026-11-30T09:30:00-00:30"), t);
  for (const char* bad :
       {"", "2026-11-30", "2026-11-30T10:00:00", "2026-11-30T10:00:00+1", "yesterday"})
    EXPECT_FALSE(parse_aws_time(bad)) << bad;
}

TEST(AwsCredentials, ParsesStsAnswerAndItsErrors) {
  auto c = parse_sts_response(
      "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
      "<AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s3cr3t</SecretAccessKey>"
      "<SessionToken>tok</SessionToken><Expiration>2026-11-30T10:00:00Z</Expiration>"
      "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>");
  EXPECT_EQ(c.access_key_id, "ASIA1");
  EXPECT_EQ(c.secret_access_key, "s3cr3t");
  EXPECT_EQ(c.session_token, "tok");
  EXPECT_EQ(c.expiration, parse_aws_time("2026-11-30T10:00:00Z"));
  try {
    parse_sts_response(
        "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>expired</Message>"
        "</Error></ErrorResponse>");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "InvalidIdentityToken: expired");
  }
  // Missing pieces are refused, not signed with empty keys.
  EXPECT_THROW(parse_sts_response("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>"),
               std::runtime_error);
  EXPECT_THROW(parse_sts_response("not xml"), std::runtime_error);
}

TEST(AwsCredentials, ParsesContainerAnswer) {
  auto c = parse_container_response(
      R"({"AccessKeyId":"ASIA2","SecretAccessKey":"k","Token":"t","Expiration":"2026-11-30T10:00:00Z"})");
  EXPECT_EQ(c.access_key_id, "ASIA2");
  EXPECT_EQ(c.session_token, "t");
  EXPECT_EQ(c.expiration, parse_aws_time("2026-11-30T10:00:00Z"));
  EXPECT_FALSE(parse_container_response(R"({"AccessKeyId":"A","SecretAccessKey":"k"})").expiration);
  EXPECT_THROW(parse_container_response(R"({"message":"denied"})"), std::runtime_error);
  EXPECT_THROW(parse_container_response("[1]"), std::runtime_error);
  EXPECT_THROW(
      parse_container_response(R"({"AccessKeyId":"A","SecretAccessKey":"k","Expiration":"soon"})"),
      std::runtime_error);
}

TEST(AwsCredentials, RefreshesBeforeExpiryAndKeepsValidOnesWhenRefreshFails) {
  auto now = Clock::from_time_t(1'800'000'000);
  int fetches = 0;
  bool fail = false;
  RefreshingProvider p(
      [&] {
        if (fail) throw std::runtime_error("STS down");
        ++fetches;
        return AwsCredentials{"AK" + std::to_string(fetches), "s", "t", now + 1h};
      },
      "test", [&] { return now; });
  EXPECT_EQ(p.get().access_key_id, "AK1");
  now += 54min;  // 6 min left: not yet (refresh starts 5 min before expiry)
  EXPECT_EQ(p.get().access_key_id, "AK1");
  now += 1min + 1s;  // inside the last 5 minutes
  EXPECT_EQ(p.get().access_key_id, "AK2");
  EXPECT_EQ(fetches, 2);

  // Refresh due but failing: the old ones serve while they are valid, then it is an error.
  now += 56min;
  fail = true;
  EXPECT_EQ(p.get().access_key_id, "AK2");
  now += 5min;
  try {
    p.get();
    FAIL();
  } catch (const StorageError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unavailable);
    EXPECT_NE(std::string(e.what()).find("STS down"), std::string::npos);
  }
  fail = false;
  EXPECT_EQ(p.get().access_key_id, "AK3");
}

TEST(AwsCredentials, ShortLivedCredentialsRefreshAtHalfTheirLife) {
  auto now = Clock::from_time_t(1'800'000'000);
  int fetches = 0;
  RefreshingProvider p(
      [&] {
        return AwsCredentials{std::to_string(++fetches), "s", "t", now + 4s};
      },
      "test", [&] { return now; });
  p.get();
  now += 1999ms;
  p.get();
  EXPECT_EQ(fetches, 1);
  now += 1ms;
  p.get();
  EXPECT_EQ(fetches, 2);
}

TEST(AwsCredentials, ChoosesTheSourceInTheSdkOrderAndRefusesHalfConfigurations) {
  auto pick = [](std::map<std::string, std::string> vars) {
    return make_credentials_provider(env_of(std::move(vars)), "eu-west-1", 1s)->describe();
  };
  EXPECT_EQ(pick({{"AWS_ACCESS_KEY_ID", "A"},
                  {"AWS_SECRET_ACCESS_KEY", "S"},
                  {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                  {"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}}),
            "environment (AWS_ACCESS_KEY_ID)");
  EXPECT_EQ(pick({{"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                  {"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"},
                  {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}}),
            "web identity (arn:aws:iam::1:role/r)");
  EXPECT_EQ(pick({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"}}),
            "container endpoint (http://169.254.170.23/v1/credentials)");
  EXPECT_EQ(pick({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x"}}),
            "container endpoint (http://169.254.170.2/v2/credentials/x)");
  for (auto vars : std::vector<std::map<std::string, std::string>>{
           {},
           {{"AWS_ACCESS_KEY_ID", "A"}},
           {{"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"}},
           {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}},
           // The token would cross the network in clear.
           {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.5/creds"}},
           {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "ftp://127.0.0.1/creds"}},
       })
    EXPECT_THROW(pick(vars), std::invalid_argument);
}

}  // namespace
}  // namespace relay::storage
