// Progress and live events end to end: the model reports progress to the relay's loopback URL,
// the job shows it, and GET .../events streams the job's states as Server-Sent Events until it
// ends, resumable with Last-Event-ID.

#include <fstream>
#include <regex>

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

std::string progress_url_of(const InferenceServer& inference) {
  const std::string text = inference.events();
  const auto at = text.find("progress-url ");
  if (at == std::string::npos) return "";
  const auto end = text.find('\n', at);
  return text.substr(at + 13, end - at - 13);
}

std::vector<std::string> names_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.name);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// The model's reports, throttled by the relay, show on the job while it runs; once the job has
// ended its URL answers 404.
TEST_F(GatewayTest, ModelProgressShowsOnTheRunningJob) {
  start_gateway();
  InferenceServer inference({.delay_ms = 3000, .progress_steps = 4});
  const std::string id = submit_id("input");
  EXPECT_TRUE(job(id).at("progress").is_null());
  auto relay = start_relay(inference, {{"RELAY_RELAY_PROGRESS_INTERVAL", "100ms"}});
  json::object seen;
  ASSERT_TRUE(wait_until(
      [&] {
        seen = job(id);
        return seen.at("progress").is_object() && str(seen, "status") == "processing";
      },
      20s))
      << relay->log();
  const auto& p = seen.at("progress").as_object();
  EXPECT_GT(p.at("fraction").as_double(), 0.0);
  EXPECT_LE(p.at("fraction").as_double(), 1.0);
  EXPECT_TRUE(str(p, "message").starts_with("step ")) << p;
  EXPECT_FALSE(str(p, "updated_at").empty());
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  EXPECT_EQ(str(job(id), "status"), "completed");
  // Every report was taken while the job ran.
  for (int i = 1; i <= 4; ++i)
    EXPECT_TRUE(inference.saw("progress " + std::to_string(i) + " 204")) << inference.events();
  const std::string url = progress_url_of(inference);
  ASSERT_TRUE(url.starts_with("http://127.0.0.1:")) << inference.events();
  // (The relay exited: nothing listens. A relay that goes on answers 404, see the unit test.)
  EXPECT_NE(http("POST", url, {}, R"({"progress":1})").status, 204);
}

// A stream opened while the job waits shows it pending, processing (or its progress) and
// completed, then ends; each event carries the job.
TEST_F(GatewayTest, EventsFollowAJobToItsEnd) {
  start_gateway();
  const std::string id = submit_id("input");
  EventStream stream(url("/jobs/echo/" + id + "/events"));
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 1; }, 10s)) << stream.raw();
  EXPECT_EQ(stream.status(), 200);
  EXPECT_EQ(stream.events()[0].name, "pending");
  InferenceServer inference({.delay_ms = 1500, .progress_steps = 3});
  auto relay = start_relay(inference, {{"RELAY_RELAY_PROGRESS_INTERVAL", "50ms"}});
  ASSERT_TRUE(wait_until([&] { return stream.ended(); }, 30s)) << stream.raw();
  auto events = stream.events();
  const auto names = names_of(events);
  ASSERT_GE(events.size(), 3u) << joined(names);
  EXPECT_EQ(names.front(), "pending");
  EXPECT_EQ(names.back(), "completed");
  EXPECT_TRUE(names[1] == "processing" || names[1] == "progress") << joined(names);
  EXPECT_NE(std::find(names.begin(), names.end(), "progress"), names.end()) << joined(names);
  std::set<std::string> ids;
  for (const auto& e : events) {
    ids.insert(e.id);
    auto data = json::parse(e.data).as_object();
    EXPECT_EQ(str(data, "id"), id);
  }
  EXPECT_EQ(ids.size(), events.size()) << "each event is a new state";
  EXPECT_EQ(str(json::parse(events.back().data).as_object(), "status"), "completed");

  // Resuming: from the last event there is nothing new (the job has ended: the stream ends);
  // from an earlier one, the current state comes at once.
  EventStream caught_up(url("/jobs/echo/" + id + "/events"),
                        {"Last-Event-ID: " + events.back().id});
  ASSERT_TRUE(wait_until([&] { return caught_up.ended(); }, 10s));
  EXPECT_TRUE(caught_up.events().empty()) << caught_up.raw();
  EventStream behind(url("/jobs/echo/" + id + "/events"), {"Last-Event-ID: " + events[0].id});
  ASSERT_TRUE(wait_until([&] { return behind.ended(); }, 10s));
  ASSERT_EQ(behind.events().size(), 1u) << behind.raw();
  EXPECT_EQ(behind.events()[0].name, "completed");
  EXPECT_EQ(behind.events()[0].id, events.back().id);
  EXPECT_EQ(relay->wait_exit(20s), 0);
}

// A job given back (its relay stopped mid-job) is pending again, and its stream says so.
TEST_F(GatewayTest, EventsShowAJobGivenBackPendingAgain) {
  start_gateway();
  const std::string id = submit_id("input");
  EventStream stream(url("/jobs/echo/" + id + "/events"));
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 1; }, 10s)) << stream.raw();
  InferenceServer inference({.delay_ms = 30'000});
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 2; }, 20s)) << stream.raw();
  ASSERT_TRUE(wait_until([&] { return inference.saw("request /predict"); }, 20s));
  relay->signal(SIGTERM);
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 3; }, 10s)) << stream.raw();
  EXPECT_EQ(joined(names_of(stream.events())), "pending,processing,pending");
  EXPECT_EQ(str(json::parse(stream.events().back().data).as_object(), "status"), "pending");
  EXPECT_FALSE(stream.ended());
}

