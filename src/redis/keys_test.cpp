#include "redis/keys.hpp"

#include <gtest/gtest.h>

namespace relay::redis {
namespace {

TEST(Keys, SeedSchemaWithoutPrefixOrTag) {
  Keys k;
  EXPECT_EQ(k.pending("whisper"), "relay:whisper:pending");
  EXPECT_EQ(k.processing("whisper"), "relay:whisper:processing");
  EXPECT_EQ(k.lease("whisper", "abc"), "relay:whisper:lease:abc");
  EXPECT_EQ(k.deadletter("whisper"), "relay:whisper:deadletter");
  EXPECT_EQ(k.completed_channel("whisper"), "jobs:whisper:completed");
  EXPECT_EQ(k.cancel_channel("whisper"), "relay:whisper:cancel");
  EXPECT_EQ(k.job_done_channel("abc"), "job:abc:done");
  EXPECT_EQ(k.job("whisper", "abc"), "job:abc");
  EXPECT_EQ(k.events("whisper"), "jobs:whisper:events");
}

TEST(Keys, HashTagPutsEveryKeyOfAModelInOneSlot) {
  Keys k("prod:", true);
  EXPECT_EQ(k.pending("ocr"), "prod:relay:{ocr}:pending");
  EXPECT_EQ(k.lease("ocr", "x"), "prod:relay:{ocr}:lease:x");
  EXPECT_EQ(k.job("ocr", "x"), "prod:job:{ocr}:x");
  EXPECT_EQ(k.events("ocr"), "prod:jobs:{ocr}:events");
  // Channels are not keys: no tag.
  EXPECT_EQ(k.cancel_channel("ocr"), "prod:relay:ocr:cancel");
}

}  // namespace
}  // namespace relay::redis
