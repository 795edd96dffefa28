// Inputs by reference end to end: a submission names its input by URL (s3://, https://) instead
// of uploading it; the gateway checks the URL against the service type's prefixes and stores
// nothing; the relay streams the bytes to the model; a URL that cannot be read fails the job
// with a clear error.

#include <fstream>

#include "common/sha256.hpp"
#include "gateway_fixture.hpp"
#include "storage/storage.hpp"

namespace relay::testing {
namespace {

// The HTTPS origin (tests/inputs/https_server.py) with a certificate from a test CA.
class HttpsOrigin {
 public:
  // faults: https_server.py's (--cut N --cut-after BYTES, for /flaky/).
  explicit HttpsOrigin(std::vector<std::string> faults = {}) : port_(free_port()) {
    make_test_pki(pki_.path());
    std::vector<std::string> argv{"/usr/bin/python3",
                                  RELAY_TEST_HTTPS_ORIGIN,
                                  "--port",
                                  std::to_string(port_),
                                  "--dir",
                                  files_.path(),
                                  "--cert",
                                  pki_.path() + "/server.crt",
                                  "--key",
                                  pki_.path() + "/server.key"};
    argv.insert(argv.end(), faults.begin(), faults.end());
    proc_ = std::make_unique<Process>(argv, Env{}, files_.path() + "/origin.log");
    if (!wait_until([&] { return port_open(port_); }, 20s))
      throw std::runtime_error("https origin did not start: " + proc_->log());
  }
  std::string url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(port_) + path;
  }
  void put(const std::string& name, const std::string& data) const {
    std::ofstream(files_.path() + "/" + name, std::ios::binary) << data;
  }
  std::string ca() const { return pki_.path() + "/ca.crt"; }
  std::string requests() const {
    std::ifstream f(files_.path() + "/requests.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

 private:
  TempDir pki_, files_;
  int port_;
  std::unique_ptr<Process> proc_;
};

std::string bytes(std::size_t n) {
  std::string data(n, '\0');
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<char>(i * 131 + (i >> 10));
  return data;
}

class InputUrlTest : public GatewayTest {
 protected:
  // The gateway: echo takes s3:// inputs under relay-test/media/ and https:// ones from the
  // origin; other takes none. The relay trusts the origin's CA.
  void start(const std::string& https_prefix, Env extra = {}) {
    Env env{{"RELAY_INPUT_URLS_ALLOW_PRIVATE", "true"}};
    for (auto& [k, v] : extra) env[k] = v;
    start_gateway_with_config(
        "service_types:\n"
        "  echo:\n"
        "    model: m1\n"
        "    max_input_size: 4194304\n"
        "    input_urls: [\"s3://relay-test/media/\", \"" +
            https_prefix +
            "\"]\n"
            "  other: {model: m2}\n",
        env);
  }
  HttpResult submit_url(const std::string& input_url, const std::string& svc = "echo") {
    return http("POST", url("/jobs/" + svc), {}, {}, {{"input_url", input_url}});
  }
  Env relay_env(const HttpsOrigin& origin, const S3Server& s3, bool allow_private = true) {
    Env env{{"RELAY_INPUT_URLS_CA_FILE", origin.ca()},
            {"RELAY_INPUT_URLS_ALLOW_PRIVATE", allow_private ? "true" : "false"}};
    for (auto& [k, v] : s3.env())
      if (k != "RELAY_STORAGE_URL") env[k] = v;  // jobs are stored on files; inputs come from S3
    return env;
  }
  std::string sha_seen_by_model(const std::string& id) {
    auto result = http("GET", url("/jobs/echo/" + id + "/result"));
    auto parts = json::parse(result.body).as_object().at("parts").as_array();
    for (const auto& p : parts)
      if (p.as_object().at("name").as_string() == "file")
        return std::string(p.as_object().at("sha256").as_string());
    return "";
  }
};

// (The S3 inputs' reads are cut twice mid-way: resumed, the model still gets the exact bytes.)
TEST_F(InputUrlTest, S3AndHttpsInputsReachTheModelAndNothingIsStored) {
  HttpsOrigin origin;
  S3Server s3({}, {"--cut-gets", "2", "--cut-match", "media/clip.bin", "--cut-after", "1000000"});
  const std::string data = bytes(3 << 20);
  origin.put("clip.bin", data);
  TempDir local;
  std::ofstream(local.path() + "/clip.bin", std::ios::binary) << data;
  ASSERT_TRUE(s3.aws_put(local.path() + "/clip.bin", "media/clip.bin"));
  start(origin.url("/"));
  std::vector<std::string> ids;
  for (const std::string& u : {std::string("s3://relay-test/media/clip.bin"),
                               origin.url("/files/clip.bin"), origin.url("/chunked/clip.bin"),
                               origin.url("/redirect?to=") + origin.url("/files/clip.bin")}) {
    auto r = submit_url(u);
    ASSERT_EQ(r.status, 202) << u << ": " << r.body;
    auto j = parse(r);
    EXPECT_EQ(str(j.at("input").as_object(), "url"), u);
    ids.push_back(str(j, "id"));
  }
  // A raw submission names it in the query, with no body.
  auto raw =
      http("POST", url("/jobs/echo?input_url=s3://relay-test/media/clip.bin&filename=a.bin"));
  ASSERT_EQ(raw.status, 202) << raw.body;
  ids.push_back(field(raw, "id"));
  EXPECT_EQ(stored_files(), 0u) << "nothing copied through the gateway";
  InferenceServer inference;
  auto relay = start_relay(inference, relay_env(origin, s3), {"--max-jobs", "5"});
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  for (const auto& id : ids) {
    auto j = job(id);
    ASSERT_EQ(str(j, "status"), "completed") << j;
    EXPECT_EQ(sha_seen_by_model(id), sha256_hex(data)) << "the model got the exact bytes";
  }
  EXPECT_EQ(occurrences(s3.log(), "s3 fault: GET"), 2u) << s3.log();
  EXPECT_EQ(occurrences(relay->log(), "storage read failed; resuming"), 2u) << relay->log();
  EXPECT_EQ(str(job(ids[0]).at("input").as_object(), "filename"), "clip.bin");
  EXPECT_EQ(str(job(ids[4]).at("input").as_object(), "filename"), "a.bin");
}

// An https input whose connection drops mid-way (twice) is asked for the rest (Range, If-Range
// on its ETag): the model gets the exact bytes, in one request.
TEST_F(InputUrlTest, AnHttpsInputResumesAfterADroppedConnection) {
  HttpsOrigin origin({"--cut", "2", "--cut-after", "1000000"});
  S3Server s3;
  const std::string data = bytes(3 << 20);
  origin.put("clip.bin", data);
  start(origin.url("/"));
  auto r = submit_url(origin.url("/flaky/clip.bin"));
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = str(parse(r), "id");
  InferenceServer inference;
  auto relay = start_relay(inference, relay_env(origin, s3));
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  auto j = job(id);
  ASSERT_EQ(str(j, "status"), "completed") << j << relay->log();
  EXPECT_EQ(sha_seen_by_model(id), sha256_hex(data));
  EXPECT_EQ(occurrences(origin.requests(), "cut"), 2u) << origin.requests();
  EXPECT_EQ(occurrences(inference.events(), "request /predict"), 1u);
}

// An input host whose name server does not answer holds the relay only until the job's stop:
// a cancel ends the job at once, and SIGTERM gives the next one back and exits, where
// getaddrinfo would have held the job's thread for its retries (20 s here). The gateway's name
// server answers (127.0.0.1), the relay's hangs (faults/slow_dns.cpp).
TEST_F(InputUrlTest, AHangingNameServerHoldsNeitherACancelNorASigterm) {
  Env accepting = slow_dns_env(0);
  start("https://in.slow.test/", accepting);
  const std::string first = field(submit_url("https://in.slow.test/a.bin"), "id");
  const std::string second = field(submit_url("https://in.slow.test/b.bin"), "id");
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  const std::string lookups = logs_.path() + "/relay-dns.log";
  Env hanging = slow_dns_env(20'000, lookups);
  hanging["RELAY_INPUT_URLS_ALLOW_PRIVATE"] = "true";
  InferenceServer inference;
  auto relay = start_relay(inference, hanging, {"--max-jobs", "0"});
  auto looked_up = [&] {
    std::ifstream in(lookups);
    return std::count(std::istreambuf_iterator<char>(in), {}, '\n');
  };
  ASSERT_TRUE(wait_until([&] { return looked_up() >= 1; }, 10s)) << relay->log();
  EXPECT_EQ(http("DELETE", url("/jobs/echo/" + first)).status, 202);
  ASSERT_TRUE(wait_until([&] { return str(job(first), "status") == "cancelled"; }, 5s))
      << job(first) << relay->log();
  ASSERT_TRUE(wait_until([&] { return str(job(second), "status") == "processing"; }, 5s))
      << job(second) << relay->log();
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait_exit(5s), 0) << relay->log();
  EXPECT_EQ(str(job(second), "status"), "pending") << "given back";
  EXPECT_FALSE(inference.saw("request /predict")) << "no input ever reached the model";
}

TEST_F(InputUrlTest, TheGatewayRefusesWhatTheServiceTypeDoesNotAllow) {
  HttpsOrigin origin;
  start(origin.url("/files/"));
  auto code_of = [&](const HttpResult& r) { return r.status == 400 ? error_code(r) : r.body; };
  EXPECT_EQ(code_of(submit_url("s3://relay-test/private/x")), "input_url_not_allowed");
  EXPECT_EQ(code_of(submit_url("s3://relay-test/media/../private/x")), "invalid_input_url");
  EXPECT_EQ(code_of(submit_url(origin.url("/files/%2e%2e/x"))), "invalid_input_url");
  EXPECT_EQ(code_of(submit_url(origin.url("/chunked/x"))), "input_url_not_allowed");
  EXPECT_EQ(code_of(submit_url("http://example.com/x")), "invalid_input_url");
  EXPECT_EQ(code_of(submit_url("file:///etc/passwd")), "invalid_input_url");
  EXPECT_EQ(code_of(submit_url("s3://relay-test/media/x", "other")), "input_url_not_allowed");
  // Both a file and a URL: which one was meant?
  auto both =
      http("POST", url("/jobs/echo"), {}, {},
           {{"file", "x", "x.txt", "text/plain"}, {"input_url", "s3://relay-test/media/x"}});
  EXPECT_EQ(code_of(both), "invalid_input_url");
  auto raw_both = http("POST", url("/jobs/echo?input_url=s3://relay-test/media/x"),
                       {"Content-Type: text/plain"}, "body too");
  EXPECT_EQ(code_of(raw_both), "invalid_input_url");
  EXPECT_EQ(job_records(), 0);
  EXPECT_EQ(stored_files(), 0u);
}

// Gigabyte media by reference: 512 MiB from S3 reach the model through a relay that stays
// under 64 MiB of memory.
TEST_F(InputUrlTest, A512MiBS3InputStreamsInBoundedMemory) {
  HttpsOrigin origin;
  S3Server s3;
  const std::uint64_t size = 512ull << 20;
  {
    storage::Config c;
    c.url = "s3://" + s3.bucket();
    c.s3_endpoint = s3.endpoint();
    c.s3_path_style = true;
    for (const auto& [k, v] : s3.env())
      if (k.starts_with("AWS_")) ::setenv(k.c_str(), v.c_str(), 1);
    PatternSource pattern(size);
    storage::make_storage(c)->put("media/big.bin", pattern, {});
  }
  start_gateway_with_config(
      "service_types:\n  echo: {model: m1, input_urls: [\"s3://relay-test/media/\"]}\n");
  auto r = submit_url("s3://relay-test/media/big.bin");
  ASSERT_EQ(r.status, 202) << r.body;
  InferenceServer inference;
  auto relay = start_relay(inference, relay_env(origin, s3));
  ASSERT_EQ(relay->wait_exit(300s), 0) << relay->log();
  const std::string id = field(r, "id");
  ASSERT_EQ(str(job(id), "status"), "completed") << job(id);
  auto answer = json::parse(http("GET", url("/jobs/echo/" + id + "/result")).body).as_object();
  EXPECT_EQ(answer.at("parts").as_array()[0].as_object().at("size").as_int64(),
            static_cast<std::int64_t>(size));
  std::cerr << "relay peak RSS: /proc VmHWM " << relay->peak_rss_proc_kib() << " KiB\n";
  if (kSanitized) GTEST_SKIP() << kSanitizedSkip;
  EXPECT_GT(relay->peak_rss_proc_kib(), 0);
  EXPECT_LT(relay->peak_rss_proc_kib(), 64 * 1024);
}

// What cannot be read fails the job, with a code saying why: missing, too large, a redirect to
// a private address (the relay's own check), a missing S3 object.
TEST_F(InputUrlTest, UnreadableInputsFailTheJobClearly) {
  HttpsOrigin origin;
  S3Server s3;
  origin.put("big.bin", bytes(5 << 20));  // over echo's 4 MiB
  origin.put("small.bin", "small");
  start(origin.url("/"));
  auto id_of = [&](const std::string& u) {
    auto r = submit_url(u);
    EXPECT_EQ(r.status, 202) << r.body;
    return field(r, "id");
  };
  const std::string missing = id_of(origin.url("/files/nothing.bin"));
  const std::string big = id_of(origin.url("/files/big.bin"));
  const std::string big_chunked = id_of(origin.url("/chunked/big.bin"));
  const std::string no_object = id_of("s3://relay-test/media/nothing.bin");
  InferenceServer inference;
  auto relay = start_relay(inference, relay_env(origin, s3), {"--max-jobs", "4"});
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  auto error_of = [&](const std::string& id) {
    auto j = job(id);
    EXPECT_EQ(str(j, "status"), "failed");
    return j.at("error").is_object() ? str(j.at("error").as_object(), "code") : "";
  };
  EXPECT_EQ(error_of(missing), "input_unreadable");
  EXPECT_NE(str(job(missing).at("error").as_object(), "message").find("404"), std::string::npos);
  EXPECT_EQ(error_of(big), "input_too_large");
  EXPECT_EQ(error_of(big_chunked), "input_too_large");
  EXPECT_EQ(error_of(no_object), "input_unreadable");
  // None reached the model whole: a declared size over the limit, or a missing object, fails
  // before the model is contacted; a chunked body is cut mid-request.
  EXPECT_FALSE(inference.saw("done /predict")) << inference.events();

  // A relay that does not allow private addresses refuses the origin (on loopback), even
  // though the gateway let the URL in.
  const std::string refused = id_of(origin.url("/files/small.bin"));
  auto strict = start_relay(inference, relay_env(origin, s3, /*allow_private=*/false));
  ASSERT_EQ(strict->wait_exit(30s), 0) << strict->log();
  EXPECT_EQ(error_of(refused), "input_url_refused");
}

}  // namespace
}  // namespace relay::testing