// A cancel is a terminal event like any; unknown jobs and other tenants' get a plain 404.
TEST_F(GatewayTest, EventsEndOnACancelAndAreOnlyForTheJobsOwner) {
  start_gateway();
  const std::string id = submit_id("input");
  EventStream stream(url("/jobs/echo/" + id + "/events"));
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 1; }, 10s)) << stream.raw();
  EXPECT_EQ(http("DELETE", url("/jobs/echo/" + id)).status, 200);
  ASSERT_TRUE(wait_until([&] { return stream.ended(); }, 10s)) << stream.raw();
  EXPECT_EQ(joined(names_of(stream.events())), "pending,cancelled");
  auto missing = http("GET", url("/jobs/echo/00000000-0000-4000-8000-000000000000/events"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(error_code(missing), "job_not_found");
  EXPECT_EQ(http("GET", url("/jobs/other/" + id + "/events")).status, 404);
}

// A job nobody watches costs no announcement; a watched one is flagged for the steps that
// change it.
TEST_F(GatewayTest, OnlyWatchedJobsAreAnnounced) {
  start_gateway();
  const std::string unwatched = submit_id("a");
  const std::string watched = submit_id("b");
  EventStream stream(url("/jobs/echo/" + watched + "/events"));
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 1; }, 10s));
  EXPECT_EQ(
      redis::as_integer(conn_.command({"HEXISTS", keys_.job("m1", watched), "watched"}).get()), 1);
  EXPECT_EQ(
      redis::as_integer(conn_.command({"HEXISTS", keys_.job("m1", unwatched), "watched"}).get()),
      0);
}

// The OCR example reads a multi-page TIFF page by page and reports each page to the relay: the
// job's progress says which page, live, and the answer has every page.
TEST_F(GatewayTest, OcrModelReportsProgressPerPage) {
#ifndef RELAY_TEST_MAKE_TIFF
  GTEST_SKIP() << "built without Leptonica";
#else
  const std::string ocr = std::filesystem::path(noop_binary()).parent_path() / "relay-model-ocr";
  if (!std::filesystem::exists(ocr)) GTEST_SKIP() << "relay-model-ocr is not built";
  const std::string samples = std::string(RELAY_TEST_SOURCE_DIR) + "/examples/samples/";
  TempDir dir;
  const std::string tiff = dir.path() + "/pages.tif";
  const std::string cmd = std::string(RELAY_TEST_MAKE_TIFF) + " " + tiff + " " + samples +
                          "invoice.png " + samples + "relay-ocr.png " + samples + "invoice.png";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(tiff, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(in)), {});
  const int port = free_port();
  Process model({ocr, "--listen", "127.0.0.1:" + std::to_string(port)}, Env{},
                dir.path() + "/ocr.log");
  ASSERT_TRUE(wait_until([&] { return port_open(port); }, 30s)) << model.log();

  start_gateway();
  auto r = http("POST", url("/jobs/echo"), {}, {}, {{"file", image, "pages.tif", "image/tiff"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = field(r, "id");
  EventStream stream(url("/jobs/echo/" + id + "/events"));
  ASSERT_TRUE(wait_until([&] { return stream.events().size() == 1; }, 10s)) << stream.raw();
  InferenceServer unused;  // start_relay's default; the relay is pointed at the OCR model
  auto relay =
      start_relay(unused, {{"RELAY_INFERENCE_URL", "http://127.0.0.1:" + std::to_string(port)},
                           {"RELAY_INFERENCE_ROUTES", "default=/ocr"},
                           {"RELAY_RELAY_PROGRESS_INTERVAL", "10ms"}});
  ASSERT_EQ(relay->wait_exit(60s), 0) << relay->log();
  ASSERT_TRUE(wait_until([&] { return stream.ended(); }, 20s)) << stream.raw();
  EXPECT_EQ(str(job(id), "status"), "completed");
  auto answer = json::parse(http("GET", url("/jobs/echo/" + id + "/result")).body).as_object();
  ASSERT_EQ(answer.at("pages").as_array().size(), 3u) << answer;
  EXPECT_NE(std::string(answer.at("text").as_string()).find("Relay"), std::string::npos) << answer;
  // Each page was reported (recorded at most once per interval: all three here).
  auto seq = conn_.command({"HGET", keys_.job("m1", id), "progress_seq"});
  EXPECT_GE(std::stoll(redis::as_string(seq.get())), 2);
  bool page_event = false;
  for (const auto& e : stream.events())
    if (e.name == "progress") {
      auto p = json::parse(e.data).as_object().at("progress").as_object();
      page_event = page_event || std::regex_search(std::string(p.at("message").as_string()),
                                                   std::regex("^page [123] of 3$"));
    }
  EXPECT_TRUE(page_event) << stream.raw();
#endif
}

}  // namespace
}  // namespace relay::testing
