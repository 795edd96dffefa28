#include "common/backoff.hpp"

#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace relay {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, DoublesWithinJitterBoundsUpToTheCapAndResets) {
  Backoff b(milliseconds(100), milliseconds(1000), 42);
  const long long ceilings[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (long long c : ceilings) {
    auto d = b.next().count();
    EXPECT_GE(d, c / 2) << c;
    EXPECT_LE(d, c) << c;
  }
  b.reset();
  auto d = b.next().count();
  EXPECT_GE(d, 50);
  EXPECT_LE(d, 100);
}

TEST(Backoff, DifferentSeedsSpreadTheSameAttempt) {
  // The point of jitter: many retrying processes do not pick one instant.
  std::set<long long> firsts;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    Backoff b(milliseconds(1000), milliseconds(5000), seed);
    firsts.insert(b.next().count());
  }
  EXPECT_GT(firsts.size(), 40u);
}

TEST(Backoff, SleepEndsAtOnceWhenStopped) {
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(sleep_unless_stopped(milliseconds(60'000), stop.get_token()));
  std::stop_source running;
  EXPECT_TRUE(sleep_unless_stopped(milliseconds(1), running.get_token()));
  // Stopped from another thread while sleeping.
  std::stop_source later;
  std::jthread t([&] { later.request_stop(); });
  EXPECT_FALSE(sleep_unless_stopped(milliseconds(60'000), later.get_token()));
}

}  // namespace
}  // namespace relay
