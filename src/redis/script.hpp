#pragma once
#include <string_view>

namespace relay::redis {

// A Lua script (redis/lua/*.lua, embedded with its SHA-1 by CMake into lua_scripts.hpp): run as
// EVALSHA, sent whole with EVAL on NOSCRIPT (after a Redis restart or failover).
struct Script {
  std::string_view name;
  std::string_view source;
  std::string_view sha1;
};

}  // namespace relay::redis
