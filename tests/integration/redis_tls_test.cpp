// Redis over TLS (Debian's redis-server built with TLS, a test CA made per test): the relay and
// the gateway end to end over rediss://, and the connection's refusals — wrong CA, wrong name,
// missing client certificate — each a clear error, with verification off only when asked.

#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json.hpp>
#include <filesystem>

#include "harness.hpp"
#include "http_client.hpp"

namespace relay::testing {
namespace {

namespace fs = std::filesystem;

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

// A Secret's volume as the kubelet writes it: the files live in a directory of their own, reached
// through the symlink ..data, which an update points at a new directory in one rename; the names
// a container reads (tls.crt → ..data/tls.crt) never change. cert-manager renews a certificate
// this way, and a CA bundle is rotated the same way.
class SecretVolume {
 public:
  explicit SecretVolume(std::vector<std::string> names) {
    for (const auto& name : names) fs::create_symlink("..data/" + name, dir_.path() + "/" + name);
  }
  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }
  // The next version: each name's content copied from a file.
  void publish(const std::map<std::string, std::string>& from) {
    const std::string version = "..v" + std::to_string(++versions_);
    fs::create_directory(dir_.path() + "/" + version);
    for (const auto& [name, file] : from)
      fs::copy_file(file, dir_.path() + "/" + version + "/" + name);
    fs::create_symlink(version, dir_.path() + "/..data_tmp");
    fs::rename(dir_.path() + "/..data_tmp", dir_.path() + "/..data");
  }

 private:
  TempDir dir_;
  int versions_ = 0;
};

// The test client's key certified by the other CA of the test PKI (make_test_pki): a certificate
// Redis does not take until it trusts that CA. Its path, empty if openssl failed.
std::string client_certificate_of_the_other_ca(const std::string& pki) {
  const std::string out = pki + "/client-of-other-ca.crt";
  const std::string cmd = "cd '" + pki +
                          "' && openssl x509 -req -in client.csr -CA other-ca.crt -CAkey "
                          "other-ca.key -CAcreateserial -out client-of-other-ca.crt -days 3 "
                          "-extfile client.ext 2>/dev/null";
  return std::system(cmd.c_str()) == 0 ? out : "";
}

std::string ping(const redis::Endpoint& ep) {
  return redis::as_string(redis::Connection::open(ep).command({"PING"}).get());
}

// A client certificate renewed in place is used from the next connection on, without a restart
// (a gateway runs for months; its certificate may last weeks), and connections made before keep
// theirs. A renewal half-written — a certificate whose key is not there yet — leaves the last
// good files in use.
TEST(RedisTls, ARenewedClientCertificateIsUsedFromTheNextConnection) {
  RedisServer redis(false, {"--tls-auth-clients", "yes"}, true);
  const std::string pki = redis.tls_dir();
  // A certificate Redis does not take (another CA signed it), as an expired one would be.
  const std::string stale = client_certificate_of_the_other_ca(pki);
  ASSERT_FALSE(stale.empty());
  SecretVolume secret({"tls.crt", "tls.key"});
  auto ep = redis.endpoint();
  ep.tls_cert_file = secret.path("tls.crt");
  ep.tls_key_file = secret.path("tls.key");
  secret.publish({{"tls.crt", stale}, {"tls.key", pki + "/client.key"}});
  EXPECT_THROW(ping(ep), redis::IoError) << "Redis refuses the stale certificate";

  secret.publish({{"tls.crt", pki + "/client.crt"}, {"tls.key", pki + "/client.key"}});
  auto before = redis::Connection::open(ep);
  EXPECT_EQ(redis::as_string(before.command({"PING"}).get()), "PONG");

  // The server's certificate with the client's key: a pair that cannot be loaded.
  secret.publish({{"tls.crt", pki + "/server.crt"}, {"tls.key", pki + "/client.key"}});
  EXPECT_EQ(ping(ep), "PONG") << "the last good certificate still serves";
  EXPECT_EQ(redis::as_string(before.command({"PING"}).get()), "PONG");
  secret.publish({{"tls.crt", stale}, {"tls.key", pki + "/client.key"}});
  EXPECT_THROW(ping(ep), redis::IoError) << "a loadable pair is used again";
}

// The CA bundle the client verifies Redis with, rotated in place: read by the next connection.
TEST(RedisTls, ARotatedCaBundleIsReadByTheNextConnection) {
  RedisServer redis(false, {}, true);
  SecretVolume secret({"ca.crt"});
  auto ep = redis.endpoint();
  ep.tls_ca_file = secret.path("ca.crt");
  secret.publish({{"ca.crt", redis.tls_dir() + "/other-ca.crt"}});
  expect_refused(ep, "certificate verify failed");
  secret.publish({{"ca.crt", redis.tls_dir() + "/ca.crt"}});
  EXPECT_EQ(ping(ep), "PONG");
}

// End to end: Redis moves to another CA for its clients and the gateway's certificate is
// re-issued by it, in place. Once Redis drops the gateway's connections (a restart, a failover),
// the gateway reconnects with the new certificate and serves on, no restart.
TEST(RedisTls, AGatewayReconnectsWithItsRenewedCertificate) {
  RedisServer redis(false, {"--tls-auth-clients", "yes"}, true);
  const std::string pki = redis.tls_dir();
  const std::string reissued = client_certificate_of_the_other_ca(pki);
  ASSERT_FALSE(reissued.empty());
  SecretVolume secret({"tls.crt", "tls.key"});
  secret.publish({{"tls.crt", pki + "/client.crt"}, {"tls.key", pki + "/client.key"}});
  auto ep = redis.endpoint();
  ep.tls_cert_file = pki + "/client.crt";
  ep.tls_key_file = pki + "/client.key";
  auto admin = redis::Connection::open(ep);  // opened now: Redis keeps it through the change
  TempDir files;
  GatewayServer gateway({{"RELAY_REDIS_URL", redis.url()},
                         {"RELAY_REDIS_TLS_CA_FILE", pki + "/ca.crt"},
                         {"RELAY_REDIS_TLS_CERT_FILE", secret.path("tls.crt")},
                         {"RELAY_REDIS_TLS_KEY_FILE", secret.path("tls.key")},
                         {"RELAY_REDIS_RETRY_TIMEOUT", "1s"},
                         {"RELAY_STORAGE_URL", "file://" + files.path()},
                         {"RELAY_SERVICE_TYPES", "echo=m1"},
                         {"RELAY_AUTH_ENABLED", "false"}});
  auto submit = [&] {
    return http("POST", gateway.url() + "/jobs/echo", {}, {},
                {{"file", "x", "a.txt", "text/plain"}})
        .status;
  };
  ASSERT_EQ(submit(), 202) << gateway.log();

  secret.publish({{"tls.crt", reissued}, {"tls.key", pki + "/client.key"}});
  admin.command({"CONFIG", "SET", "tls-ca-cert-file", pki + "/other-ca.crt"});
  admin.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  admin.command({"CLIENT", "KILL", "TYPE", "pubsub"});
  EXPECT_TRUE(wait_until([&] { return submit() == 202; }, 20s)) << gateway.log();
  EXPECT_NE(gateway.log().find("redis TLS files changed"), std::string::npos) << gateway.log();
  EXPECT_EQ(redis::as_integer(admin.command({"LLEN", "relay:m1:pending"}).get()), 2)
      << "the job before and the one after";
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
