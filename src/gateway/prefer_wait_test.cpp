#include "gateway/prefer_wait.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
constexpr milliseconds kMax = seconds(60);

TEST(PreferWaitTest, ReadsTheWaitPreference) {
  EXPECT_EQ(preferred_wait("wait=10", kMax), seconds(10));
  EXPECT_EQ(preferred_wait("WAIT = 5", kMax), seconds(5));
  EXPECT_EQ(preferred_wait("respond-async, wait=7", kMax), seconds(7));
  EXPECT_EQ(preferred_wait("wait=\"3\"", kMax), seconds(3));
  EXPECT_EQ(preferred_wait("wait=4; foo=bar", kMax), seconds(4));
  EXPECT_EQ(preferred_wait("return=minimal, wait=2, wait=9", kMax), seconds(2)) << "the first";
  EXPECT_EQ(preferred_wait("x=\"a,wait=1\", wait=8", kMax), seconds(8)) << "not inside quotes";
  EXPECT_EQ(preferred_wait("wait=0", kMax), seconds(0));
}

TEST(PreferWaitTest, ALongerWaitIsCutToTheMaximum) {
  EXPECT_EQ(preferred_wait("wait=61", kMax), kMax);
  EXPECT_EQ(preferred_wait("wait=99999999999999999999999", kMax), kMax);
  EXPECT_EQ(preferred_wait("wait=3", seconds(1)), seconds(1));
  EXPECT_EQ(preferred_wait("wait", kMax), kMax) << "bare, as Replicate's clients send it";
}

TEST(PreferWaitTest, AnythingElseAsksForNoWait) {
  EXPECT_EQ(preferred_wait("", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("respond-async", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("waiting=3", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("wait=-1", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("wait=1.5", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("wait=10s", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("wait=", kMax), std::nullopt);
  EXPECT_EQ(preferred_wait("wait=\"", kMax), std::nullopt);
}

}  // namespace
}  // namespace relay::gateway
