#include "relay/config.hpp"

#include <unistd.h>

namespace relay::sidecar {

config::Schema schema(Config& c) {
  config::Schema s;
  s.string("model", &c.model, "",
           "Model this relay serves: it takes jobs from `relay:<model>:pending`. Required.");
  s.string("redis.url", &c.redis.url, "redis://127.0.0.1:6379",
           "Redis address, `redis://[user:password@]host:port[/db]`.");
  s.string("redis.username", &c.redis.username, "", "Redis ACL user (overrides the URL's).");
  s.string("redis.password", &c.redis.password, "",
           "Redis password (overrides the URL's). Prefer the environment variable.");
  s.string("redis.key_prefix", &c.redis.key_prefix, "",
           "Prefix for every key and channel, e.g. `prod:`.");
  s.boolean("redis.hash_tag", &c.redis.hash_tag, false,
            "Wrap the model in `{}` in keys so each model's keys share a Redis Cluster slot.");
  s.duration("redis.connect_timeout", &c.redis.connect_timeout, "5s",
             "Timeout of one connection attempt.");
  s.string("storage.url", &c.storage.url, "file:///var/lib/relay/storage",
           "`file:///path` or `s3://bucket/prefix`.");
  s.string("storage.s3_endpoint", &c.storage.s3_endpoint, "",
           "S3 endpoint URL; empty for AWS (`https://s3.<region>.amazonaws.com`).");
  s.string("storage.s3_region", &c.storage.s3_region, "us-east-1",
           "S3 region (part of the SigV4 signature).");
  s.boolean("storage.s3_path_style", &c.storage.s3_path_style, false,
            "Path-style addressing (`endpoint/bucket/key`), for MinIO and most non-AWS stores.");
  s.integer("storage.s3_part_size", &c.storage.s3_part_size, 8 << 20, 5 << 20, 1LL << 32,
            "Multipart part size in bytes; bodies up to this size go in one PUT.");
  s.duration("storage.s3_timeout", &c.storage.s3_timeout, "30s",
             "Connect timeout, and how long a transfer may stall before it fails.");
  s.boolean("storage.fsync", &c.storage.fsync, false,
            "Filesystem backend: fsync each object before it is renamed into place.");
  s.string("inference.url", &c.inference.url, "http://127.0.0.1:9000",
           "Base URL of the local inference server.");
  s.string("inference.health_path", &c.inference.health_path, "/health",
           "Health endpoint; the relay dequeues nothing before it answers 200.");
  s.string_map("inference.routes", &c.inference.routes, {{"default", "/predict"}},
               "Operation → path on the inference server. A job without an operation uses "
               "`default`; an unknown operation fails the job.");
  s.duration("inference.timeout", &c.inference.timeout, "0s",
             "Limit on one inference request; `0s` = none (long jobs are normal).");
  s.duration("lease_ttl", &c.lease_ttl, "60s",
             "Processing lease TTL; refreshed every lease_ttl/3, so it bounds how fast a dead pod "
             "is noticed, not the job length.");
  s.duration("queue_pop_timeout", &c.queue_pop_timeout, "5m",
             "How long BLMOVE waits for a job; on timeout the relay exits 0.");
  s.integer("max_jobs", &c.max_jobs, 1, 0, 1LL << 40,
            "Jobs to process before exiting; `0` = no limit.");
  s.duration("relay.health_timeout", &c.health_timeout, "5m",
             "How long to wait at start for the inference server (and Redis); then exit 1.");
  s.duration("relay.health_interval", &c.health_interval, "500ms", "Pause between health checks.");
  s.string("relay.pod_name", &c.pod_name, "",
           "Name in lease tokens and logs; default: the host name (the pod name in Kubernetes).");
  s.string("log.level", &c.log_level, "info", "`debug`, `info`, `warn` or `error`.");
  s.string("log.format", &c.log_format, "json", "`json` (one object per line) or `text`.");
  return s;
}

redis::Endpoint Config::redis_endpoint() const {
  redis::Endpoint ep = redis::parse_url(redis.url);
  if (!redis.username.empty()) ep.username = redis.username;
  if (!redis.password.empty()) ep.password = redis.password;
  ep.connect_timeout = redis.connect_timeout;
  return ep;
}

void validate(const Config& c) {
  auto bad = [](const std::string& key, const std::string& why) {
    throw config::ConfigError("config key '" + key + "': " + why);
  };
  if (c.model.empty()) bad("model", "required (the model whose queue this relay serves)");
  for (char ch : c.model)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      bad("model", "only letters, digits, '-', '_' and '.' are allowed");
  try {
    (void)c.redis_endpoint();
  } catch (const std::invalid_argument& e) {
    bad("redis.url", e.what());
  }
  if (!c.storage.url.starts_with("file:///") && !c.storage.url.starts_with("s3://"))
    bad("storage.url", "expected file:///path or s3://bucket[/prefix]");
  if (!c.inference.url.starts_with("http://") && !c.inference.url.starts_with("https://"))
    bad("inference.url", "expected http://host:port");
  if (c.inference.health_path.empty() || c.inference.health_path.front() != '/')
    bad("inference.health_path", "must start with '/'");
  for (const auto& [op, path] : c.inference.routes)
    if (path.empty() || path.front() != '/') bad("inference.routes." + op, "must start with '/'");
  if (c.lease_ttl < std::chrono::milliseconds(300)) bad("lease_ttl", "must be at least 300ms");
  if (c.queue_pop_timeout < std::chrono::milliseconds(1))
    bad("queue_pop_timeout", "must be positive");
  if (c.log_level != "debug" && c.log_level != "info" && c.log_level != "warn" &&
      c.log_level != "error")
    bad("log.level", "expected debug, info, warn or error");
  if (c.log_format != "json" && c.log_format != "text") bad("log.format", "expected json or text");
}

Config load(const std::string& path, const config::EnvLookup& env) {
  Config c;
  schema(c).load_file(path, env);
  if (c.pod_name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    c.pod_name = host[0] ? host : "relay";
  }
  validate(c);
  return c;
}

}  // namespace relay::sidecar
