#include "common/job_id.hpp"

#include <gtest/gtest.h>

#include <set>

#include "storage/object_keys.hpp"

namespace relay {
namespace {

TEST(JobId, NewIdsAreValidUuidV4AndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto id = new_job_id();
    EXPECT_TRUE(is_valid_job_id(id)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(JobId, RejectsAnythingElse) {
  for (const char* bad :
       {"", "abc", "11111111-1111-1111-8111-111111111111" /* not v4 */,
        "11111111-1111-4111-8111-11111111111G", "11111111-1111-4111-8111-1111111111111",
        "11111111_1111-4111-8111-111111111111", "../../etc/passwd-000000000000000000",
        "AAAAAAAA-1111-4111-8111-111111111111" /* uppercase */})
    EXPECT_FALSE(is_valid_job_id(bad)) << bad;
  EXPECT_TRUE(is_valid_job_id("11111111-1111-4111-8111-111111111111"));
}

TEST(ObjectKeys, FollowTheSpecLayout) {
  EXPECT_EQ(input_object_key("ocr", "abc"), "ocr/abc/input");
  EXPECT_EQ(result_object_key("ocr", "abc"), "ocr/abc/result.json");
}

}  // namespace
}  // namespace relay
