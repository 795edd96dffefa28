// relay-gateway — the HTTP API, the completion consumer, the reaper. Exit codes: 0 after a
// signal-initiated shutdown; 1 when it cannot listen or serving failed; 2 for a bad config or
// command line.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <set>
#include <thread>

#include "common/exit_watchdog.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"
#include "gateway/api.hpp"
#include "gateway/completion_consumer.hpp"
#include "gateway/config.hpp"
#include "gateway/due_sweep.hpp"
#include "gateway/gc.hpp"
#include "gateway/http_server.hpp"
#include "gateway/metrics.hpp"
#include "gateway/notifier.hpp"
#include "gateway/reaper.hpp"
#include "gateway/redis_settings.hpp"
#include "gateway/webhook_sender.hpp"
#include "gateway/webhook_signature.hpp"
#include "http/resolver.hpp"
#include "redis/job_store.hpp"

using namespace relay;

namespace {
// Signals are taken by one thread with sigwait; every other thread inherits the mask. Blocked
// before main and before every static initializer (see block_shutdown_signals).
sigset_t shutdown_signals;
__attribute__((constructor(101))) void block_at_load() {
  shutdown_signals = relay::block_shutdown_signals();
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"relay-gateway: the HTTP API, completion consumer and reaper of Relay"};
  std::string config_path;
  bool print_config = false;
  app.add_option("-c,--config", config_path,
                 "YAML config file (every key can be set by RELAY_* variables)");
  app.add_flag("--print-config-reference", print_config,
               "print the config keys as a Markdown table and exit");
  CLI11_PARSE(app, argc, argv);
  if (print_config) {
    gateway::Config c;
    std::cout << gateway::schema(c).reference_markdown();
    return 0;
  }

  const sigset_t set = shutdown_signals;  // (blocked at load)

  gateway::Config cfg;
  std::unique_ptr<storage::Storage> storage;
  crypto::Encryption encryption;
  try {
    cfg = gateway::load(config_path, config::process_env());
    encryption = crypto::Encryption::from(
        cfg.encryption,
        crypto::Keyring::load(crypto::Keyring::process_environment(), cfg.encryption.keys_dir));
    log::set_level(cfg.log.level);
    log::set_format(cfg.log.format);
    storage = storage::make_storage(cfg.storage);
  } catch (const storage::StorageError& e) {
    // Not the config's fault: exit 1 so that the orchestrator restarts it until it is there.
    log::error("storage unavailable", {{"error", e.what()}});
    return 1;
  } catch (const std::exception& e) {
    log::error("invalid configuration", {{"error", e.what()}});
    return 2;
  }
  log::set_component("gateway");
  const auto endpoint = cfg.redis.endpoint();
  const std::string webhook_key =
      cfg.webhook_secret.empty() ? std::string()
                                 : gateway::decode_webhook_secret(cfg.webhook_secret).value_or("");
  const auto keys = cfg.redis.keys();
  const auto models_set = cfg.models();
  const std::vector<std::string> models(models_set.begin(), models_set.end());

