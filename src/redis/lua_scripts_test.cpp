#include "redis/lua_scripts.hpp"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <regex>
#include <string>

#include "common/hex.hpp"

namespace relay::redis {
namespace {

std::string sha1_hex(std::string_view s) {
  unsigned char d[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return to_hex(d, sizeof d);
}

// Every script (RELAY_LUA_SCRIPTS in src/CMakeLists.txt).
const std::initializer_list<Script> kScripts = {lua::submit,
                                                lua::take,
                                                lua::begin,
                                                lua::heartbeat,
                                                lua::progress,
                                                lua::finish,
                                                lua::give_back,
                                                lua::reap,
                                                lua::expire,
                                                lua::admit,
                                                lua::retry,
                                                lua::requeue_retry,
                                                lua::cancel,
                                                lua::schedule_webhook,
                                                lua::claim_webhooks,
                                                lua::webhook_outcome,
                                                lua::settle,
                                                lua::requeue_deadletter,
                                                lua::renew_idempotency,
                                                lua::watch,
                                                lua::pause};

TEST(LuaScripts, BuildTimeSha1MatchesTheEmbeddedSource) {
  // EVALSHA names a script by the SHA-1 of exactly the bytes EVAL sends.
  for (const auto& s : kScripts) {
    EXPECT_EQ(s.sha1, sha1_hex(s.source)) << s.name;
    EXPECT_NE(s.source.find("KEYS[1]"), std::string_view::npos)
        << s.name << ": documented and using keys";
    EXPECT_TRUE(s.source.starts_with("--"))
        << s.name << ": starts with its KEYS/ARGV/returns comment";
  }
}

// Redis Cluster (and managed services) require a script to declare every key it touches in
// KEYS: so each redis.call's key arguments must be KEYS[...], never a string built from ARGV.
TEST(LuaScripts, TouchOnlyTheKeysTheyAreGiven) {
  const std::regex call(R"(redis\.p?call\(\s*'([A-Z]+)'\s*((?:,[^,)]*)*)\))");
  // KEYS[n], or KEYS[<expression>] where a script walks a list of keys it was given.
  const std::regex key_arg(R"(^\s*KEYS\[[^\]\[]+\]\s*$)");
  for (const auto& s : kScripts) {
    std::string src(s.source);
    int calls = 0;
    for (std::sregex_iterator it(src.begin(), src.end(), call), end; it != end; ++it, ++calls) {
      const std::string cmd = (*it)[1];
      std::vector<std::string> args;
      std::string rest = (*it)[2];
      for (size_t pos = 0; pos < rest.size();) {
        size_t next = rest.find(',', pos + 1);
        args.push_back(rest.substr(pos + 1, next == std::string::npos ? next : next - pos - 1));
        pos = next == std::string::npos ? rest.size() : next;
      }
      size_t keys = 1;                                  // the first argument is the key...
      if (cmd == "PUBLISH" || cmd == "TIME") keys = 0;  // ...none
      if (cmd == "LMOVE" || cmd == "RPOPLPUSH" || cmd == "SMOVE" || cmd == "COPY")
        keys = 2;  // ...two keys
      if (cmd == "DEL" || cmd == "EXISTS" || cmd == "UNLINK") keys = args.size();
      ASSERT_GE(args.size(), keys) << s.name << ": " << it->str();
      for (size_t i = 0; i < keys; ++i)
        EXPECT_TRUE(std::regex_match(args[i], key_arg))
            << s.name << ": " << it->str() << " touches a key not given in KEYS";
    }
    EXPECT_GT(calls, 0) << s.name;
  }
}

}  // namespace
}  // namespace relay::redis
