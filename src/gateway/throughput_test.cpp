#include "gateway/throughput.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace relay::gateway {
namespace {

TEST(FinishedWithin, ASampleReachingPastTheWindowCountsItExactly) {
  const std::vector<std::int64_t> t{10'000, 9'500, 8'000, 4'000, 1'000};  // newest first
  auto f = finished_within(t, /*full=*/true, 10'000, 5'000);
  EXPECT_EQ(f.count, 3);
  EXPECT_FALSE(f.estimated);
  f = finished_within(t, /*full=*/false, 10'000, 60'000);  // the whole stream, in the window
  EXPECT_EQ(f.count, 5);
  EXPECT_FALSE(f.estimated);
  EXPECT_EQ(finished_within({}, false, 10'000, 60'000).count, 0);
}

TEST(FinishedWithin, AFullSampleInsideTheWindowIsExtrapolatedAndSaysSo) {
  // 1,000 entries over the last second (a steady 1,000 jobs/s): a minute is ~60,000.
  std::vector<std::int64_t> t;
  for (int i = 0; i < 1000; ++i) t.push_back(100'000 - i);
  auto f = finished_within(t, /*full=*/true, 100'000, 60'000);
  EXPECT_TRUE(f.estimated);
  EXPECT_NEAR(static_cast<double>(f.count), 60'000.0, 100.0);
  // The same entries without older ones beyond them are all there is: exact.
  f = finished_within(t, /*full=*/false, 100'000, 60'000);
  EXPECT_EQ(f.count, 1000);
  EXPECT_FALSE(f.estimated);
  // Entries stamped ahead of the gateway's clock (another host's): counted, never divided by 0.
  const std::vector<std::int64_t> ahead{100'010, 100'005};
  f = finished_within(ahead, /*full=*/true, 100'000, 60'000);
  EXPECT_EQ(f.count, 2);
  EXPECT_FALSE(f.estimated);
}

}  // namespace
}  // namespace relay::gateway
