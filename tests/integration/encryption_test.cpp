// Encryption at rest end to end: ciphertext in storage, plaintext to the model and the client,
// key rotation, damaged and unreadable inputs.

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

// Keys: base64 of bytes 0..31 and 32..63.
constexpr const char* kKey1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

constexpr const char* kKey2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

class EncryptionTest : public GatewayTest {
 protected:
  Env keys(const std::string& active, bool with_k2 = false) {
    Env env{{"RELAY_ENCRYPTION_ENABLED", "true"},
            {"RELAY_ENCRYPTION_ACTIVE_KEY", active},
            {"RELAY_ENCRYPTION_KEY_K1", kKey1}};
    if (with_k2) env["RELAY_ENCRYPTION_KEY_K2"] = kKey2;
    return env;
  }
  std::string file(const std::string& rel) {
    std::ifstream f(files_.path() + "/" + rel, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  void put_file(const std::string& rel, const std::string& data) {
    std::ofstream(files_.path() + "/" + rel, std::ios::binary) << data;
  }
};

TEST_F(EncryptionTest, JobsAreCiphertextAtRestAndPlaintextToTheModelAndTheClient) {
  start_gateway(keys("k1"));
  InferenceServer inference;
  const std::string secret = "the patient's confidential recording";
  auto id = submit_id(secret);
  std::string stored = file("echo/" + id + "/input");
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(static_cast<unsigned char>(stored[0]), 40) << "Tink header length for AES-256";
  EXPECT_EQ(stored.find("confidential"), std::string::npos);
  EXPECT_EQ(store_.get("m1", id)->key_id, "k1");
  // An independent implementation holding the key reads it (Tink format, bound to "<id>/input").
  TempDir tmp;
  std::ofstream(tmp.path() + "/ct", std::ios::binary) << stored;
  std::string cmd = std::string("/usr/bin/python3 ") + RELAY_TEST_TINK_PY +
                    " decrypt 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f " +
                    id + "/input 1048576 < " + tmp.path() + "/ct > " + tmp.path() + "/pt";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream pt(tmp.path() + "/pt");
  std::string plain((std::istreambuf_iterator<char>(pt)), std::istreambuf_iterator<char>());
  EXPECT_EQ(plain, secret);

  auto relay = start_relay(inference, keys("k1"));
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  ASSERT_EQ(str(j, "status"), "completed") << j.at("error");
  EXPECT_TRUE(j.at("timings").as_object().contains("decrypt"));
  std::string stored_result = file("echo/" + id + "/result.json");
  EXPECT_EQ(static_cast<unsigned char>(stored_result[0]), 40);
  EXPECT_EQ(stored_result.find("sha256"), std::string::npos) << "the result is encrypted too";
  auto result = http("GET", url("/jobs/echo/" + id + "/result"));
  EXPECT_EQ(result.status, 200);
  // The model saw the plaintext: its answer reports the size of the original bytes.
  EXPECT_NE(result.body.find("\"size\":" + std::to_string(secret.size())), std::string::npos)
      << result.body;
}

// Inputs larger than an S3 part, encrypted on their way in, take both S3 paths of the push
// writer: a raw body of known length (its ciphertext size known too) is one streamed PUT, a
// multipart form's file (length unknown) a multipart upload. The model sees the exact bytes.
TEST_F(EncryptionTest, LargeInputsReachS3WholeAndTheModelExactly) {
  S3Server s3;
  Env storage = s3.env();
  storage["RELAY_STORAGE_S3_PART_SIZE"] = std::to_string(5 << 20);
  Env env = keys("k1");
  for (auto& [k, v] : storage) env[k] = v;
  start_gateway(env);
  std::string data(7 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + (i >> 12));
  auto raw = http("POST", url("/jobs/echo?filename=big.bin"),
                  {"Content-Type: application/octet-stream"}, data);
  ASSERT_EQ(raw.status, 202) << raw.body << gateway_->log();
  auto form = http("POST", url("/jobs/echo"), {}, {},
                   {FormPart{"file", data, "big.bin", "application/octet-stream"}});
  ASSERT_EQ(form.status, 202) << form.body << gateway_->log();
  InferenceServer inference;
  auto relay = start_relay(inference, env, {"--max-jobs", "2"});
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& submitted : {raw, form}) {
    const std::string id = field(submitted, "id");
    auto j = job(id);
    ASSERT_EQ(str(j, "status"), "completed") << j.at("error");
    EXPECT_EQ(j.at("input").as_object().at("size").as_int64(),
              static_cast<std::int64_t>(data.size()));
    auto result = http("GET", url("/jobs/echo/" + id + "/result"));
    EXPECT_NE(result.body.find("\"sha256\":\"" + sha256_hex(data) + "\""), std::string::npos)
        << result.body;
  }
}

// A byte range of an encrypted result reads and decrypts only the segments holding it (small
// segments here: a range crosses many), on S3; the whole download tells its plaintext length.
TEST_F(EncryptionTest, AnEncryptedResultIsServedInByteRanges) {
  S3Server s3;
  Env env = keys("k1");
  for (auto& [k, v] : s3.env()) env[k] = v;
  env["RELAY_ENCRYPTION_SEGMENT_SIZE"] = "4096";
  start_gateway(env);
  InferenceServer inference({.result_bytes = 300'000});
  auto id = submit_id("a result to resume");
  ASSERT_EQ(start_relay(inference, env)->wait_exit(30s), 0);
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 10s));
  expect_ranges_served(id);
}

// A sealed result larger than an S3 part goes in parts (the relay's put, one part at a time):
// whole, it decrypts to the model's answer; in byte ranges, across the parts' seams too.
TEST_F(EncryptionTest, AnEncryptedResultOverAPartIsStoredInPartsAndServedWhole) {
  S3Server s3({}, {"--log-puts"});
  Env env = keys("k1");
  for (auto& [k, v] : s3.env()) env[k] = v;
  env["RELAY_STORAGE_S3_PART_SIZE"] = std::to_string(5 << 20);
  start_gateway(env);
  InferenceServer inference({.result_bytes = 11 << 20});
  auto id = submit_id("a large result");
  ASSERT_EQ(start_relay(inference, env)->wait_exit(60s), 0);
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "completed"; }, 10s));
  EXPECT_NE(s3.log().find("partNumber=3&"), std::string::npos) << "in parts: " << s3.log();
  expect_ranges_served(id);
  auto whole = http("GET", url("/jobs/echo/" + id + "/result"));
  EXPECT_GT(whole.body.size(), std::size_t{11} << 20);
  EXPECT_TRUE(boost::json::parse(whole.body).is_object()) << "the model's answer, decrypted";
  const size_t seam = 5 << 20;  // where the ciphertext's first part ends, near enough
  auto across =
      http("GET", url("/jobs/echo/" + id + "/result"),
           {"Range: bytes=" + std::to_string(seam - 100000) + "-" + std::to_string(seam + 99999)});
  EXPECT_EQ(across.status, 206);
  EXPECT_TRUE(across.body == whole.body.substr(seam - 100000, 200000));
}

