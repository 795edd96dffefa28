#include "gateway/upload_pace.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(UploadPace, ASteadySlowClientAboveTheFloorIsKept) {
  UploadPace pace(seconds(30), 1024);
  // 2 KiB/s in 512-byte reads for ten minutes.
  for (int i = 0; i < 2400; ++i) ASSERT_TRUE(pace.record(milliseconds(250), 512)) << i;
  EXPECT_NEAR(pace.rate(), 2048, 1);
}

TEST(UploadPace, AClientBelowTheFloorIsCutAfterAWholeWindow) {
  UploadPace pace(seconds(30), 1024);
  int reads = 0;
  while (pace.record(seconds(1), 512)) ++reads;  // 512 B/s
  EXPECT_EQ(reads, 29) << "judged once 30 s of waiting were seen, not before";
  EXPECT_NEAR(pace.rate(), 512, 1);
}

// What the issue measured: 256 KiB every 20 s is ~13 KB/s, fine; a client that slows down
// later is cut once a window of the slow part has passed.
TEST(UploadPace, BurstsCountInBytesAndASlowdownIsCaught) {
  UploadPace pace(seconds(30), 1024);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pace.record(seconds(20), 256 * 1024));
  int slow = 0;
  while (pace.record(seconds(5), 100)) ++slow;
  EXPECT_LE(slow, 7) << "within about a window of the slowdown";
}

TEST(UploadPace, TimeNotSpentWaitingDoesNotCount) {
  UploadPace pace(seconds(30), 1024);
  // The server took long to store (not recorded); the client's bytes came at once each time.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pace.record(milliseconds(1), 64 * 1024));
}

TEST(UploadPace, NoFloorMeansNeverCut) {
  UploadPace pace(seconds(30), 0);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(pace.record(seconds(10), 1));
}

}  // namespace
}  // namespace relay::gateway
