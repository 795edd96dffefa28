#pragma once
// Redis settings Relay depends on (README, "Redis for Relay"), checked once the gateway first
// reaches Redis: a setting that loses jobs (eviction, no append-only file, an fsync left to the
// OS) is logged as a warning, one that only costs memory (job records stored as hash tables) at
// info. A platform team deploys Relay beside a Redis it may not have configured itself; the
// gateway's log is where it looks first. A server that refuses CONFIG (managed services often
// rename or forbid it) is not checked: said at debug level.

#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "redis/connection.hpp"

namespace relay::gateway {

struct SettingProblem {
  log::Level level;
  std::string setting, value, why;
};

// One server's problems; nullopt when it refuses CONFIG GET. Throws redis::IoError.
std::optional<std::vector<SettingProblem>> redis_setting_problems(redis::Connection& c);

// Every master's (one in standalone and sentinel mode), logged; retried every few seconds while
// Redis cannot be reached, until stop.
void check_redis_settings(const redis::Endpoint& ep, std::stop_token stop);

}  // namespace relay::gateway
