#include "redis/job_record.hpp"

#include <gtest/gtest.h>

#include <set>

namespace relay {
namespace {

TEST(JobRecord, FieldsRoundTripAndEmptyOnesAreOmitted) {
  JobRecord r;
  r.id = "x";
  r.status = "pending";
  r.timings = R"({"total":1})";
  auto f = r.to_fields();
  EXPECT_EQ(f.size(), 3u);
  auto back = JobRecord::from_fields(f);
  EXPECT_EQ(back.id, "x");
  EXPECT_EQ(back.timings, r.timings);
  EXPECT_TRUE(back.error_code.empty());
}

TEST(JobRecord, UsesExactlyTheSpecFieldNames) {
  JobRecord r;
  for (auto* m : {&r.id,
                  &r.service_type,
                  &r.model,
                  &r.operation,
                  &r.status,
                  &r.tenant,
                  &r.input_key,
                  &r.input_filename,
                  &r.input_content_type,
                  &r.input_size,
                  &r.result_key,
                  &r.params,
                  &r.callback_url,
                  &r.priority,
                  &r.attempts,
                  &r.error_code,
                  &r.error_message,
                  &r.created_at,
                  &r.started_at,
                  &r.finished_at,
                  &r.holder,
                  &r.key_id,
                  &r.cancel_requested,
                  &r.timings,
                  &r.webhook_status,
                  &r.webhook_attempts,
                  &r.webhook_last})
    *m = "v";
  std::set<std::string> names;
  for (auto& [k, v] : r.to_fields()) names.insert(k);
  std::set<std::string> spec{"id", "service_type", "model", "operation", "status", "tenant",
                             "input_key", "input_filename", "input_content_type", "input_size",
                             "result_key", "params", "callback_url", "priority", "attempts",
                             "error_code", "error_message", "created_at", "started_at",
                             "finished_at", "holder", "key_id", "cancel_requested", "timings",
                             // the gateway's webhook bookkeeping, beside SPEC §3's fields:
                             "webhook_status", "webhook_attempts", "webhook_last"};
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