  gateway::Notifier notifier(endpoint, keys);
  // The tenants whose quota admissions the reaper sweeps (max_pending only).
  std::vector<std::string> tenants;
  if (cfg.quotas_limit_pending()) {
    std::set<std::string> all{"default"};
    for (const auto& [hash, tenant] : cfg.api_keys) all.insert(tenant);
    for (const auto& [tenant, q] : cfg.tenant_quotas) all.insert(tenant);
    tenants.assign(all.begin(), all.end());
  }
  // The background loops' connections leave a master gone silent within seconds (kReplyWait).
  const redis::Endpoint loops = endpoint.with_read_timeout(gateway::kReplyWait);
  gateway::Reaper reaper(
      {loops, keys, models, cfg.reap_interval, cfg.reap_grace, cfg.max_reap_attempts, tenants,
       std::max(2 * cfg.idempotency_reservation, std::chrono::milliseconds(60'000))});
  gateway::DueSweep due_sweep({loops, keys, models, cfg.expire_interval});
  auto on_completion = [&](redis::Connection&, const gateway::CompletionEvent& ev) {
    gateway::metrics().jobs_finished.add({ev.model, ev.status});
    gateway::observe_timings(ev.model, ev.status, ev.timings);
    boost::json::object line{{"job_id", ev.job_id}, {"model", ev.model}, {"status", ev.status}};
    if (auto trace = parse_traceparent(ev.traceparent)) line["trace_id"] = trace->trace_id;
    log::info("job finished", line);
  };
  // One XREADGROUP reads every model's stream; in cluster mode they live on different nodes,
  // so each model gets its own consumer (and thread).
  std::vector<std::vector<std::string>> consumer_models;
  if (endpoint.cluster_seeds.empty())
    consumer_models.push_back(models);
  else
    for (const auto& m : models) consumer_models.push_back({m});
  std::vector<std::unique_ptr<gateway::CompletionConsumer>> consumers;
  for (auto& ms : consumer_models)
    consumers.push_back(
        std::make_unique<gateway::CompletionConsumer>(gateway::CompletionConsumerParams{
            endpoint, keys, ms, cfg.consumer, cfg.claim_idle, cfg.job_retention, on_completion,
            /*release_admissions=*/cfg.quotas_limit_pending()}));
  // Host name lookups of callback and input URLs: one resolver for submissions, whose waits are
  // bounded to half the request threads (a flood of submissions naming slow hosts leaves the
  // other half to everyone else), one for webhook deliveries (bounded by their workers).
  http::Resolver::Options dns{.timeout = cfg.dns_timeout,
                              .lookups = static_cast<std::size_t>(cfg.dns_lookups)};
  dns.max_waiting = static_cast<std::size_t>(std::max<std::int64_t>(1, cfg.blocking_threads / 2));
  http::Resolver submissions_dns(dns);
  dns.max_waiting = static_cast<std::size_t>(cfg.webhook_concurrency);
  http::Resolver webhooks_dns(dns);
  gateway::WebhookSender webhooks({.endpoint = loops,
                                   .keys = keys,
                                   .models = models,
                                   .key = webhook_key,
                                   .allow_private = cfg.webhook_allow_private,
                                   .timeout = cfg.webhook_timeout,
                                   .max_age = cfg.webhook_max_age,
                                   .initial_backoff = cfg.webhook_initial_backoff,
                                   .concurrency = cfg.webhook_concurrency,
                                   .per_host = cfg.webhook_per_host,
                                   .per_host_max = cfg.webhook_per_host_max,
                                   .resolver = &webhooks_dns});
  // Inputs of submissions refused whose job may exist: the API lists them, the GC settles them.
  gateway::Unsettled unsettled;
  // Leftovers of crashed uploads: untouched for twice the longest an upload may stall.
  gateway::Gc gc({loops, keys, models, storage.get(), cfg.keep_objects, cfg.gc_interval,
                  std::chrono::duration_cast<std::chrono::seconds>(2 * cfg.body_idle_timeout),
                  &unsettled, cfg.idempotency_reservation});
  // Outlives what it bounds (declared before): the server's pools, the loops below.
  ExitWatchdog watchdog;
  gateway::Api api(cfg, *storage, encryption, submissions_dns, unsettled);
  gateway::HttpServer server(cfg, api, notifier);
  try {
    server.listen();
  } catch (const std::exception& e) {
    log::error("cannot start", {{"error", e.what()}});
    return 1;
  }

  // Start order: the notifier before the server (long-polls need it), the background loops
  // beside it. Stop order is the reverse, and matters: the server stops taking requests and
  // drains first; then the loops, the notifier last because draining long-polls rely on it.
  // Each loop on a thread of its own, named as `top -H` and perf show it.
  auto loop = [](const char* name, auto& runs) {
    return std::jthread([name, &runs](std::stop_token st) {
      name_this_thread(name);
      runs.run(st);
    });
  };
  std::jthread notifier_thread = loop("notifier", notifier);
  std::vector<std::jthread> consumer_threads;
  for (auto& c : consumers) consumer_threads.push_back(loop("completions", *c));
  std::jthread reaper_thread = loop("reaper", reaper);
  std::jthread due_sweep_thread = loop("due-sweep", due_sweep);
  std::jthread webhook_thread = loop("webhook-claims", webhooks);
  std::jthread gc_thread = loop("gc", gc);
  std::jthread settings_thread([&endpoint](std::stop_token st) {
    name_this_thread("redis-settings");
    gateway::check_redis_settings(endpoint, st);
  });
  std::thread signals([&server, set] {
    name_this_thread("signals");
    int sig = 0;
    if (sigwait(&set, &sig) == 0 && sig != SIGUSR1) {
      log::info("shutdown requested", {{"signal", sig}});
      server.stop();
    }
  });
  log::info("gateway listening", {{"listen", cfg.listen},
                                  {"max_connections", server.connection_budget().max_connections},
                                  {"max_connections_bound", server.connection_budget().bound},
                                  {"models", boost::json::array(models.begin(), models.end())},
                                  {"auth", cfg.auth_enabled}});
  const bool served = server.run();
  // Nothing serves now (the drain finished, or its deadline cut what was left): the rest of the
  // shutdown gets a second, then the process leaves regardless — SIGTERM ends it within
  // server.shutdown_timeout and a second (a pod is not left for Kubernetes to SIGKILL).
  watchdog.arm(std::chrono::seconds(1), served ? 0 : 1);

  settings_thread.request_stop();
  settings_thread.join();
  gc_thread.request_stop();
  gc_thread.join();
  webhook_thread.request_stop();
  webhook_thread.join();
  reaper_thread.request_stop();
  reaper_thread.join();
  due_sweep_thread.request_stop();
  due_sweep_thread.join();
  for (auto& t : consumer_threads) t.request_stop();
  consumer_threads.clear();  // joins
  notifier_thread.request_stop();
  notifier_thread.join();
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  if (!served) {
    log::error("gateway stopped after a failure");
    return 1;
  }
  log::info("gateway stopped");
  return 0;
}
