#include "redis/lua_scripts.hpp"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include "common/hex.hpp"

namespace relay::redis {
namespace {

std::string sha1_hex(std::string_view s) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return to_hex(d, sizeof d);
}

TEST(LuaScripts, BuildTimeSha1MatchesTheEmbeddedSource) {
  // EVALSHA names a script by the SHA-1 of exactly the bytes EVAL sends.
  for (const auto& s :
       {lua::submit, lua::take, lua::begin, lua::heartbeat, lua::finish, lua::give_back, lua::reap,
        lua::cancel, lua::schedule_webhook, lua::claim_webhooks, lua::webhook_outcome,
        lua::schedule_gc, lua::requeue_deadletter}) {
    EXPECT_EQ(s.sha1, sha1_hex(s.source)) << s.name;
    EXPECT_NE(s.source.find("KEYS[1]"), std::string_view::npos)
        << s.name << ": documented and using keys";
    EXPECT_TRUE(s.source.starts_with("--"))
        << s.name << ": starts with its KEYS/ARGV/returns comment";
  }
}

}  // namespace
}  // namespace relay::redis
