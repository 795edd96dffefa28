// S3 with the credentials pods get: web identity (STS AssumeRoleWithWebIdentity) and the
// container credentials endpoint, against the tests' own credentials server
// (tests/aws/credentials_server.py) and the S3 proxy accepting exactly the credentials it issued,
// until they expire — so an upload that outlives its credentials fails unless they are refreshed.

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <boost/json.hpp>
#include <fstream>
#include <set>
#include <thread>

#include "common/errors.hpp"
#include "harness.hpp"
#include "storage/storage.hpp"

namespace relay::testing {
namespace {

class CredentialsServer {
 public:
  explicit CredentialsServer(double lifetime_s) : port_(free_port()) {
    proc_ = std::make_unique<Process>(
        std::vector<std::string>{"/usr/bin/python3", RELAY_TEST_CREDENTIALS_SERVER, "--port",
                                 std::to_string(port_), "--credentials-file", credentials_file(),
                                 "--log", dir_.path() + "/issued.log", "--lifetime",
                                 std::to_string(lifetime_s)},
        Env{}, dir_.path() + "/server.log");
    if (!wait_until([&] { return port_open(port_); }, 20s))
      throw std::runtime_error("credentials server did not start: " + proc_->log());
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string credentials_file() const { return dir_.path() + "/credentials.jsonl"; }
  // One object per issued set: via, akid, token (the identity token presented), role.
  std::vector<boost::json::object> issued() const {
    std::vector<boost::json::object> out;
    std::ifstream f(dir_.path() + "/issued.log");
    for (std::string line; std::getline(f, line);)
      out.push_back(boost::json::parse(line).as_object());
    return out;
  }

 private:
  TempDir dir_;
  int port_;
  std::unique_ptr<Process> proc_;
};

// Slow on purpose: the upload has to outlive the credentials it started with.
class SlowSource final : public ByteSource {
 public:
  SlowSource(size_t total, std::chrono::milliseconds per_mib) : total_(total), pause_(per_mib) {}
  size_t read(std::span<char> buf) override {
    if (sent_ == total_) return 0;
    if (sent_ % (1 << 20) == 0) std::this_thread::sleep_for(pause_);
    size_t n = std::min({buf.size(), total_ - sent_, (1 << 20) - sent_ % (1 << 20)});
    for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>((sent_ + i) * 2654435761u >> 13);
    sent_ += n;
    return n;
  }

