#include "sidecar/config.hpp"

#include <unistd.h>

#include <boost/url/parse.hpp>

#include "common/port.hpp"
#include "sidecar/spool.hpp"

namespace relay::sidecar {

config::Schema schema(Config& c) {
  config::Schema s;
  s.string("model", &c.model, "",
           "Model this relay serves: it takes jobs from `relay:<model>:pending`. Required.");
  config::bind_redis(s, c.redis);
  config::bind_storage(s, c.storage);
  config::bind_encryption(s, c.encryption);
  s.string("inference.url", &c.inference.url, "http://127.0.0.1:9000",
           "The local inference server, `http://host:port` (no path: its routes are "
           "`inference.routes`).");
  s.string("inference.health_path", &c.inference.health_path, "/health",
           "Health endpoint; the relay dequeues nothing before it answers 200.");
  s.string_map("inference.routes", &c.inference.routes, {{"default", "/predict"}},
               "Operation → path on the inference server. A job without an operation uses "
               "`default`; an unknown operation fails the job.");
  s.duration("inference.timeout", &c.inference.timeout, "0s",
             "Limit on one inference request; `0s` = none (long jobs are normal).",
             config::kZeroAllowed);
  s.duration("lease_ttl", &c.lease_ttl, "60s",
             "Processing lease TTL; refreshed every lease_ttl/3, so it bounds how fast a dead pod "
             "is noticed, not the job length.",
             std::chrono::milliseconds(300));
  s.duration("queue_pop_timeout", &c.queue_pop_timeout, "5m",
             "How long the relay waits for a job (BLMOVEs of at most 5 s in turn); with none by "
             "then it exits 0.",
             config::kPositive);
  s.integer("max_jobs", &c.max_jobs, 1, 0, 1LL << 40,
            "Jobs to process before exiting; `0` = no limit.");
  s.integer("relay.concurrency", &c.concurrency, 1, 1, 256,
            "Jobs in hand at once, each its own request to the model (for a model server that "
            "batches or serves requests in parallel); `max_jobs` counts them all.");
  s.duration("relay.take_ahead", &c.take_ahead, "100ms",
             "For short jobs: while the model runs a job, each slot takes its next one when "
             "its last job ran shorter than this and jobs wait in the queue, and reads that "
             "job's input (up to 1 MiB) — the model gets it the moment it answers, and the "
             "finished job's result is stored and its outcome written while the model works on "
             "the next, instead of storage and Redis round trips later. A job taken ahead is "
             "marked `processing` (its `started_at`) while it waits; if the job before it runs "
             "longer than this, it goes back to the front of pending, for a free relay. `0s` = "
             "off; a one-shot relay never takes ahead.",
             config::kZeroAllowed);
  s.duration("relay.health_timeout", &c.health_timeout, "5m",
             "How long to wait at start for the inference server (and Redis); then exit 1.",
             config::kZeroAllowed);
  s.duration("relay.health_interval", &c.health_interval, "500ms", "Pause between health checks.",
             std::chrono::milliseconds(10));
  s.duration("relay.storage_retry_timeout", &c.storage_retry_timeout, "5m",
             "How long a job's storage steps — reading its input, storing its result — keep "
             "trying while storage is unavailable (unreachable, answering 5xx, throttling) before "
             "the job fails `download_failed` or `upload_failed`. Meanwhile the job keeps its "
             "lease and the model's answer is kept; a cancel, the job's timeout or SIGTERM still "
             "end the wait. A storage outage (a store restarting) is waited out instead of "
             "failing each job the relay takes in a few seconds.",
             std::chrono::milliseconds(1));
  s.string("relay.pod_name", &c.pod_name, "",
           "Name in lease tokens and logs; default: the host name (the pod name in Kubernetes).");
  s.string("relay.spool_dir", &c.spool_dir, "",
           "Directory for model answers over 1 MiB while they are uploaded (unnamed files, gone "
           "when the relay exits); empty = `$TMPDIR`, else `/tmp`. With a read-only root "
           "filesystem point it at a writable volume (the chart mounts an `emptyDir`).");
  s.integer("relay.max_result_size", &c.max_result_size, 1LL << 30, 0, 1LL << 50,
            "Largest model answer (bytes) a job may have; a larger one fails the job "
            "`result_too_large` as soon as it is seen (its Content-Length, or when the bytes "
            "pass it), instead of filling `relay.spool_dir` (in the chart an `emptyDir` whose "
            "size limit evicts the pod). `0` = no limit.");
  s.string("relay.progress_listen", &c.progress_listen, "127.0.0.1:0",
           "Where the relay takes the model's progress reports (an IP and port; port 0: any free "
           "one); the model gets the URL in each request's `Relay-Progress-URL` header. Empty: "
           "no progress reporting (the header is not sent).");
  s.duration("relay.progress_interval", &c.progress_interval, "1s",
             "At most one progress write to Redis per job per interval; the latest report wins "
             "and one held back is written when its turn comes.",
             std::chrono::milliseconds(10));
  s.duration("relay.progress_webhook_interval", &c.progress_webhook_interval, "10s",
             "For jobs whose `webhook_events` include `progress`: at most one progress webhook "
             "per interval.",
             std::chrono::seconds(1));
  s.boolean("input_urls.allow_private", &c.input_urls_allow_private, false,
            "Let https:// inputs by reference reach private, loopback and link-local addresses "
            "(off: such a host is refused, at every redirect too, as for webhooks).");
  s.string("input_urls.ca_file", &c.input_urls_ca_file, "",
           "PEM file of CAs trusted for https:// inputs besides the system's (an internal CA).");
  config::bind_log(s, c.log);
  return s;
}

void validate(const Config& c) {
  auto bad = [](const std::string& key, const std::string& why) {
    throw config::ConfigError("config key '" + key + "': " + why);
  };
  if (c.model.empty()) bad("model", "required (the model whose queue this relay serves)");
  if (!config::is_safe_name(c.model))
    bad("model", "only letters, digits, '-', '_' and '.' are allowed");
  config::validate_redis(c.redis);
  config::validate_storage(c.storage);
  // The model server on the pod's loopback: plain HTTP, a host and a port in range, nothing
  // more — a path here would be dropped without a word (routes are inference.routes), and https
  // was accepted here and then aborted the relay at start.
  {
    const auto url = boost::urls::parse_uri(c.inference.url);
    if (!url || url->scheme() != "http" || url->host().empty() || url->has_userinfo() ||
        (url->has_port() && !parse_port(url->port())) ||
        !(url->path().empty() || url->path() == "/") || url->has_query() || url->has_fragment())
      bad("inference.url",
          "expected http://host:port (the model server itself; routes are "
          "inference.routes), got '" +
              c.inference.url + "'");
  }
  if (c.inference.health_path.empty() || c.inference.health_path.front() != '/')
    bad("inference.health_path", "must start with '/'");
  for (const auto& [op, path] : c.inference.routes)
    if (path.empty() || path.front() != '/') bad("inference.routes." + op, "must start with '/'");
  config::validate_log(c.log);
  if (!c.progress_listen.empty())
    config::listen_address("relay.progress_listen", c.progress_listen);
  try {
    Spool::check_dir(c.spool_dir);
  } catch (const std::exception& e) {
    bad("relay.spool_dir", e.what());
  }
}

Config load(const std::string& path, const config::EnvLookup& env) {
  Config c;
  schema(c).load_file(path, env);
  if (c.pod_name.empty()) c.pod_name = config::host_name();
  validate(c);
  return c;
}

}  // namespace relay::sidecar
