#include "redis/lua_scripts.hpp"

#include <gtest/gtest.h>
#include <openssl/sha.h>

namespace relay::redis {
namespace {

std::string sha1_hex(std::string_view s) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

TEST(LuaScripts, BuildTimeSha1MatchesTheEmbeddedSource) {
  // EVALSHA names a script by the SHA-1 of exactly the bytes EVAL sends.
  for (const auto& s : {lua::submit, lua::take, lua::begin, lua::heartbeat, lua::finish, lua::give_back}) {
    EXPECT_EQ(s.sha1, sha1_hex(s.body)) << s.name;
    EXPECT_NE(s.body.find("KEYS[1]"), std::string_view::npos) << s.name << ": documented and using keys";
    EXPECT_TRUE(s.body.starts_with("--")) << s.name << ": starts with its KEYS/ARGV/returns comment";
  }
}

}  // namespace
}  // namespace relay::redis
