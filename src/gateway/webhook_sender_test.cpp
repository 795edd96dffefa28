#include "gateway/webhook_sender.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

using std::chrono::milliseconds;

// initial · 2^(n-1), jittered into [d/2, d]: each attempt's delay stays in its band.
TEST(WebhookBackoff, DoublesWithEqualJitter) {
  std::mt19937_64 rng(1);
  for (int n = 1; n <= 10; ++n) {
    const double d = 1000.0 * (1 << (n - 1));
    for (int i = 0; i < 200; ++i) {
      auto delay = webhook_backoff(n, milliseconds(1000), milliseconds(0), rng);
      EXPECT_GE(delay.count(), static_cast<long long>(d / 2) - 1) << n;
      EXPECT_LE(delay.count(), static_cast<long long>(d)) << n;
    }
  }
}

TEST(WebhookBackoff, IsCappedAtAnHourAndRetryAfterWins) {
  std::mt19937_64 rng(2);
  for (int n : {20, 40, 1000}) {
    auto delay = webhook_backoff(n, milliseconds(1000), milliseconds(0), rng);
    EXPECT_LE(delay.count(), 3'600'000) << n;
    EXPECT_GE(delay.count(), 1'800'000) << n;
  }
  // A receiver asking for two minutes gets at least that, even on the first retry.
  EXPECT_GE(webhook_backoff(1, milliseconds(100), milliseconds(120'000), rng).count(), 120'000);
}

TEST(WebhookDestination, IsLowercaseHostAndPort) {
  EXPECT_EQ(webhook_destination("https://Hooks.Example.com/a?b=1"), "hooks.example.com:443");
  EXPECT_EQ(webhook_destination("http://hooks.example.com/a"), "hooks.example.com:80");
  EXPECT_EQ(webhook_destination("http://10.0.0.5:8080/x"), "10.0.0.5:8080");
  EXPECT_EQ(webhook_destination("not a url"), "not a url");
}

}  // namespace
}  // namespace relay::gateway
