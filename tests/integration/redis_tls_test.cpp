// Redis over TLS (Debian's redis-server built with TLS, a test CA made per test): the relay and
// the gateway end to end over rediss://, and the connection's refusals — wrong CA, wrong name,
// missing client certificate — each a clear error, with verification off only when asked.

#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json.hpp>

#include "harness.hpp"
#include "http_client.hpp"

namespace relay::testing {
namespace {

std::string status_of(const std::string& gateway, const std::string& id) {
  auto r = http("GET", gateway + "/jobs/echo/" + id);
  boost::system::error_code ec;
  auto v = boost::json::parse(r.body, ec);
  if (ec || !v.is_object() || !v.as_object().contains("status")) return "";
  return std::string(v.as_object().at("status").as_string());
}

void expect_refused(const redis::Endpoint& ep, const std::string& why) {
  try {
    redis::Connection::open(ep);
    ADD_FAILURE() << "connected, expected a refusal mentioning: " << why;
  } catch (const redis::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(RedisTls, RelayAndGatewayRunAJobOverTls) {
  RedisServer redis(false, {}, true);
  TempDir files, logs;
  InferenceServer inference;
  Env common{{"RELAY_REDIS_URL", redis.url()},
             {"RELAY_REDIS_TLS_CA_FILE", redis.tls_dir() + "/ca.crt"},
             {"RELAY_STORAGE_URL", "file://" + files.path()}};
  Env gw_env = common;
  gw_env["RELAY_SERVICE_TYPES"] = "echo=m1";
  gw_env["RELAY_AUTH_ENABLED"] = "false";
  GatewayServer gateway(gw_env);
  ASSERT_TRUE(wait_until([&] { return http("GET", gateway.url() + "/readyz").status == 200; }))
      << gateway.log();
  auto r = http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "over tls", "a.txt", "text/plain"}});
  ASSERT_EQ(r.status, 202) << r.body;
  auto id = std::string(boost::json::parse(r.body).as_object().at("id").as_string());

  Env relay_env = common;
  relay_env["RELAY_MODEL"] = "m1";
  relay_env["RELAY_INFERENCE_URL"] = inference.url();
  relay_env["RELAY_QUEUE_POP_TIMEOUT"] = "2s";
  Process relay({relay_binary()}, relay_env, logs.path() + "/relay.log");
  ASSERT_EQ(relay.wait_exit(30s), 0) << relay.log();
  EXPECT_TRUE(wait_until([&] { return status_of(gateway.url(), id) == "completed"; }, 20s))
      << gateway.log();
}

TEST(RedisTls, CertificateFromAnotherCaIsRefused) {
  RedisServer redis(false, {}, true);
  auto ep = redis.endpoint();
  ep.tls_ca_file = redis.tls_dir() + "/other-ca.crt";
  expect_refused(ep, "certificate verify failed");
  // The relay says so and gives up after its start-up deadline, exit 1.
  TempDir logs;
  InferenceServer inference;
  Process relay({relay_binary()},
                {{"RELAY_MODEL", "m1"},
                 {"RELAY_REDIS_URL", redis.url()},
                 {"RELAY_REDIS_TLS_CA_FILE", ep.tls_ca_file},
                 {"RELAY_INFERENCE_URL", inference.url()},
                 {"RELAY_RELAY_HEALTH_TIMEOUT", "1s"}},
                logs.path() + "/relay.log");
  EXPECT_EQ(relay.wait_exit(20s), 1);
  EXPECT_NE(relay.log().find("certificate verify failed"), std::string::npos) << relay.log();
}

TEST(RedisTls, TheServerMustCarryTheExpectedName) {
  RedisServer redis(false, {}, true);
  auto ep = redis.endpoint();  // 127.0.0.1: in the certificate as an IP address
  EXPECT_NO_THROW(redis::Connection::open(ep));
  ep.tls_server_name = "redis.example.com";
  expect_refused(ep, "TLS handshake");
  ep.tls_server_name = "localhost";
  EXPECT_NO_THROW(redis::Connection::open(ep).command({"PING"}));
}

TEST(RedisTls, ClientCertificateWhenTheServerRequiresOne) {
  RedisServer redis(false, {"--tls-auth-clients", "yes"}, true);
  auto ep = redis.endpoint();
  EXPECT_THROW(redis::Connection::open(ep), redis::IoError);
  ep.tls_cert_file = redis.tls_dir() + "/client.crt";
  ep.tls_key_file = redis.tls_dir() + "/client.key";
  EXPECT_EQ(redis::as_string(redis::Connection::open(ep).command({"PING"}).get()), "PONG");
}

TEST(RedisTls, VerificationIsOffOnlyWhenAskedAndPlainTcpIsRefused) {
  RedisServer redis(false, {}, true);
  auto ep = redis.endpoint();
  ep.tls_ca_file = redis.tls_dir() + "/other-ca.crt";
  ep.tls_verify = false;
  EXPECT_EQ(redis::as_string(redis::Connection::open(ep).command({"PING"}).get()), "PONG");
  // redis:// to a TLS port: no answer that could be mistaken for Redis.
  auto plain = redis::parse_url("redis://127.0.0.1:" + std::to_string(redis.port()));
  plain.connect_timeout = std::chrono::milliseconds(2000);
  EXPECT_THROW(redis::Connection::open(plain), redis::IoError);
}

TEST(RedisTls, RelayctlReadsTheSameTlsSettings) {
  RedisServer redis(false, {}, true);
  TempDir logs;
  Env env = redis.env();
  Process ok({RELAY_TEST_RELAYCTL_BIN, "--json", "queues"}, env, logs.path() + "/ok.log");
  EXPECT_EQ(ok.wait_exit(20s), 0) << ok.log();
  env["RELAY_REDIS_TLS_CA_FILE"] = redis.tls_dir() + "/other-ca.crt";
  Process refused({RELAY_TEST_RELAYCTL_BIN, "queues"}, env, logs.path() + "/refused.log");
  EXPECT_NE(refused.wait_exit(20s), 0);
  EXPECT_NE(refused.log().find("certificate verify failed"), std::string::npos) << refused.log();
}

TEST(RedisTls, TlsSettingsWithoutRedissAreAConfigError) {
  TempDir logs;
  RedisServer redis(false, {}, true);
  Process relay({relay_binary()},
                {{"RELAY_MODEL", "m1"},
                 {"RELAY_REDIS_URL", "redis://127.0.0.1:" + std::to_string(redis.port())},
                 {"RELAY_REDIS_TLS_CA_FILE", redis.tls_dir() + "/ca.crt"}},
                logs.path() + "/relay.log");
  EXPECT_EQ(relay.wait_exit(10s), 2);
  EXPECT_NE(relay.log().find("redis.tls_ca_file"), std::string::npos) << relay.log();
}

}  // namespace
}  // namespace relay::testing
