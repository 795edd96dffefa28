#include "gateway/config.hpp"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "common/text.hpp"
#include "common/time.hpp"
#include "gateway/api_keys.hpp"
#include "gateway/cors.hpp"
#include "gateway/webhook_signature.hpp"

namespace relay::gateway {
namespace {

[[noreturn]] void bad(const std::string& key, const std::string& why) {
  throw config::ConfigError("config key '" + key + "': " + why);
}

std::int64_t parse_size(const std::string& key, const std::string& text) {
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || p != text.data() + text.size() || n < 0)
    bad(key, "expected a size in bytes, got '" + text + "'");
  return n;
}

}  // namespace

std::set<std::string> Config::models() const {
  std::set<std::string> out;
  for (const auto& [name, st] : service_types) out.insert(st.model);
  return out;
}

config::Schema schema(Config& c) {
  config::Schema s;
  s.string(
      "server.listen", &c.listen, "127.0.0.1:8080",
      "Address of the HTTP API: an IP and port (`0.0.0.0:8080`, `[::]:8080`; `localhost` is the "
      "one name taken).");
  s.string("server.priority_header", &c.priority_header, "",
           "When set, a submission carrying this header is queued at the front (`LPUSH`), e.g. "
           "`X-Priority`.");
  s.section(
      "server.cors_origins", "",
      "Web origins whose pages may call the API from a browser (CORS): `https://app.example.com` "
      "(scheme, host and port, as a browser sends them), or `*` for any. Answers to their "
      "requests name them in `Access-Control-Allow-Origin`, and their preflights (`OPTIONS`) "
      "are answered 204. Access still takes an API key: this decides whether a browser lets a "
      "page on another origin read the answers. None by default (the dashboard is served from "
      "the gateway's own origin). Environment form: comma-separated.",
      [&c] { c.cors_origins.clear(); },
      [&c](const YAML::Node& n) {
        c.cors_origins.clear();
        if (n.IsScalar()) {
          c.cors_origins.push_back(n.as<std::string>());
          return;
        }
        if (!n.IsSequence() && !n.IsNull())
          bad("server.cors_origins", "expected a list of origins (https://host[:port])");
        for (const auto& o : n) {
          if (!o.IsScalar()) bad("server.cors_origins", "expected origins (https://host[:port])");
          c.cors_origins.push_back(o.as<std::string>());
        }
      },
      [&c](const std::string& text) {
        c.cors_origins.clear();
        for (auto origin : comma_items(text)) c.cors_origins.emplace_back(origin);
      });
  s.integer("server.max_body_size", &c.max_body_size, 5LL << 30, 0, 1LL << 50,
            "Largest accepted input, bytes (413 beyond).");
  s.integer("server.max_header_size", &c.max_header_size, 16384, 1024, 1 << 20,
            "Largest accepted request header, bytes.");
  s.duration("server.max_wait", &c.max_wait, "60s", "Upper bound on `?wait=` long-polls.",
             config::kZeroAllowed);
  s.duration("server.shutdown_timeout", &c.shutdown_timeout, "30s",
             "On SIGTERM, how long in-flight requests (uploads, downloads) may take to finish "
             "before their connections are cut. Keep Kubernetes' "
             "`terminationGracePeriodSeconds` above it (the chart does).",
             config::kZeroAllowed);
  s.duration("server.body_idle_timeout", &c.body_idle_timeout, "60s",
             "An upload or a download that moves no byte for this long is cut.",
             std::chrono::milliseconds(100));
  s.integer("server.min_upload_rate", &c.min_upload_rate, 1024, 0, 1LL << 40,
            "An upload slower than this many bytes/s, measured over half of "
            "`body_idle_timeout` of waiting on the client (time the gateway spends storing "
            "does not count), is cut with a 408 (`0` = no floor).");
  s.integer("server.min_download_rate", &c.min_download_rate, 1024, 1, 1LL << 40,
            "A result download may take as long as it needs while it moves at least this many "
            "bytes/s (each 64 KiB chunk gets its share of time, at least `body_idle_timeout`).");
  s.integer("server.max_connections", &c.max_connections, 0, 0, 1 << 24,
            "Open connections beyond this are refused. `0` = the lower of what the open-file "
            "limit allows (raised to its hard limit at start) less a reserve for storage, Redis "
            "and webhooks, and `server.connection_memory` over what one connection may hold. A "
            "value set here stands, unless the open files cannot hold it: then it is lowered, "
            "with a warning.");
  s.integer("server.connection_memory", &c.connection_memory, 0, 0, 1LL << 50,
            "Bytes that open connections may take, for the default `max_connections`: each "
            "counts as `max_header_size` + 16 KiB (a request header held while it arrives). "
            "`0` = half of the memory limit (the cgroup's in a container, else the machine's): "
            "with the chart's 1 GiB, 16,384 connections. Beyond the limit connections are "
            "refused, rather than a flood of slow headers growing the gateway until it is killed.");
  s.integer("server.blocking_threads", &c.blocking_threads, 16, 1, 1024,
            "Threads that answer requests that wait on Redis (status, listings, cancels), at "
            "most: one per core runs quick work, the rest join in while requests wait a "
            "millisecond for those (Redis failing over). Uploads hold none while the client "
            "sends: bodies are read on the I/O thread. Readiness and metrics have two threads "
            "of their own.");
  s.integer("server.upload_threads", &c.upload_threads, 8, 1, 1024,
            "Threads that work on storage: store submissions' inputs as their bytes arrive "
            "(encrypting them on the way) and read results for downloads, apart from "
            "`blocking_threads`, so that status, readiness and metrics never wait behind "
            "uploads, downloads or a slow store.");
  s.integer("server.upload_buffer_memory", &c.upload_buffer_memory, 64LL << 20, 0, 1LL << 40,
            "Bytes of received upload data the gateway holds, over all uploads at once, beyond "
            "16 KiB per upload piece (an upload holds two pieces: one being stored while the "
            "next is read; up to 1 MiB each while this has room). Past it uploads go on in "
            "16 KiB pieces (more hand-offs to the storage pool per byte), so memory does not grow "
            "with the number of fast uploads. Result downloads draw on it too: a chunk of up to "
            "64 KiB each while it has room, 16 KiB past it.");
  config::bind_redis(s, c.redis);
  s.duration("redis.retry_timeout", &c.redis_retry_timeout, "10s",
             "How long a request waits for a Redis that is restarting, loading, busy, failing "
             "over or silent (retried with jittered backoff; each try waits for a reply at most "
             "half of what is left, at least 2 s) before it is answered 503 with `Retry-After`.",
             config::kZeroAllowed);
  config::bind_storage(s, c.storage);
  config::bind_encryption(s, c.encryption);
  s.section(
      "service_types", "",
      "Service types clients submit to: `<name>: {model, operations: [...], max_input_size, "
      "ttl, timeout, retry: {max_attempts, backoff, max_backoff}, input_urls: [...]}` "
      "(input_urls: URL prefixes a submission's `input_url` may start with, `s3://bucket/prefix/` "
      "or `https://host/path/`; none: uploads only; ttl: a job not started "
      "within it fails `expired`; timeout: one running longer fails `timed_out`; retry: failed "
      "jobs retried when the failure is the model's 5xx/429 or unreachable, up to max_attempts "
      "in all, default 1 = none; all of them defaults a submission may override). "
      "Environment form: `name=model,name=model`.",
      [&c] { c.service_types.clear(); },
      [&c](const YAML::Node& n) {
        if (!n.IsMap()) bad("service_types", "expected a mapping of name: {model: ...}");
        c.service_types.clear();
        for (const auto& kv : n) {
          std::string name = kv.first.as<std::string>();
          const YAML::Node& v = kv.second;
          if (!v.IsMap())
            bad("service_types." + name,
                "expected {model: ..., operations: [...], max_input_size: ...}");
          ServiceType st;
          for (const auto& f : v) {
            std::string field = f.first.as<std::string>();
            if (field == "model")
              st.model = f.second.as<std::string>();
            else if (field == "operations") {
              if (!f.second.IsSequence())
                bad("service_types." + name + ".operations", "expected a list");
              for (const auto& op : f.second) st.operations.push_back(op.as<std::string>());
            } else if (field == "input_urls") {
              const std::string key = "service_types." + name + ".input_urls";
              if (!f.second.IsSequence()) bad(key, "expected a list of URL prefixes");
              for (const auto& u : f.second) {
                std::string prefix = u.as<std::string>();
                const bool s3 =
                    prefix.starts_with("s3://") && prefix.size() > 5 && prefix[5] != '/';
                const bool https = prefix.starts_with("https://");
                if (!s3 && !https)
                  bad(key, "'" + prefix + "': expected s3://bucket[/prefix] or https://...");
                st.input_urls.push_back(std::move(prefix));
              }
            } else if (field == "max_input_size") {
              st.max_input_size = parse_size("service_types." + name + ".max_input_size",
                                             f.second.as<std::string>());
            } else if (field == "retry") {
              const std::string key = "service_types." + name + ".retry";
              if (!f.second.IsMap()) bad(key, "expected {max_attempts, backoff, max_backoff}");
              for (const auto& r : f.second) {
                const std::string k = r.first.as<std::string>();
                const std::string v = r.second.as<std::string>();
                if (k == "max_attempts") {
                  std::int64_t n = 0;
                  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
                  if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > 100)
                    bad(key + ".max_attempts", "expected a whole number from 1 to 100");
                  st.max_attempts = n;
                } else if (k == "backoff" || k == "max_backoff") {
                  auto d = parse_duration(v);
                  if (!d || d->count() <= 0) bad(key + "." + k, "expected a positive duration");
                  (k == "backoff" ? st.retry_backoff : st.retry_max_backoff) = *d;
                } else {
                  bad(key + "." + k, "unknown key");
                }
              }
            } else if (field == "ttl" || field == "timeout") {
              auto d = parse_duration(f.second.as<std::string>());
              if (!d || d->count() <= 0)
                bad("service_types." + name + "." + field,
                    "expected a positive duration (\"30s\", \"10m\", \"1h\")");
              (field == "ttl" ? st.ttl : st.timeout) = *d;
            } else
              bad("service_types." + name + "." + field, "unknown key");
          }
          c.service_types[name] = st;  // (a name given twice is refused by the schema's load)
        }
      },
      [&c](const std::string& text) {
        c.service_types.clear();
        size_t start = 0;
        while (start < text.size()) {
          size_t comma = text.find(',', start);
          std::string item =
              text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          auto eq = item.find('=');
          if (eq == std::string::npos)
            bad("service_types", "expected name=model[,name=model...] in RELAY_SERVICE_TYPES");
          ServiceType st;
          st.model = item.substr(eq + 1);
          if (!c.service_types.emplace(item.substr(0, eq), st).second)
            bad("service_types." + item.substr(0, eq), "given twice in RELAY_SERVICE_TYPES");
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      });
  s.boolean(
      "auth.enabled", &c.auth_enabled, true,
      "Require an API key (`Authorization: Bearer <key>` or `X-API-Key`). Off only explicitly.");
  s.string_map("auth.api_keys", &c.api_keys, {},
               "SHA-256 (hex) of each API key → its tenant. Keys are never stored in clear: "
               "`printf %s KEY | sha256sum`.");
  s.string("auth.api_keys_file", &c.api_keys_file, "",
           "A file of more API keys, one `<sha256 hex>=<tenant>` per line or comma-separated as "
           "in `auth.api_keys` (`#` comments), e.g. a mounted Secret: read at start and again when "
           "it changes (checked every 2 s), so keys "
           "are added and revoked without a restart. A version that is not valid is logged and "
           "the keys before it stay in use.");
  s.string_map("admin.api_keys", &c.admin_keys, {},
               "SHA-256 (hex) of each operator key → its role on the dashboard (`/dashboard`, "
               "`/admin/api`): `admin` (may cancel, requeue, pause) or `read`. Separate from "
               "tenants' keys; none (nor `admin.api_keys_file`): no dashboard.");
  s.string("admin.api_keys_file", &c.admin_keys_file, "",
           "A file of more operator keys, `<sha256 hex>=<role>` as in `auth.api_keys_file`: "
           "read at start and again when it changes (checked every 2 s).");
  s.integer("quotas.max_pending", &c.quota.max_pending, 0, 0, 1'000'000'000,
            "Per tenant: jobs submitted and not yet ended, at most (0: no limit). Over it, a "
            "submission gets 429 `quota_exceeded` (`limit`: `max_pending`).");
  s.integer("quotas.submits_per_minute", &c.quota.submits_per_minute, 0, 0, 1'000'000'000,
            "Per tenant: the sustained submission rate (a token bucket; 0: no limit). Over it, "
            "429 `rate_limited` (`limit`: `submit_rate`) with `Retry-After`.");
  s.integer("quotas.submit_burst", &c.quota.submit_burst, 0, 0, 1'000'000'000,
            "Per tenant: submissions allowed at once before the rate applies (0: a minute's "
            "worth).");
  s.string_map("quotas.tenants", &c.tenant_quotas_text, {},
               "Per-tenant overrides: tenant → `max_pending=N,submits_per_minute=N,"
               "submit_burst=N` (any of them; the rest from quotas.*).");
  s.duration("gc.reap_interval", &c.reap_interval, "5s",
             "How often the reaper looks for jobs whose relay died.", config::kPositive);
  s.duration("gc.reap_grace", &c.reap_grace, "5s",
             "A job is reaped only when seen lease-less on two passes at least this far apart "
             "(covers the dequeue-to-lease window).",
             config::kZeroAllowed);
  s.integer("gc.max_reap_attempts", &c.max_reap_attempts, 3, 1, 1000,
            "After this many crashed runs a job is dead-lettered (`failed`, `dead_lettered`).");
  s.duration("gc.expire_interval", &c.expire_interval, "1s",
             "How often the due sweep runs: jobs whose ttl passed in pending fail `expired` and "
             "leave the queue (a relay that takes one first fails it itself, without calling the "
             "model); failed jobs whose retry is due go back to pending.",
             config::kPositive);
  s.duration("idempotency.reservation", &c.idempotency_reservation, "2m",
             "How long an `Idempotency-Key` stays reserved for a submission whose upload has not "
             "finished (a body over 64 KiB, or sent after `100 Continue`; a smaller one claims "
             "its key as its job is made): renewed while the upload progresses, so a gateway that "
             "crashes mid-upload frees the key within this time (a retry meanwhile gets 409).",
             std::chrono::seconds(1));
  s.duration("gc.job_retention", &c.job_retention, "168h",
             "Terminal job records expire this long after they finish.",
             std::chrono::milliseconds(100));
  s.duration("gc.interval", &c.gc_interval, "60s", "How often expired jobs' objects are deleted.",
             std::chrono::milliseconds(10));
  s.boolean("gc.keep_objects", &c.keep_objects, false,
            "Keep inputs and results in storage when records expire.");
  s.duration(
      "events.claim_idle", &c.claim_idle, "30s",
      "Completion events left unacknowledged this long by a dead replica are claimed by another.",
      std::chrono::seconds(1));
  s.string("events.consumer", &c.consumer, "",
           "This replica's consumer name in the events group; default: the host name.");
  s.string("webhooks.secret", &c.webhook_secret, "",
           "Standard Webhooks signing secret, `whsec_<base64>`. Prefer the environment variable.");
  s.boolean("input_urls.allow_private", &c.input_urls_allow_private, false,
            "Accept https:// inputs by reference whose host resolves to a private, loopback or "
            "link-local address (the relay has the same setting, and checks again when it "
            "fetches).");
  s.duration("dns.timeout", &c.dns_timeout, "2s",
             "How long a request waits for the lookup of a callback_url or input_url host it "
             "names (checked at submission, and again at each webhook delivery). Past it the "
             "submission is answered 503 (`callback_url_unresolved`, `input_url_unresolved`) and "
             "a delivery is retried later; the lookup runs on, and the name is not waited on "
             "again while it does. Answers are kept 30 s (5 s when the name does not resolve).",
             config::kPositive);
  s.integer("dns.lookups", &c.dns_lookups, 4, 1, 256,
            "Host name lookups running at once, on threads of their own (more wait their turn, "
            "within `dns.timeout`). A name server that does not answer holds these, never a "
            "request thread or a webhook worker.");
  s.boolean("webhooks.allow_private", &c.webhook_allow_private, false,
            "Allow callback URLs that resolve to private, loopback or link-local addresses.");
  s.duration("webhooks.timeout", &c.webhook_timeout, "10s", "Timeout of one delivery attempt.",
             config::kPositive);
  s.integer("webhooks.concurrency", &c.webhook_concurrency, 16, 1, 1024,
            "Delivery attempts in flight at once, per gateway replica.");
  s.integer("webhooks.per_host_concurrency", &c.webhook_per_host, 2, 1, 1024,
            "Of those, this many to one destination (host and port) to begin with: a slow or "
            "hanging receiver delays only its own webhooks. As many more wait in memory to go "
            "out the moment one ends. A receiver that answers while more of its webhooks wait "
            "gets one more at a time, up to `webhooks.per_host_max_concurrency`; each failed "
            "attempt halves that, never below this.");
  s.integer("webhooks.per_host_max_concurrency", &c.webhook_per_host_max, 8, 1, 1024,
            "The most one destination's share grows to while it keeps up (a value below "
            "`webhooks.per_host_concurrency` means that: no growth). A receiver a round trip of "
            "r away gets at most this many / r webhooks a second (8 at 50 ms: 160/s).");
  s.duration("webhooks.max_age", &c.webhook_max_age, "24h",
             "Retry failed deliveries (exponential backoff, jitter) for this long.",
             config::kZeroAllowed);
  s.duration("webhooks.initial_backoff", &c.webhook_initial_backoff, "5s",
             "Delay before the first retry; doubles each attempt.", std::chrono::milliseconds(10));
  config::bind_log(s, c.log);
  return s;
}

