// Listing the tenant's jobs (GET /jobs, GET /jobs/{service_type}): newest first, filtered, a
// page at a time with a cursor that jobs submitted meanwhile do not shift.

#include <thread>

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

struct Page {
  std::vector<json::object> jobs;
  std::string next;  // "" when there is no more
};

Page page_of(const HttpResult& r) {
  Page p;
  auto o = parse(r);
  for (auto& j : o.at("jobs").as_array()) p.jobs.push_back(j.as_object());
  if (o.at("next_cursor").is_string()) p.next = std::string(o.at("next_cursor").as_string());
  return p;
}

// Walks every page of `path` (which has a query already); the ids in order.
std::vector<std::string> walk(const std::string& base, const std::string& path,
                              std::vector<std::string> headers = {}) {
  std::vector<std::string> ids;
  std::string cursor;
  for (int pages = 0; pages < 1000; ++pages) {
    auto r = http("GET", base + path + (cursor.empty() ? "" : "&cursor=" + cursor), headers);
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) break;
    auto p = page_of(r);
    for (auto& j : p.jobs) ids.push_back(str(j, "id"));
    if (p.next.empty()) break;
    cursor = p.next;
  }
  return ids;
}

TEST_F(GatewayTest, ListingPagesAreCompleteAndDuplicateFreeWhileSubmitsRun) {
  start_gateway();
  std::vector<std::string> before;
  for (int i = 0; i < 30; ++i) before.push_back(submit_id("job " + std::to_string(i)));
  std::atomic<bool> stop{false};
  std::thread more([&] {
    for (int i = 0; i < 20 && !stop; ++i) submit_id("meanwhile");
  });
  auto ids = walk(gateway_->url(), "/jobs/echo?limit=7");
  stop = true;
  more.join();
  std::set<std::string> seen(ids.begin(), ids.end());
  EXPECT_EQ(seen.size(), ids.size()) << "no duplicates";
  for (auto& id : before) EXPECT_TRUE(seen.count(id)) << id << " missing";
  // Newest first: the jobs submitted before the walk appear in reverse order of submission.
  std::vector<std::string> order;
  for (auto& id : ids)
    if (std::find(before.begin(), before.end(), id) != before.end()) order.push_back(id);
  EXPECT_EQ(order, std::vector<std::string>(before.rbegin(), before.rend()));
  // And the whole list, all service types, sees them as well.
  auto all = walk(gateway_->url(), "/jobs?limit=100");
  EXPECT_GE(all.size(), 30u);
}

TEST_F(GatewayTest, ListingFiltersByServiceTypeStatusTimeAndIdempotencyKey) {
  start_gateway();
  // since / until compare creation times to the millisecond shown in job JSON: the jobs they
  // must tell apart are created in different milliseconds (submits can be faster than that).
  auto next_millisecond = [&](const std::string& svc, const std::string& id) {
    const std::string created =
        str(parse(http("GET", url("/jobs/" + svc + "/" + id))), "created_at");
    ASSERT_TRUE(wait_until([&] { return format_rfc3339(wall_now()) > created; }, 5s));
  };
  const std::string a = submit_id("a");
  next_millisecond("echo", a);
  const std::string cancelled = submit_id("c");
  ASSERT_EQ(http("DELETE", url("/jobs/echo/" + cancelled)).status, 200);
  auto other = submit("o", {}, {}, "other");
  ASSERT_EQ(other.status, 202);
  const std::string other_id = str(parse(other), "id");
  next_millisecond("other", other_id);
  const std::string keyed = submit_id("k", {"Idempotency-Key: order-7"});

  EXPECT_EQ(walk(gateway_->url(), "/jobs/other?limit=10"), std::vector<std::string>{other_id});
  EXPECT_EQ(walk(gateway_->url(), "/jobs/echo?status=cancelled"),
            std::vector<std::string>{cancelled});
  EXPECT_EQ(walk(gateway_->url(), "/jobs?status=pending").size(), 3u);
  EXPECT_EQ(walk(gateway_->url(), "/jobs/echo?idempotency_key=order-7"),
            std::vector<std::string>{keyed});
  const std::string since = str(job(keyed), "created_at");
  auto recent = walk(gateway_->url(), "/jobs?since=" + since);
  EXPECT_EQ(recent, std::vector<std::string>{keyed}) << "since is inclusive";
  EXPECT_EQ(walk(gateway_->url(), "/jobs?until=" + str(job(a), "created_at")),
            std::vector<std::string>{a});
  for (const char* bad : {"/jobs?limit=0", "/jobs?limit=101", "/jobs?status=done",
                          "/jobs?since=yesterday", "/jobs?cursor=xyz"}) {
    auto r = http("GET", url(bad));
    EXPECT_EQ(r.status, 400) << bad << " " << r.body;
  }
}

TEST_F(GatewayTest, ATenantListsOnlyItsOwnJobs) {
  start_gateway({{"RELAY_AUTH_ENABLED", "true"},
                 {"RELAY_AUTH_API_KEYS",
                  sha256_hex("key-a") + "=tenant-a," + sha256_hex("key-b") + "=tenant-b"}});
  auto r = submit("x", {"Authorization: Bearer key-a"});
  ASSERT_EQ(r.status, 202);
  const std::string id = str(parse(r), "id");
  EXPECT_EQ(walk(gateway_->url(), "/jobs?limit=5", {"Authorization: Bearer key-a"}),
            std::vector<std::string>{id});
  EXPECT_TRUE(walk(gateway_->url(), "/jobs?limit=5", {"Authorization: Bearer key-b"}).empty());
  EXPECT_EQ(http("GET", url("/jobs")).status, 401);
}

}  // namespace
}  // namespace relay::testing
