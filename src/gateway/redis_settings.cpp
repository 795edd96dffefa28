#include "gateway/redis_settings.hpp"

#include <charconv>

#include "common/backoff.hpp"

namespace relay::gateway {
namespace {

// A setting's value, or nullopt when the server does not know it (an older Redis's name).
std::optional<std::string> config_get(redis::Connection& c, const std::string& name) {
  auto r = c.command({"CONFIG", "GET", name});
  auto pairs = redis::as_pairs(r.get());
  if (pairs.empty()) return std::nullopt;
  return pairs.front().second;
}

long long to_number(const std::string& s) {
  long long v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

}  // namespace

std::optional<std::vector<SettingProblem>> redis_setting_problems(redis::Connection& c) {
  std::optional<std::string> policy;
  try {
    policy = config_get(c, "maxmemory-policy");
  } catch (const redis::ReplyError&) {
    return std::nullopt;  // CONFIG refused
  }
  std::vector<SettingProblem> out;
  if (policy && *policy != "noeviction")
    out.push_back({log::Level::warn, "maxmemory-policy", *policy,
                   "Redis may evict job records and queues when its memory is full, losing jobs "
                   "without a trace; with noeviction a full Redis refuses writes and the gateway "
                   "answers 503"});
  const auto aof = config_get(c, "appendonly");
  if (aof && *aof != "yes") {
    const auto save = config_get(c, "save");
    out.push_back({log::Level::warn, "appendonly", *aof,
                   save && !save->empty()
                       ? "a Redis restart loses the jobs accepted since its last snapshot; set "
                         "appendonly yes"
                       : "nothing is written to disk (save is empty too): a Redis restart loses "
                         "every job; set appendonly yes"});
  } else if (aof) {
    const auto fsync = config_get(c, "appendfsync");
    if (fsync && *fsync == "no")
      out.push_back({log::Level::warn, "appendfsync", *fsync,
                     "the append-only file is flushed when the OS decides (~30 s): a host "
                     "crash loses the jobs accepted meanwhile; set everysec or always"});
  }
  // (hash-max-ziplist-value before Redis 7.)
  auto value = config_get(c, "hash-max-listpack-value");
  if (!value) value = config_get(c, "hash-max-ziplist-value");
  if (value && to_number(*value) < 256)
    out.push_back({log::Level::info, "hash-max-listpack-value", *value,
                   "a finished job's record (its timings are longer than 64 bytes) is kept as a "
                   "hash table, ~2 KB; 256 keeps it compact, ~0.8 KB"});
  return out;
}

void check_redis_settings(const redis::Endpoint& ep, std::stop_token stop) {
  Backoff backoff(std::chrono::seconds(1), std::chrono::seconds(30));
  while (!stop.stop_requested()) {
    try {
      for (const auto& master : redis::Connection::masters(ep)) {
        auto c = redis::Connection::open(master);
        const std::string server = master.sentinel_master.empty()
                                       ? master.host + ":" + std::to_string(master.port)
                                       : "the master of " + master.sentinel_master;
        auto problems = redis_setting_problems(c);
        if (!problems) {
          log::debug("redis settings not checked: CONFIG GET is refused", {{"redis", server}});
          continue;
        }
        for (const auto& p : *problems)
          log::write(
              p.level, "redis setting",
              {{"redis", server}, {"setting", p.setting}, {"value", p.value}, {"why", p.why}});
      }
      return;
    } catch (const redis::IoError&) {
      // Not reachable yet (the gateway starts without Redis): checked when it is.
      sleep_unless_stopped(backoff.next(), stop);
    } catch (const std::exception& e) {
      log::debug("redis settings not checked", {{"error", e.what()}});
      return;
    }
  }
}

}  // namespace relay::gateway
