#include "redis/completion.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <map>

#include "common/time.hpp"

namespace relay::redis {
namespace {

namespace json = boost::json;

Completion base(JobStatus status) {
  return Completion{.job_id = "j1",
                    .model = "m1",
                    .service_type = "ocr",
                    .status = status,
                    .finished_at = *parse_rfc3339("2026-11-30T12:00:09.999Z"),
                    .result_key = "ocr/j1/result.json",
                    .result_content_type = "text/plain",
                    .error_code = "model_error",
                    .error_message = std::string(5000, 'e'),
                    .timings = R"({"total_ms":1.000})",
                    .failures = {}};
}

json::object payload_of(const Completion& c) {
  return json::parse(c.payload()).as_object();
}

// The documented payload: the same keys from every writer, result_key only when completed and
// error_code only when failed.
TEST(Completion, PayloadCarriesTheDocumentedKeysPerStatus) {
  auto done = payload_of(base(JobStatus::completed));
  EXPECT_EQ(done, (json::object{{"job_id", "j1"},
                                {"status", "completed"},
                                {"model", "m1"},
                                {"service_type", "ocr"},
                                {"finished_at", "2026-11-30T12:00:09.999Z"},
                                {"result_key", "ocr/j1/result.json"}}));
  auto failed = payload_of(base(JobStatus::failed));
  EXPECT_EQ(failed.at("error_code"), "model_error");
  EXPECT_FALSE(failed.contains("result_key"));
  auto cancelled = payload_of(base(JobStatus::cancelled));
  EXPECT_FALSE(cancelled.contains("result_key"));
  EXPECT_FALSE(cancelled.contains("error_code"));
  EXPECT_EQ(cancelled.size(), 5u);
}

TEST(Completion, PayloadReadsBack) {
  for (auto st : {JobStatus::completed, JobStatus::failed, JobStatus::cancelled}) {
    const auto c = base(st);
    auto back = Completion::from_payload(c.payload());
    ASSERT_TRUE(back);
    EXPECT_EQ(back->job_id, c.job_id);
    EXPECT_EQ(back->status, st);
    EXPECT_EQ(back->finished_at, c.finished_at);
    EXPECT_EQ(back->service_type, "ocr");
    EXPECT_EQ(back->result_key, st == JobStatus::completed ? c.result_key : "");
  }
  EXPECT_FALSE(Completion::from_payload("not json"));
  EXPECT_FALSE(Completion::from_payload(
      R"({"job_id":"j","status":"pending","finished_at":"2026-11-30T12:00:09.999Z"})"))
      << "not a terminal status";
  EXPECT_FALSE(Completion::from_payload(R"({"job_id":"j","status":"failed"})"));
}

// The record fields the relay's finish writes: the transition's, nothing of the rest of the
// record (finish.lua sets them on a record that has its size and attempts already).
TEST(Completion, FieldsAreTheTransitionsOnly) {
  auto fields = [](JobStatus st) {
    auto f = base(st).fields();
    return std::map<std::string, std::string>(f.begin(), f.end());
  };
  EXPECT_EQ(fields(JobStatus::completed),
            (std::map<std::string, std::string>{{"status", "completed"},
                                                {"finished_at", "2026-11-30T12:00:09.999Z"},
                                                {"timings", R"({"total_ms":1.000})"},
                                                {"result_key", "ocr/j1/result.json"},
                                                {"result_content_type", "text/plain"}}));
  auto failed = fields(JobStatus::failed);
  EXPECT_EQ(failed.at("error_code"), "model_error");
  EXPECT_EQ(failed.at("error_message").size(), 2048u) << "capped";
  EXPECT_FALSE(failed.contains("result_key"));
  auto cancelled = fields(JobStatus::cancelled);
  EXPECT_EQ(cancelled.size(), 3u);
}

}  // namespace
}  // namespace relay::redis
