#include "redis/job_record.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/time.hpp"

namespace relay {
namespace {

JobRecord full_record() {
  JobRecord r;
  r.id = "0b5e2c1e-8c1a-4f4e-9d6a-0d6f1c2b3a4d";
  r.service_type = "ocr";
  r.model = "m1";
  r.operation = "read";
  r.status = JobStatus::completed;
  r.tenant = "acme";
  r.input_key = "ocr/x/input";
  r.input_filename = "scan.tiff";
  r.input_content_type = "image/tiff";
  r.input_size = 12'345'678'901;
  r.result_key = "ocr/x/result.json";
  r.result_content_type = "text/plain";
  r.params = R"({"lang":"en","dpi":300.50})";
  r.callback_url = "https://hooks.example/x";
  r.priority = true;
  r.attempts = 2;
  r.error_code = "model_error";
  r.error_message = "boom";
  r.created_at = *parse_rfc3339("2026-11-30T12:00:00.001Z");
  r.started_at = *parse_rfc3339("2026-11-30T12:00:01.500Z");
  r.finished_at = *parse_rfc3339("2026-11-30T12:00:09.999Z");
  r.expires_at = *parse_rfc3339("2026-11-30T12:15:00.001Z");
  r.timeout = std::chrono::milliseconds(90'500);
  r.holder = "relay-7";
  r.key_id = "k2";
  r.cancel_requested = true;
  r.watched = true;
  r.timings = R"({"total_ms":8499.000})";
  r.webhook_status = "delivered";
  r.webhook_attempts = 3;
  r.webhook_last = R"({"status":200})";
  return r;
}

std::map<std::string, std::string> as_map(const Fields& f) {
  return {f.begin(), f.end()};
}

TEST(JobRecord, EveryFieldRoundTripsThroughItsStoredForm) {
  const JobRecord r = full_record();
  const Fields stored = r.to_fields();
  const auto back = JobRecord::from_fields(stored);
  EXPECT_EQ(as_map(back.to_fields()), as_map(stored));
  EXPECT_EQ(back.status, JobStatus::completed);
  EXPECT_EQ(back.input_size, 12'345'678'901u);
  EXPECT_TRUE(back.priority);
  EXPECT_EQ(back.attempts, 2);
  EXPECT_EQ(back.created_at, r.created_at);
  EXPECT_EQ(back.finished_at, r.finished_at);
  EXPECT_TRUE(back.cancel_requested);
  EXPECT_TRUE(back.watched);
  EXPECT_EQ(back.webhook_attempts, 3);
  EXPECT_EQ(back.expires_at, r.expires_at);
  EXPECT_EQ(back.timeout, std::chrono::milliseconds(90'500));
  EXPECT_EQ(back.params, r.params) << "params are kept as the client wrote them";
}

// What operators read with HGETALL, and what the Lua steps write: these forms never change.
TEST(JobRecord, StoresValuesInTheirDocumentedForms) {
  const auto m = as_map(full_record().to_fields());
  EXPECT_EQ(m.at("status"), "completed");
  EXPECT_EQ(m.at("input_size"), "12345678901");
  EXPECT_EQ(m.at("priority"), "1");
  EXPECT_EQ(m.at("cancel_requested"), "1");
  EXPECT_EQ(m.at("watched"), "1") << "what lua/watch.lua writes and lua/settle.lua reads";
  EXPECT_EQ(m.at("attempts"), "2");
  EXPECT_EQ(m.at("created_at"), "2026-11-30T12:00:00.001Z");
  EXPECT_EQ(m.at("webhook_attempts"), "3");
  EXPECT_EQ(m.at("timeout_ms"), "90500");
}

TEST(JobRecord, AbsentValuesAreLeftOutButSizesAndAttemptsAreAlwaysWritten) {
  JobRecord r;
  r.id = "x";
  const auto m = as_map(r.to_fields());
  EXPECT_EQ(m, (std::map<std::string, std::string>{
                   {"id", "x"}, {"status", "pending"}, {"input_size", "0"}, {"attempts", "0"}}));
  const auto back = JobRecord::from_fields(r.to_fields());
  EXPECT_FALSE(back.priority);
  EXPECT_FALSE(back.created_at);
  EXPECT_EQ(back.webhook_attempts, 0);
}

// Redis gives a small hash's fields in the order they were first written (to_fields' order, then
// what later steps added), a large one's in any order: every order reads the same record.
TEST(JobRecord, FieldsReadTheSameInAnyOrder) {
  const Fields stored = full_record().to_fields();
  const auto expected = as_map(stored);
  Fields reversed(stored.rbegin(), stored.rend());
  EXPECT_EQ(as_map(JobRecord::from_fields(reversed).to_fields()), expected);
  Fields rotated = stored;
  std::rotate(rotated.begin(), rotated.begin() + 7, rotated.end());
  EXPECT_EQ(as_map(JobRecord::from_fields(rotated).to_fields()), expected);
  Fields interleaved;  // every other field, then the rest
  for (size_t i = 0; i < stored.size(); i += 2) interleaved.push_back(stored[i]);
  for (size_t i = 1; i < stored.size(); i += 2) interleaved.push_back(stored[i]);
  EXPECT_EQ(as_map(JobRecord::from_fields(interleaved).to_fields()), expected);
}

TEST(JobRecord, AValueThatDoesNotParseIsAnError) {
  EXPECT_THROW(JobRecord::from_fields(Fields{{"status", "done"}}), RecordError);
  EXPECT_THROW(JobRecord::from_fields(Fields{{"input_size", "12kb"}}), RecordError);
  EXPECT_THROW(JobRecord::from_fields(Fields{{"input_size", "-1"}}), RecordError);
  EXPECT_THROW(JobRecord::from_fields(Fields{{"attempts", ""}}), RecordError);
  EXPECT_THROW(JobRecord::from_fields(Fields{{"created_at", "yesterday"}}), RecordError);
  EXPECT_THROW(JobRecord::from_fields(Fields{{"timeout_ms", "1.5"}}), RecordError);
  // Fields it does not know (a newer version's) are not its business.
  EXPECT_EQ(JobRecord::from_fields(Fields{{"id", "x"}, {"future_field", "?"}}).id, "x");
}

TEST(JobRecord, UsesExactlyTheSpecFieldNames) {
  std::set<std::string> names;
  for (auto& [k, v] : full_record().to_fields()) names.insert(k);
  std::set<std::string> spec{"id", "service_type", "model", "operation", "status", "tenant",
                             "input_key", "input_filename", "input_content_type", "input_size",
                             "result_key", "result_content_type", "params", "callback_url",
                             "priority", "attempts", "error_code", "error_message", "created_at",
                             "started_at", "finished_at", "holder", "key_id", "cancel_requested",
                             "timings", "expires_at", "timeout_ms",
                             // the gateway's webhook bookkeeping, beside SPEC §3's fields:
                             "webhook_status", "webhook_attempts", "webhook_last",
                             // and the flag that something waits on the job's end
                             "watched"};
  EXPECT_EQ(names, spec);
}

TEST(JobStatus, TerminalStates) {
  EXPECT_FALSE(is_terminal(JobStatus::pending));
  EXPECT_FALSE(is_terminal(JobStatus::processing));
  EXPECT_TRUE(is_terminal(JobStatus::completed));
  EXPECT_TRUE(is_terminal(JobStatus::failed));
  EXPECT_TRUE(is_terminal(JobStatus::cancelled));
  EXPECT_EQ(parse_status("cancelled"), JobStatus::cancelled);
  EXPECT_EQ(parse_status("done"), std::nullopt);
}

}  // namespace
}  // namespace relay