TEST_F(EncryptionTest, KeyRotationNeedsNoDowntime) {
  start_gateway(keys("k1"));
  auto old_job = submit_id("under key 1");
  ASSERT_EQ(gateway_->stop(), 0);
  gateway_ =
      std::make_unique<GatewayServer>(gateway_env(keys("k2", true)));  // k2 active, k1 still loaded
  auto new_job = submit_id("under key 2");
  EXPECT_EQ(store_.get("m1", old_job)->key_id, "k1");
  EXPECT_EQ(store_.get("m1", new_job)->key_id, "k2");
  InferenceServer inference;
  auto relay = start_relay(inference, keys("k2", true), {"--max-jobs", "0"});
  ASSERT_EQ(relay->wait_exit(20s), 0);
  for (auto& id : {old_job, new_job}) {
    EXPECT_EQ(str(job(id), "status"), "completed") << id;
    EXPECT_EQ(http("GET", url("/jobs/echo/" + id + "/result")).status, 200) << id;
  }
}

TEST_F(EncryptionTest, DamagedInputFailsTheJobAndTheModelIsNeverCalled) {
  start_gateway(keys("k1"));
  InferenceServer inference;
  auto id = submit_id("will be damaged");
  std::string ct = file("echo/" + id + "/input");
  ct[45] ^= 1;  // inside the first segment
  put_file("echo/" + id + "/input", ct);
  auto relay = start_relay(inference, keys("k1"));
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  EXPECT_EQ(str(j, "status"), "failed");
  EXPECT_EQ(str(j.at("error").as_object(), "code"), "decryption_failed");
  EXPECT_TRUE(inference.events().empty()) << "no request reached the model";
}

TEST_F(EncryptionTest, ARelayWithoutTheKeyFailsTheJobClearly) {
  start_gateway(keys("k2", true));
  InferenceServer inference;
  auto id = submit_id("needs k2");
  auto relay = start_relay(inference, keys("k1"));  // has k1 only
  ASSERT_EQ(relay->wait_exit(20s), 0);
  auto j = job(id);
  EXPECT_EQ(str(j.at("error").as_object(), "code"), "decryption_failed");
  EXPECT_NE(str(j.at("error").as_object(), "message").find("'k2'"), std::string::npos);
  EXPECT_TRUE(inference.events().empty());
}

TEST_F(EncryptionTest, EnabledWithoutTheActiveKeyRefusesToStart) {
  Env env = gateway_env(
      {{"RELAY_ENCRYPTION_ENABLED", "true"}, {"RELAY_ENCRYPTION_ACTIVE_KEY", "missing"}});
  env["RELAY_SERVER_LISTEN"] = "127.0.0.1:" + std::to_string(free_port());
  TempDir dir;
  Process gw({gateway_binary()}, env, dir.path() + "/gw.log");
  ASSERT_EQ(gw.wait_exit(10s), 2);
  EXPECT_NE(gw.log().find("encryption.active_key"), std::string::npos);
}

}  // namespace
}  // namespace relay::testing
