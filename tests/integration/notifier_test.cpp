// The gateway's notifier (gateway/notifier.hpp) against a real redis-server: a job's end heard
// while nobody waited wakes a waiter that registers after it, at once — the long-poll that read
// its job (flagging it watched) just before the end was announced.

#include "gateway/notifier.hpp"

#include <atomic>
#include <thread>

#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(RelayTest, AnEndHeardBeforeItsWaiterRegisteredWakesItAtOnce) {
  gateway::Notifier notifier(redis_.endpoint(), keys_);
  std::jthread runner([&](std::stop_token st) { notifier.run(st); });
  const std::string ended = new_job_id(), running = new_job_id(), changed = new_job_id();
  // Subscribed once a publish reaches a subscriber.
  ASSERT_TRUE(wait_until(
      [&] { return publish_heard(keys_.job_done_channel(ended), "completed") > 0; }, 10s));
  publish_heard(keys_.job_changed_channel(changed), "processing");  // not an end
  // (Heard by the notifier's thread some time after the publish: registered until it has.)
  std::atomic<int> woken{0};
  ASSERT_TRUE(wait_until(
      [&] {
        woken = 0;
        auto reg = notifier.watch(ended, [&] { ++woken; });
        return woken.load() == 1;
      },
      10s));
  std::atomic<int> others{0};
  auto a = notifier.watch(running, [&] { ++others; });
  auto b = notifier.watch(changed, [&] { ++others; });
  EXPECT_EQ(others.load(), 0) << "only ends are kept, and only the job's own";
  // Heard later, as usual: the waiter registered first is woken by the notice itself.
  publish_heard(keys_.job_done_channel(running), "completed");
  EXPECT_TRUE(wait_until([&] { return others.load() == 1; }, 10s));
}

}  // namespace
}  // namespace relay::testing
