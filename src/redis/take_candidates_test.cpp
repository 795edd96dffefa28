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

TEST(TakeCandidatesTest, PastFarTheTakeIsAPopAndItsLookIsShort) {
  TakeCandidates c(ids(0, 20));
  take_at(c, 1, TakeCandidates::kWindow);
  EXPECT_FALSE(c.far());
  EXPECT_EQ(c.looks(), TakeCandidates::kMin) << "near: a look is the next take's candidates";
  // The head moved 10 places between a relay's takes: asking for 20 is enough.
  take_at(c, 10, TakeCandidates::kWindow);
  EXPECT_FALSE(c.far());
  EXPECT_EQ(c.looks(), 20);
  // 16 places: twice that is the cap, where naming candidates costs more than a pop.
  take_at(c, 16, TakeCandidates::kWindow);
  ASSERT_TRUE(c.far());
  EXPECT_EQ(c.looks(), TakeCandidates::kFar / 2)
      << "far: enough ids to tell whether the head moves less than that (near again)";
}

TEST(TakeCandidatesTest, FarTheDistanceIsMeasuredFromPopToPopAndFromTheFinishsLook) {
  TakeCandidates c;
  for (int i = 0; i < 5; ++i) c.missed();
  ASSERT_TRUE(c.far());
  // A pop right after a look (a take that missed, a finish's) says nothing of the distance.
  for (long long i = 0; i < 2 * TakeCandidates::kWindow; ++i) {
    c.looked(ids(0, 16));
    c.ids = ids(0, 16);
    c.fresh = true;
    c.popped("j0");
  }
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  // Pop to pop: the head 20 places behind the last pop's look, past what it holds, a miss.
  c.ids = ids(0, 16);
  c.fresh = false;
  c.popped("j20");
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
  EXPECT_TRUE(c.far());
  // Fewer relays: the next pop finds the head a few places in, a window long: near again.
  for (long long i = 0; i < TakeCandidates::kWindow; ++i) {
    c.ids = ids(0, 16);
    c.fresh = false;
    c.popped("j3");
  }
  EXPECT_EQ(c.want(), 8);
  EXPECT_FALSE(c.far());
  // Near, a look replaces the ids and measures nothing (the take's position does).
  c.ids = ids(0, 8);
  c.fresh = false;
  c.looked(ids(7, 4));
  EXPECT_EQ(c.ids, ids(7, 4));
  EXPECT_TRUE(c.fresh);
  EXPECT_EQ(c.want(), 8);
}

TEST(TakeCandidatesTest, FarAFinishsLookBetweenTwoPopsMeasuresTheDistanceToIt) {
  // A relay taking ahead pops with no finish; the finish of the job before comes later, with
  // its own look. The distance is measured from that look as from a pop.
  TakeCandidates c;
  for (int i = 0; i < 5; ++i) c.missed();
  ASSERT_TRUE(c.far());
  for (long long i = 0; i < TakeCandidates::kWindow; ++i) {
    c.ids = ids(0, 16);
    c.fresh = false;
    c.looked(ids(2, 16));
  }
  EXPECT_EQ(c.want(), 6);
  EXPECT_FALSE(c.far());
  for (int i = 0; i < 3; ++i) c.missed();
  ASSERT_TRUE(c.far());
  c.ids = ids(0, 16);
  c.fresh = false;
  c.looked(ids(40, 16));  // not among them: a miss
  EXPECT_EQ(c.want(), TakeCandidates::kMax);
}

}  // namespace
}  // namespace relay::redis
