// The gateway's notifier (gateway/notifier.hpp) against a real redis-server: a job's end heard
// while nobody waited wakes a waiter that registers after it, at once — the long-poll that read
// its job (flagging it watched) just before the end was announced.

#include "gateway/notifier.hpp"

#include <atomic>
#include <mutex>
#include <thread>

#include "relay_fixture.hpp"

namespace relay::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(RelayTest, AnEndHeardBeforeItsWaiterRegisteredWakesItAtOnce) {
  gateway::Notifier notifier(redis_.endpoint(), keys_);
  const std::string ended = new_job_id(), running = new_job_id(), changed = new_job_id();
  const std::string sentinel = new_job_id(), probe = new_job_id();
  // Subscribed, and past the wake every waiter gets once a subscription is in (notices before it
  // are lost): a waiter registered before the notifier runs is woken so, with no notice. (A
  // publish heard by a subscriber came before that wake, and the sentinel's waiter below would
  // be woken twice.)
  std::atomic<bool> subscribed{false};
  auto first = notifier.watch(probe, [&](const std::string& notice) {
    if (notice.empty()) subscribed = true;
  });
  std::jthread runner([&](std::stop_token st) { notifier.run(st); });
  ASSERT_TRUE(wait_until([&] { return subscribed.load(); }, 10s));
  ASSERT_GT(publish_heard(keys_.job_changed_channel(changed), "processing"), 0);  // (not an end)
  // The end of `ended`, then a sentinel's: the notifier hears them in order, so once the
  // sentinel's waiter is woken, the first end was heard — with nobody waiting for it.
  // (In a cluster, publish_heard publishes on every node, and each node passes its message on
  // to the others: the notifier hears each notice once per node, a node's in the order it
  // published them. Once the sentinel's last copy is in, no copy of the end is on its way.)
  const int copies = redis_.cluster() ? redis_.nodes() : 1;
  std::atomic<int> sentinel_woken{0};
  auto s = notifier.watch(sentinel, [&](const std::string&) { ++sentinel_woken; });
  publish_heard(keys_.job_done_channel(ended), "completed");
  publish_heard(keys_.job_done_channel(sentinel), "completed");
  ASSERT_TRUE(wait_until([&] { return sentinel_woken.load() == copies; }, 10s))
      << sentinel_woken.load();
  int woken = 0;
  std::string kept;  // the notice the kept end is woken with: the one it was announced with
  notifier.watch(ended, [&](const std::string& notice) {
    ++woken;
    kept = notice;
  });
  EXPECT_EQ(woken, 1) << "woken at once, inside watch()";
  EXPECT_EQ(kept, "completed");
  std::atomic<int> others{0};
  std::mutex mu;
  std::string heard;
  auto a = notifier.watch(running, [&](const std::string& notice) {
    std::lock_guard lock(mu);
    heard = notice;
    ++others;
  });
  auto b = notifier.watch(changed, [&](const std::string&) { ++others; });
  EXPECT_EQ(others.load(), 0) << "only ends are kept, and only the job's own";
  // Heard later, as usual: the waiter registered first is woken by the notice itself, and
  // gets what it says (a relay's finish sends the job's record).
  publish_heard(keys_.job_done_channel(running), R"(["status","completed"])");
  EXPECT_TRUE(wait_until([&] { return others.load() == copies; }, 10s)) << others.load();
  std::lock_guard lock(mu);
  EXPECT_EQ(heard, R"(["status","completed"])");
}

}  // namespace
}  // namespace relay::testing
