#include <gtest/gtest.h>

#include "redis/job_store.hpp"

namespace relay::redis {
namespace {

void take_at(TakeCandidates& c, long long position, long long times) {
  for (long long i = 0; i < times; ++i) c.found_at(position);
}

TEST(TakeCandidatesTest, AskForTwiceTheFarthestTheHeadMovedOverAWindow) {
  TakeCandidates c;
  EXPECT_EQ(c.want(), 4);
  // Four busy relays: the head found up to 4 places in.
  take_at(c, 1, TakeCandidates::kWindow - 1);
  EXPECT_EQ(c.want(), 4) << "unchanged until the window is over";
  c.found_at(4);
  EXPECT_EQ(c.want(), 8);
  // One relay alone: always the first.
  take_at(c, 1, TakeCandidates::kWindow);
  EXPECT_EQ(c.want(), TakeCandidates::kMin);
}

TEST(TakeCandidatesTest, AMissDoublesTheCountAndStartsAFreshWindow) {
  TakeCandidates c;
  take_at(c, 2, TakeCandidates::kWindow - 1);
  c.missed();
  EXPECT_EQ(c.want(), 8);
  // The takes before the miss no longer count towards the window.
  c.found_at(1);
  EXPECT_EQ(c.want(), 8);
  take_at(c, 1, TakeCandidates::kWindow - 1);
  EXPECT_EQ(c.want(), TakeCandidates::kMin);
  for (int i = 0; i < 10; ++i) c.missed();
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  take_at(c, TakeCandidates::kMax, TakeCandidates::kWindow);
  EXPECT_EQ(c.want(), TakeCandidates::kMax) << "never above the cap";
}

}  // namespace
}  // namespace relay::redis
