#include "http/resolver.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

namespace relay::http {
namespace {

using namespace std::chrono_literals;
using Outcome = Resolution::Outcome;

// A name server the test controls: names starting with "slow" are not answered until the gate
// opens; others at once, with a public address. Counts lookups. Shared with the lookup threads
// (they may outlive a Resolver), and opened when the test ends so that none stays blocked.
struct NameServer {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> lookups{0}, slow_started{0};

  Resolution answer(const std::string& host) {
    ++lookups;
    if (host.starts_with("slow")) {
      ++slow_started;
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return open; });
    }
    if (host.starts_with("missing")) return {Outcome::not_found, {}, "does not resolve"};
    return {Outcome::ok, {"93.184.216.34"}, {}};
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

struct ResolverTest : ::testing::Test {
  std::shared_ptr<NameServer> dns = std::make_shared<NameServer>();
  Resolver::Lookup lookup() {
    return [dns = dns](const std::string& host) { return dns->answer(host); };
  }
  template <typename F>
  static bool wait_until(F f) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!f()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  ~ResolverTest() override { dns->release(); }
};

TEST_F(ResolverTest, NumericAddressesNeedNoLookup) {
  Resolver r({}, lookup());
  for (const char* ip : {"127.0.0.1", "::1", "2606:4700:4700::1111"}) {
    auto a = r.resolve(ip);
    EXPECT_EQ(a.outcome, Outcome::ok) << ip;
    EXPECT_EQ(a.addresses, std::vector<std::string>{ip});
  }
  EXPECT_EQ(dns->lookups, 0);
}

TEST_F(ResolverTest, AnswersAreKeptForTheirTtl) {
  Resolver kept({.ttl = 1h, .negative_ttl = 1h}, lookup());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(kept.resolve("a.example").outcome, Outcome::ok);
    EXPECT_EQ(kept.resolve("missing.example").outcome, Outcome::not_found);
  }
  EXPECT_EQ(dns->lookups, 2) << "one lookup per name";
  Resolver fresh({.ttl = 0ms, .negative_ttl = 0ms}, lookup());
  EXPECT_EQ(fresh.resolve("a.example").outcome, Outcome::ok);
  EXPECT_EQ(fresh.resolve("a.example").outcome, Outcome::ok);
  EXPECT_EQ(dns->lookups, 4) << "expired answers are looked up again";
}

// A name server that does not answer costs the caller the timeout, once: the next caller naming
// the same host is answered at once while the lookup runs on, and the late answer is kept.
TEST_F(ResolverTest, ASlowNameCostsOneTimeoutThenAnswersAtOnce) {
  Resolver r({.timeout = 1s}, lookup());
  auto first = r.resolve("slow.example");
  EXPECT_EQ(first.outcome, Outcome::unavailable);
  EXPECT_EQ(first.why, "did not resolve within 1s");
  const auto t0 = std::chrono::steady_clock::now();
  auto again = r.resolve("slow.example");
  EXPECT_EQ(again.outcome, Outcome::unavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms) << "waited on a name known slow";
  EXPECT_EQ(dns->lookups, 1);
  dns->release();
  EXPECT_TRUE(wait_until([&] { return r.resolve("slow.example").outcome == Outcome::ok; }));
  EXPECT_EQ(dns->lookups, 1) << "the late answer was kept, not looked up again";
}

// While one name hangs, other names are looked up on the other threads. With every thread
// taken, a new name queues: its caller waits at most the timeout (the name is not marked slow:
// it was never looked up), a name nobody waits for any more is dropped from the queue rather
// than looked up, and a burst of new names queues rather than being refused.
TEST_F(ResolverTest, AHangingNameHoldsOneLookupThreadOnly) {
  Resolver r({.timeout = 300ms, .lookups = 2}, lookup());
  auto hanging = std::async(std::launch::async, [&] { return r.resolve("slow.example"); });
  ASSERT_TRUE(wait_until([&] { return dns->slow_started == 1; }));
  EXPECT_EQ(r.resolve("a.example").outcome, Outcome::ok);
  auto second = std::async(std::launch::async, [&] { return r.resolve("slow2.example"); });
  ASSERT_TRUE(wait_until([&] { return dns->slow_started == 2; }));
  auto queued = r.resolve("b.example");
  EXPECT_EQ(queued.outcome, Outcome::unavailable);
  EXPECT_EQ(queued.why, "did not resolve within 300ms");
  EXPECT_EQ(hanging.get().why, "did not resolve within 300ms");
  EXPECT_EQ(second.get().why, "did not resolve within 300ms");
  dns->release();
  EXPECT_EQ(r.resolve("b.example").outcome, Outcome::ok) << "not marked slow: never looked up";
  EXPECT_EQ(dns->lookups, 4) << "slow, a, slow2, b once (its abandoned queued turn dropped)";
}

// Callers waiting on lookups are bounded: past max_waiting, one more is answered at once.
TEST_F(ResolverTest, WaitingCallersAreBounded) {
  Resolver r({.timeout = 10s, .lookups = 2, .max_waiting = 1}, lookup());
  auto waiting = std::async(std::launch::async, [&] { return r.resolve("slow.example"); });
  // (The lookup starts only once its caller waits: both happen under the resolver's lock.)
  ASSERT_TRUE(wait_until([&] { return dns->slow_started == 1; }));
  auto refused = r.resolve("slow.example");
  EXPECT_EQ(refused.outcome, Outcome::unavailable);
  EXPECT_EQ(refused.why, "cannot be resolved now: too many requests waiting for name lookups");
  dns->release();
  EXPECT_EQ(waiting.get().outcome, Outcome::ok);
}

// A caller's stop (a cancelled job, a shutdown) ends its wait at once; the name is not marked
// slow by it, and its answer, when it comes, is kept.
TEST_F(ResolverTest, AStopEndsTheWait) {
  Resolver r({.timeout = 1h}, lookup());
  std::stop_source stop;
  auto waiting =
      std::async(std::launch::async, [&] { return r.resolve("slow.example", stop.get_token()); });
  ASSERT_TRUE(wait_until([&] { return dns->slow_started == 1; }));
  stop.request_stop();
  auto a = waiting.get();
  EXPECT_EQ(a.outcome, Outcome::unavailable);
  EXPECT_EQ(a.why, "not resolved: the lookup was abandoned");
  dns->release();
  EXPECT_EQ(r.resolve("slow.example").outcome, Outcome::ok);
  EXPECT_EQ(dns->lookups, 1);
}

TEST_F(ResolverTest, TheSystemResolverAnswersLocalhost) {
  auto a = Resolver::system_lookup("localhost");
  ASSERT_EQ(a.outcome, Outcome::ok) << a.why;
  ASSERT_FALSE(a.addresses.empty());
  for (const auto& ip : a.addresses) EXPECT_TRUE(ip == "127.0.0.1" || ip == "::1") << ip;
}

}  // namespace
}  // namespace relay::http
