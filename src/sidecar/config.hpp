#pragma once
// The relay's configuration: one struct, every field with its default in bind() (config.cpp),
// loaded from YAML and overridden by RELAY_* environment variables (SPEC §9).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "config/shared.hpp"

namespace relay::sidecar {

struct InferenceConfig {
  std::string url;                            // base URL of the local inference server
  std::string health_path;                    // GET, must answer 200 before any dequeue
  std::map<std::string, std::string> routes;  // operation -> path; "default" for none
  std::chrono::milliseconds timeout{};        // whole request; 0 = none
};

struct Config {
  std::string model;
  config::RedisConfig redis;
  storage::Config storage;
  InferenceConfig inference;
  std::chrono::milliseconds lease_ttl{};
  std::chrono::milliseconds queue_pop_timeout{};
  std::int64_t max_jobs = 1;
  std::int64_t concurrency = 1;            // jobs in hand at once
  std::chrono::milliseconds take_ahead{};  // 0: off
  std::chrono::milliseconds health_timeout{};
  std::chrono::milliseconds health_interval{};
  // A job's input read or result stored keeps trying while storage is unavailable this long.
  std::chrono::milliseconds storage_retry_timeout{};
  std::string pod_name;   // lease tokens start with it; default: the host name
  std::string spool_dir;  // model answers over 1 MiB are kept here; default: $TMPDIR or /tmp
  std::int64_t max_result_size = 0;  // a larger answer fails its job (0: no limit)
  std::string progress_listen;       // the progress endpoint (empty: off)
  std::chrono::milliseconds progress_interval{};
  std::chrono::milliseconds progress_webhook_interval{};
  bool input_urls_allow_private = false;  // inputs by reference: private addresses allowed
  std::string input_urls_ca_file;         // extra CAs for https inputs
  config::LogConfig log;
  crypto::EncryptionConfig encryption;

  redis::Endpoint redis_endpoint() const { return redis.endpoint(); }
  redis::Keys keys() const { return redis.keys(); }
};

// The schema for this config; load() then validate().
config::Schema schema(Config& c);
// Throws config::ConfigError naming the key.
void validate(const Config& c);
Config load(const std::string& path, const config::EnvLookup& env);

}  // namespace relay::sidecar