 private:
  size_t total_, sent_ = 0;
  std::chrono::milliseconds pause_;
};

std::string sha256_of(storage::Storage& st, const std::string& key, size_t* size) {
  auto src = st.open(key, {});
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buf(1 << 16, '\0');
  *size = 0;
  while (size_t n = src->read(buf)) {
    EVP_DigestUpdate(ctx, buf.data(), n);
    *size += n;
  }
  unsigned char md[32];
  EVP_DigestFinal_ex(ctx, md, nullptr);
  EVP_MD_CTX_free(ctx);
  return std::string(reinterpret_cast<char*>(md), 32);
}

std::string sha256_of(SlowSource src) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buf(1 << 16, '\0');
  while (size_t n = src.read(buf)) EVP_DigestUpdate(ctx, buf.data(), n);
  unsigned char md[32];
  EVP_DigestFinal_ex(ctx, md, nullptr);
  EVP_MD_CTX_free(ctx);
  return std::string(reinterpret_cast<char*>(md), 32);
}

void clear_aws_env() {
  for (const char* v :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_CONTAINER_AUTHORIZATION_TOKEN"})
    ::unsetenv(v);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// "sts" or "container": the same scenarios through each source.
class PodCredentialsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void start(double lifetime_s, const std::string& token) {
    creds_ = std::make_unique<CredentialsServer>(lifetime_s);
    s3_ = std::make_unique<S3Server>(creds_->credentials_file());
    clear_aws_env();
    token_file_ = dir_.path() + "/token";
    write_file(token_file_, token + "\n");  // a trailing newline, as mounted files often have
    if (GetParam() == "sts") {
      ::setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/relay", 1);
      ::setenv("AWS_WEB_IDENTITY_TOKEN_FILE", token_file_.c_str(), 1);
      ::setenv("AWS_ENDPOINT_URL_STS", creds_->url("/sts").c_str(), 1);
      ::setenv("AWS_ROLE_SESSION_NAME", "relay-test", 1);
    } else {
      ::setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", creds_->url("/creds").c_str(), 1);
      ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file_.c_str(), 1);
    }
    storage::Config c;
    c.url = "s3://" + s3_->bucket() + "/pfx";
    c.s3_endpoint = s3_->endpoint();
    c.s3_path_style = true;
    c.s3_part_size = 5 << 20;
    c.s3_timeout = 5s;
    st_ = storage::make_storage(c);
  }
  // The token the service accepts: any for STS (it checks the role), a fixed one for the
  // container endpoint.
  std::string good_token() const {
    return GetParam() == "sts" ? "oidc-token-1" : "pod-identity-token";
  }

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<CredentialsServer> creds_;
  std::unique_ptr<S3Server> s3_;
  std::unique_ptr<storage::Storage> st_;
};

TEST_P(PodCredentialsTest, SignsWithIssuedCredentialsAndSendsTheSessionToken) {
  start(3600, good_token());
  MemorySource body("hello from a pod");
  st_->put("svc/a/input", body, {});
  size_t size = 0;
  sha256_of(*st_, "svc/a/input", &size);
  EXPECT_EQ(size, 16u);
  auto issued = creds_->issued();
  ASSERT_EQ(issued.size(), 1u) << "credentials are cached while valid, not fetched per request";
  EXPECT_EQ(issued[0].at("via").as_string(), GetParam() == "sts" ? "sts" : "container");
  EXPECT_EQ(issued[0].at("token").as_string(), good_token()) << "token file read and trimmed";
}

TEST_P(PodCredentialsTest, LongUploadOutlivesItsCredentialsAndRereadsTheTokenFile) {
  // Credentials live 1.5 s; the upload takes about 4 s (24 MiB at 6 MiB/s, five parts).
  start(1.5, good_token());
  if (GetParam() == "sts") write_file(token_file_, "oidc-token-2");  // the kubelet rotated it
  SlowSource body(24 << 20, 160ms);
  st_->put("svc/b/input", body, {});
  size_t size = 0;
  EXPECT_EQ(sha256_of(*st_, "svc/b/input", &size), sha256_of(SlowSource(24 << 20, 0ms)));
  EXPECT_EQ(size, size_t{24} << 20);
  auto issued = creds_->issued();
  EXPECT_GE(issued.size(), 3u) << "the credentials were refreshed during the upload";
  std::set<std::string> akids;
  for (const auto& i : issued) akids.insert(std::string(i.at("akid").as_string()));
  EXPECT_EQ(akids.size(), issued.size());
  if (GetParam() == "sts") {  // (braces: EXPECT_EQ ends in an if/else of its own)
    EXPECT_EQ(issued.back().at("token").as_string(), "oidc-token-2");
  }
}

TEST_P(PodCredentialsTest, RefusedIdentityIsAClearAccessDenied) {
  start(3600, good_token());
  if (GetParam() == "sts")
    ::setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/other", 1);
  else
    write_file(token_file_, "stolen-token");
  // The provider reads the environment when storage is made: make it again.
  storage::Config c;
  c.url = "s3://" + s3_->bucket();
  c.s3_endpoint = s3_->endpoint();
  c.s3_path_style = true;
  auto st = storage::make_storage(c);
  MemorySource body("x");
  try {
    st->put("svc/c/input", body, {});
    FAIL() << "put succeeded without valid credentials";
  } catch (const storage::StorageError& e) {
    EXPECT_EQ(e.kind(), storage::ErrorKind::access_denied) << e.what();
    std::string what = e.what();
    EXPECT_NE(what.find(GetParam() == "sts" ? "AccessDenied" : "HTTP 401"), std::string::npos)
        << what;
  }
  EXPECT_TRUE(creds_->issued().empty());
}

TEST_P(PodCredentialsTest, UnreachableServiceIsUnavailableNotAConfigError) {
  start(3600, good_token());
  creds_.reset();  // the service goes away before the first request
  MemorySource body("x");
  try {
    st_->put("svc/d/input", body, {});
    FAIL();
  } catch (const storage::StorageError& e) {
    EXPECT_EQ(e.kind(), storage::ErrorKind::unavailable) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Sources, PodCredentialsTest, ::testing::Values("sts", "container"));

}  // namespace
}  // namespace relay::testing
