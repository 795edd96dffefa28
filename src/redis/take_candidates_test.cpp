#include <gtest/gtest.h>

#include <string>
#include <vector>

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

std::vector<std::string> ids(int from, int n) {
  std::vector<std::string> out;
  for (int i = from; i < from + n; ++i) out.push_back("j" + std::to_string(i));
  return out;
}

TEST(TakeCandidatesTest, PastFarATakeNamesTheFirstFewOfAFreshLook) {
  TakeCandidates c(ids(0, 40));
  take_at(c, 1, TakeCandidates::kWindow);
  EXPECT_FALSE(c.far());
  EXPECT_EQ(c.named(), 40u) << "near: every id of the look";
  // The head moved 20 places between a relay's steps: asking for 40 is enough.
  take_at(c, 20, TakeCandidates::kWindow);
  EXPECT_FALSE(c.far());
  // 40 places: twice that is past the cap.
  take_at(c, 40, TakeCandidates::kWindow);
  ASSERT_TRUE(c.far());
  EXPECT_EQ(c.named(), 40u) << "a look a job old: every id (the take goes alone, no finish)";
  c.looked(ids(50, TakeCandidates::kFresh + 2));
  EXPECT_EQ(c.named(), static_cast<std::size_t>(TakeCandidates::kFresh)) << "a look just made";
  c.looked({"a"});
  EXPECT_EQ(c.named(), 1u) << "never more than the look holds";
}

TEST(TakeCandidatesTest, FarTheDistanceIsMeasuredFromTheFinishsLookNotTheTake) {
  TakeCandidates c;
  for (int i = 0; i < 5; ++i) c.missed();
  ASSERT_TRUE(c.far());
  // A take naming a fresh look finds the head first, every time: that says nothing of how far
  // it moves between this relay's steps, and must not bring the count down.
  for (long long i = 0; i < 2 * TakeCandidates::kWindow; ++i) c.took_at(1);
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  // The finish's look: its head 40 places behind the last take's look, a window long.
  for (long long i = 0; i < TakeCandidates::kWindow; ++i) {
    c.ids = ids(0, 64);
    c.looked(ids(39, TakeCandidates::kFresh));
    EXPECT_EQ(c.ids, ids(39, TakeCandidates::kFresh)) << "the look is the next take's candidates";
  }
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  EXPECT_TRUE(c.far());
  // Not among the last take's ids at all: a miss.
  c.ids = ids(0, 60);
  c.looked(ids(100, 4));
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  // Fewer relays: the head a few places in, a window long, and the take rides with the finish
  // again (near: the take's own position counts again).
  for (long long i = 0; i < TakeCandidates::kWindow; ++i) {
    c.ids = ids(0, 64);
    c.looked(ids(3, 4));
  }
  EXPECT_EQ(c.want(), 8);
  EXPECT_FALSE(c.far());
  c.ids = ids(0, 8);
  c.looked(ids(7, 4));  // near: a look replaces the ids, nothing measured
  take_at(c, 1, TakeCandidates::kWindow);
  EXPECT_EQ(c.want(), TakeCandidates::kMin);
}

}  // namespace
}  // namespace relay::redis
