#include "sidecar/progress_endpoint.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "http/curl.hpp"

namespace relay::sidecar {
namespace {

std::string why_not(std::string_view body) {
  std::string why;
  return parse_progress(body, &why) ? "" : why;
}

TEST(ProgressReport, AFractionAMessageOrBoth) {
  auto r = parse_progress(R"({"progress": 0.25, "message": "page 1 of 4"})", nullptr);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(*r->fraction, 0.25);
  EXPECT_EQ(r->message, "page 1 of 4");
  EXPECT_FALSE(parse_progress(R"({"message": "warming up"})", nullptr)->fraction);
  EXPECT_EQ(parse_progress(R"({"progress": 1})", nullptr)->fraction, 1.0);
  EXPECT_EQ(parse_progress(R"({"progress": 0})", nullptr)->fraction, 0.0);
}

TEST(ProgressReport, AnythingElseIsRefusedWithAReason) {
  for (const char* bad : {"", "[]", "0.5", "{}", R"({"progress": 1.5})", R"({"progress": -0.1})",
                          R"({"progress": "half"})", R"({"message": 3})", "{\"progress\": 0.5"})
    EXPECT_NE(why_not(bad), "") << bad;
}

TEST(ProgressReport, LongOrBrokenMessagesAreCutToValidUtf8) {
  auto r = parse_progress(R"({"message": ")" + std::string(300, 'x') + "\xc3\xa9\"}", nullptr);
  ASSERT_TRUE(r);
  EXPECT_LE(r->message.size(), 256u);
  auto broken = parse_progress("{\"message\": \"ok \\u00e9\"}", nullptr);
  EXPECT_EQ(broken->message, "ok \xc3\xa9");
}

struct Answer {
  long status = 0;
};

Answer post(const std::string& url, const std::string& body, const char* method = "POST") {
  auto easy = http::make_easy();
  http::Headers h;
  h.add("Content-Type: application/json");
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, h.get());
  curl_write_callback discard = [](char*, size_t s, size_t n, void*) { return s * n; };
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, 10'000L);
  if (curl_easy_perform(easy.get()) != CURLE_OK) return {};
  return {http::response_code(easy.get())};
}

TEST(ProgressEndpoint, ReportsReachTheJobInHandOnlyWhileItRuns) {
  ProgressEndpoint endpoint("127.0.0.1:0");
  std::mutex mu;
  std::vector<ProgressReport> got;
  const std::string url = endpoint.open([&](ProgressReport r) {
    std::lock_guard lock(mu);
    got.push_back(std::move(r));
  });
  ASSERT_TRUE(url.starts_with("http://127.0.0.1:" + std::to_string(endpoint.port()) + "/progress/"))
      << url;
  EXPECT_EQ(post(url, R"({"progress":0.5,"message":"half"})").status, 204);
  EXPECT_EQ(post(url, R"({"progress":2})").status, 400);
  EXPECT_EQ(post(url, "{\"message\":\"" + std::string(5000, 'x') + "\"}").status, 413);
  EXPECT_EQ(post(url, R"({"progress":0.5})", "GET").status, 405);
  EXPECT_EQ(post(url + "0", R"({"progress":0.5})").status, 404) << "another secret";
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].message, "half");
  }
  endpoint.close(url);
  EXPECT_EQ(post(url, R"({"progress":0.75})").status, 404) << "the job ended";
  const std::string next = endpoint.open([&](ProgressReport r) {
    std::lock_guard lock(mu);
    got.push_back(std::move(r));
  });
  EXPECT_NE(next, url);
  EXPECT_EQ(post(url, R"({"progress":0.75})").status, 404) << "the old job's URL stays dead";
  EXPECT_EQ(post(next, R"({"progress":0.1})").status, 204);
  std::lock_guard lock(mu);
  EXPECT_EQ(got.size(), 2u);
}

// relay.concurrency: several jobs in hand, each reporting to its own URL; one ending leaves the
// others' URLs working.
TEST(ProgressEndpoint, SeveralJobsInHandEachReportToTheirOwn) {
  ProgressEndpoint endpoint("127.0.0.1:0");
  std::mutex mu;
  std::vector<std::string> a, b;
  const std::string url_a = endpoint.open([&](ProgressReport r) {
    std::lock_guard lock(mu);
    a.push_back(r.message);
  });
  const std::string url_b = endpoint.open([&](ProgressReport r) {
    std::lock_guard lock(mu);
    b.push_back(r.message);
  });
  ASSERT_NE(url_a, url_b);
  EXPECT_EQ(post(url_a, R"({"message":"a1"})").status, 204);
  EXPECT_EQ(post(url_b, R"({"message":"b1"})").status, 204);
  endpoint.close(url_a);
  EXPECT_EQ(post(url_a, R"({"message":"a2"})").status, 404);
  EXPECT_EQ(post(url_b, R"({"message":"b2"})").status, 204);
  std::lock_guard lock(mu);
  EXPECT_EQ(a, std::vector<std::string>{"a1"});
  EXPECT_EQ(b, (std::vector<std::string>{"b1", "b2"}));
}

}  // namespace
}  // namespace relay::sidecar
