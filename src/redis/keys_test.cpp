#include "redis/keys.hpp"

#include <gtest/gtest.h>

#include "redis/slot.hpp"

namespace relay::redis {
namespace {

TEST(Keys, SeedSchemaWithoutPrefixOrTag) {
  Keys k;
  EXPECT_EQ(k.pending("whisper"), "relay:whisper:pending");
  EXPECT_EQ(k.processing("whisper"), "relay:whisper:processing");
  EXPECT_EQ(k.lease("whisper", "abc"), "relay:whisper:lease:abc");
  EXPECT_EQ(k.taken("whisper", "h-1"), "relay:whisper:taken:h-1");
  EXPECT_EQ(k.deadletter("whisper"), "relay:whisper:deadletter");
  EXPECT_EQ(k.completed_channel("whisper"), "jobs:whisper:completed");
  EXPECT_EQ(k.cancel_channel("whisper"), "relay:whisper:cancel");
  EXPECT_EQ(k.job_done_channel("abc"), "job:abc:done");
  EXPECT_EQ(k.job_changed_channel("abc"), "job:abc:changed");
  EXPECT_EQ(k.job("whisper", "abc"), "job:abc");
  EXPECT_EQ(k.events("whisper"), "jobs:whisper:events");
  EXPECT_EQ(k.expiries("whisper"), "relay:whisper:expiries");
}

TEST(Keys, HashTagPutsEveryKeyOfAModelInOneSlot) {
  Keys k("prod:", true);
  EXPECT_EQ(k.pending("ocr"), "prod:relay:{ocr}:pending");
  EXPECT_EQ(k.lease("ocr", "x"), "prod:relay:{ocr}:lease:x");
  EXPECT_EQ(k.job("ocr", "x"), "prod:job:{ocr}:x");
  EXPECT_EQ(k.events("ocr"), "prod:jobs:{ocr}:events");
  // Channels are not keys: no tag.
  EXPECT_EQ(k.cancel_channel("ocr"), "prod:relay:ocr:cancel");
  EXPECT_EQ(k.job_changed_channel("x"), "prod:job:x:changed");
}

// take.lua names a job's record and changed channel from an id it finds at the head of pending,
// from parts it is given: they must give the names built here.
TEST(Keys, PartsGivenToAScriptMakeTheSameNames) {
  for (bool tag : {false, true}) {
    Keys k("prod:", tag);
    const std::string id = "0f8b3c1e-1111-4222-8333-944455556666";
    EXPECT_EQ(k.job("ocr", "") + id, k.job("ocr", id));
    EXPECT_EQ(k.job_channel_prefix() + id + std::string(Keys::kChangedSuffix),
              k.job_changed_channel(id));
  }
}

TEST(Keys, ScheduleAndIdempotencyKeysAreGlobalWithoutTheTagAndPerModelWithIt) {
  Keys plain;
  EXPECT_EQ(plain.webhooks_due("ocr"), "relay:webhooks:due");
  EXPECT_EQ(plain.webhook("ocr", "msg_1"), "relay:webhook:msg_1");
  EXPECT_EQ(plain.gc_due("ocr"), "relay:gc:due");
  EXPECT_EQ(plain.idempotency("ocr", "t", "h"), "relay:idem:t:h");
  EXPECT_EQ(plain.one_per_due_set({"a", "b"}), std::vector<std::string>{"a"});
  Keys tagged("", true);
  EXPECT_EQ(tagged.webhooks_due("ocr"), "relay:{ocr}:webhooks:due");
  EXPECT_EQ(tagged.webhook("ocr", "msg_1"), "relay:{ocr}:webhook:msg_1");
  EXPECT_EQ(tagged.gc_due("ocr"), "relay:{ocr}:gc:due");
  EXPECT_EQ(tagged.idempotency("ocr", "t", "h"), "relay:{ocr}:idem:t:h");
  EXPECT_EQ(tagged.one_per_due_set({"a", "b"}), (std::vector<std::string>{"a", "b"}));
}

// Every key a Lua step may be given is built from one model; with the tag they must all hash to
// that model's slot (else Redis Cluster answers CROSSSLOT), and different models should spread.
TEST(Keys, WithTheTagEveryKeyOfAModelHashesToOneSlot) {
  for (const char* prefix : {"", "prod:", "{weird}:"}) {
    Keys k(prefix, true);
    for (const char* model : {"ocr", "whisper-large", "m1", "a.b_c"}) {
      const std::string id = "0f8b3c1e-1111-4222-8333-944455556666";
      const std::vector<std::string> all{k.pending(model),
                                         k.processing(model),
                                         k.deadletter(model),
                                         k.lease(model, id),
                                         k.job(model, id),
                                         k.events(model),
                                         k.taken(model, "h-1"),
                                         k.suspects(model),
                                         k.expiries(model),
                                         k.webhooks_due(model),
                                         k.webhook(model, "msg_x"),
                                         k.gc_due(model),
                                         k.idempotency(model, "tenant", "abc")};
      const int slot = key_slot(all.front());
      for (const auto& key : all) EXPECT_EQ(key_slot(key), slot) << prefix << " " << key;
    }
  }
  EXPECT_NE(key_slot(Keys("", true).pending("ocr")), key_slot(Keys("", true).pending("asr")));
}

TEST(Slot, MatchesRedisClusterSpec) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the spec's test vector
  EXPECT_EQ(key_slot("foo"), 12182);      // CLUSTER KEYSLOT foo
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));  // empty tag: the whole key
  EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));  // the first { to the first }
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
}

}  // namespace
}  // namespace relay::redis
