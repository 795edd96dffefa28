#include "common/periodic.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace relay {
namespace {

using std::chrono::hours;

// Stops from inside a pass: the loop must end without waiting out its (hour-long) interval.
TEST(Periodic, StopsAtOnceMidInterval) {
  std::stop_source stop;
  int passes = 0;
  PeriodicTask task{"test", hours(1), [&] {
                      if (++passes == 1) {
                        // Stop from another thread while the loop waits its interval.
                        std::jthread([&] { stop.request_stop(); }).join();
                      }
                      return false;
                    }};
  run_periodically(task, stop.get_token());
  EXPECT_EQ(passes, 1);
}

TEST(Periodic, ABacklogRunsAgainWithoutWaiting) {
  std::stop_source stop;
  int passes = 0;
  PeriodicTask task{"test", hours(1), [&] {
                      if (++passes == 5) stop.request_stop();
                      return true;  // more to do: no wait between passes
                    }};
  run_periodically(task, stop.get_token());
  EXPECT_EQ(passes, 5);
}

TEST(Periodic, AFailingPassRunsOnErrorAndTheLoopGoesOn) {
  std::stop_source stop;
  int passes = 0, errors = 0;
  PeriodicTask task{"test", std::chrono::milliseconds(0),
                    [&] {
                      if (++passes == 4) {
                        stop.request_stop();
                        return false;
                      }
                      throw std::runtime_error("redis down");
                    },
                    [&] { ++errors; }};
  run_periodically(task, stop.get_token());
  EXPECT_EQ(passes, 4);
  EXPECT_EQ(errors, 3);
}

TEST(Periodic, AStopRequestedBeforehandRunsNoPass) {
  std::stop_source stop;
  stop.request_stop();
  int passes = 0;
  run_periodically({"test", hours(1), [&] { return ++passes > 0; }}, stop.get_token());
  EXPECT_EQ(passes, 0);
}

}  // namespace
}  // namespace relay
