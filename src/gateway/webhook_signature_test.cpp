#include "gateway/webhook_signature.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

TEST(WebhookSignature, StandardWebhooksTestVector) {
  auto key = decode_webhook_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  ASSERT_TRUE(key);
  EXPECT_EQ(
      sign_webhook(*key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, R"({"test": 2432232314})"),
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(WebhookSignature, SecretsMustBeWhsecBase64) {
  EXPECT_FALSE(decode_webhook_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
  EXPECT_FALSE(decode_webhook_secret("whsec_"));
  EXPECT_FALSE(decode_webhook_secret("whsec_abc"));  // not a multiple of 4
}

TEST(Base64, RoundTripsEveryLength) {
  std::string data;
  for (int n = 0; n < 20; ++n) {
    EXPECT_EQ(base64_decode(base64_encode(data)), data) << n;
    data += static_cast<char>(n * 37);
  }
}

}  // namespace
}  // namespace relay::gateway
