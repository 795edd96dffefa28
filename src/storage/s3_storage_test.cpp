#include "storage/s3_storage.hpp"

#include <gtest/gtest.h>

namespace relay::storage {
namespace {

std::shared_ptr<CredentialsProvider> creds() {
  return make_credentials_provider(
      [](const std::string& n) -> std::optional<std::string> {
        if (n == "AWS_ACCESS_KEY_ID") return "AKID";
        if (n == "AWS_SECRET_ACCESS_KEY") return "secret";
        return std::nullopt;
      },
      "us-east-1", std::chrono::seconds(1));
}

TEST(S3Storage, PathStyleUrlsCarryBucketAndPrefix) {
  Config c;
  c.s3_endpoint = "http://127.0.0.1:9000";
  c.s3_path_style = true;
  S3Storage s(c, "bucket", "jobs/", creds());
  EXPECT_EQ(s.object_url("svc/id/input"), "http://127.0.0.1:9000/bucket/jobs/svc/id/input");
  EXPECT_EQ(s.object_url("a b+c", "partNumber=1&uploadId=x"),
            "http://127.0.0.1:9000/bucket/jobs/a%20b%2Bc?partNumber=1&uploadId=x");
}

TEST(S3Storage, VirtualHostedUrlsPutTheBucketInTheHost) {
  Config c;
  c.s3_region = "eu-west-1";
  S3Storage s(c, "my-bucket", "", creds());
  EXPECT_EQ(s.object_url("k"), "https://my-bucket.s3.eu-west-1.amazonaws.com/k");
}

TEST(S3Storage, BadEndpointIsAConfigError) {
  Config c;
  c.s3_endpoint = "ftp://x";
  EXPECT_THROW(S3Storage(c, "b", "", creds()), std::invalid_argument);
}

TEST(S3Error, CodeAndMessageAreExtracted) {
  auto [code, msg] = parse_s3_error(
      R"(<?xml version="1.0"?><Error><Code>NoSuchKey</Code><Message>The key does not exist</Message></Error>)");
  EXPECT_EQ(code, "NoSuchKey");
  EXPECT_EQ(msg, "The key does not exist");
  EXPECT_EQ(parse_s3_error("not xml").first, "");
}

}  // namespace
}  // namespace relay::storage