// quotas.tenants' "name=N,..." values, over the defaults.
void parse_tenant_quotas(Config& c) {
  c.tenant_quotas.clear();
  for (const auto& [tenant, text] : c.tenant_quotas_text) {
    redis::Quota q = c.quota;
    size_t start = 0;
    while (start <= text.size()) {
      const size_t comma = std::min(text.find(',', start), text.size());
      const std::string item = text.substr(start, comma - start);
      start = comma + 1;
      if (item.empty()) continue;
      const auto eq = item.find('=');
      std::int64_t v = -1;
      const std::string name = item.substr(0, eq),
                        value = eq == std::string::npos ? "" : item.substr(eq + 1);
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || p != value.data() + value.size() || v < 0)
        bad("quotas.tenants." + tenant,
            "expected name=N with N a whole number, got \"" + item + "\"");
      if (name == "max_pending")
        q.max_pending = v;
      else if (name == "submits_per_minute")
        q.submits_per_minute = v;
      else if (name == "submit_burst")
        q.submit_burst = v;
      else
        bad("quotas.tenants." + tenant, "unknown limit \"" + name + "\"");
    }
    c.tenant_quotas[tenant] = q;
  }
}

void validate(const Config& c) {
  config::listen_address("server.listen", c.listen);
  for (const auto& origin : c.cors_origins)
    if (origin != "*")
      if (auto why = origin_problem(origin))
        bad("server.cors_origins", "'" + origin + "': " + *why + " (or * for any origin)");
  config::validate_redis(c.redis);
  config::validate_storage(c.storage);
  config::validate_log(c.log);
  if (c.service_types.empty()) bad("service_types", "at least one service type is needed");
  for (const auto& [name, st] : c.service_types) {
    if (!config::is_safe_name(name))
      bad("service_types." + name, "names may use letters, digits, '-', '_' and '.'");
    if (!config::is_safe_name(st.model))
      bad("service_types." + name + ".model", "required; letters, digits, '-', '_' and '.'");
  }
  if (c.auth_enabled && c.api_keys.empty() && c.api_keys_file.empty())
    bad("auth.api_keys",
        "auth.enabled is true but no API keys are configured (auth.api_keys or "
        "auth.api_keys_file; or set auth.enabled: false)");
  // Read as the gateway will: each kind's keys and file, checked together.
  auto keys = load_keys(c.tenant_keys(), c.operator_keys());
  if (auto* problem = std::get_if<KeyProblem>(&keys)) bad(problem->config_key, problem->message);
  if (!c.webhook_secret.empty() && !decode_webhook_secret(c.webhook_secret))
    bad("webhooks.secret", "expected whsec_<base64 of the key>");
}

Config load(const std::string& path, const config::EnvLookup& env) {
  Config c;
  schema(c).load_file(path, env);
  parse_tenant_quotas(c);
  if (c.consumer.empty()) c.consumer = config::host_name();
  validate(c);
  return c;
}

}  // namespace relay::gateway
