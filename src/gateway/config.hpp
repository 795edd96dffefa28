#pragma once
// The gateway's configuration: one struct, every field's default in schema() (config.cpp),
// loaded from YAML and overridden by RELAY_* environment variables (SPEC §9).

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/shared.hpp"
#include "gateway/api_keys.hpp"
#include "redis/quota.hpp"

namespace relay::gateway {

struct ServiceType {
  std::string model;                    // whose relays run this service type's jobs
  std::vector<std::string> operations;  // allowed operations; empty = any
  std::int64_t max_input_size = 0;      // bytes; 0 = server.max_body_size
  // Deadlines for its jobs when the submission sets none; absent: none.
  std::optional<std::chrono::milliseconds> ttl, timeout;
  // Retries of failed jobs (opt-in): attempts in all (1: none, the seed's rule), and the
  // backoff before each retry (doubling from retry_backoff, jittered, up to retry_max_backoff).
  std::int64_t max_attempts = 1;
  std::chrono::milliseconds retry_backoff{1000}, retry_max_backoff{60'000};
  // Inputs by reference: the URL prefixes a submission's input_url may start with
  // ("s3://bucket/prefix/", "https://cdn.example.com/"); empty: uploads only.
  std::vector<std::string> input_urls;
};

struct Config {
  std::string listen;           // host:port
  std::string priority_header;  // present on a submission -> LPUSH (seed, "Priority jobs")
  std::vector<std::string> cors_origins;  // web origins browsers may call the API from (cors.hpp)
  std::int64_t max_body_size = 0;
  std::int64_t max_header_size = 0;
  std::chrono::milliseconds max_wait{};             // bound on ?wait=
  std::chrono::milliseconds shutdown_timeout{};     // drain deadline after SIGTERM
  std::chrono::milliseconds redis_retry_timeout{};  // per Redis step of a request
  std::int64_t max_connections = 0;
  std::int64_t connection_memory = 0;  // 0: half the memory limit
  std::chrono::milliseconds body_idle_timeout{};
  std::chrono::milliseconds idempotency_reservation{};
  std::int64_t min_upload_rate = 0, min_download_rate = 0;  // bytes/s
  std::int64_t webhook_concurrency = 16, webhook_per_host = 2, webhook_per_host_max = 8;
  std::int64_t blocking_threads = 0;      // request handlers: Redis, storage reads
  std::int64_t upload_threads = 0;        // received upload bytes -> storage
  std::int64_t upload_buffer_memory = 0;  // bytes of upload pieces over all uploads

  config::RedisConfig redis;
  storage::Config storage;
  std::map<std::string, ServiceType> service_types;

  // Quotas: the default per tenant, and per-tenant overrides (parsed from tenant_quotas_text).
  redis::Quota quota;
  std::map<std::string, std::string> tenant_quotas_text;
  std::map<std::string, redis::Quota> tenant_quotas;
  // The tenant's quota, with a burst of a minute's worth when none is set.
  redis::Quota quota_for(const std::string& tenant) const {
    auto it = tenant_quotas.find(tenant);
    redis::Quota q = it == tenant_quotas.end() ? quota : it->second;
    if (q.submit_burst == 0) q.submit_burst = q.submits_per_minute;
    return q;
  }
  bool quotas_limit_pending() const {
    if (quota.max_pending > 0) return true;
    for (const auto& [t, q] : tenant_quotas)
      if (q.max_pending > 0) return true;
    return false;
  }

  bool auth_enabled = true;
  std::map<std::string, std::string> api_keys;  // SHA-256 hex of the key -> tenant
  std::string api_keys_file;  // more of them, read again when it changes (gateway/api_keys.hpp)
  // The operator dashboard's keys, apart from tenants': SHA-256 hex -> role, "admin" or "read".
  std::map<std::string, std::string> admin_keys;
  std::string admin_keys_file;  // more of them, read again when it changes
  KeySource tenant_keys() const {
    return {"auth.api_keys", KeyKind::tenant, {api_keys.begin(), api_keys.end()}, api_keys_file};
  }
  KeySource operator_keys() const {
    return {
        "admin.api_keys", KeyKind::role, {admin_keys.begin(), admin_keys.end()}, admin_keys_file};
  }

  std::chrono::milliseconds reap_interval{}, reap_grace{}, job_retention{}, gc_interval{};
  std::chrono::milliseconds expire_interval{};
  std::int64_t max_reap_attempts = 0;
  bool keep_objects = false;

  std::chrono::milliseconds
      claim_idle{};      // events pending this long on a dead consumer are claimed
  std::string consumer;  // this replica's consumer name (default: host name)

  std::string webhook_secret;  // whsec_...
  bool webhook_allow_private = false;
  std::chrono::milliseconds dns_timeout{};
  std::int64_t dns_lookups = 4;
  bool input_urls_allow_private = false;  // https inputs by reference to private addresses
  std::chrono::milliseconds webhook_timeout{}, webhook_max_age{}, webhook_initial_backoff{};

  config::LogConfig log;
  crypto::EncryptionConfig encryption;

  std::set<std::string> models() const;
};

config::Schema schema(Config& c);
void validate(const Config& c);  // throws config::ConfigError naming the key
Config load(const std::string& path, const config::EnvLookup& env);

}  // namespace relay::gateway
