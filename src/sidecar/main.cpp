// relay — the sidecar. Exit codes: 0 after its jobs, on queue timeout and on SIGTERM;
// 1 when a dependency never came up; 2 for a bad config or command line.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <iostream>
#include <optional>
#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "common/thread_name.hpp"
#include "sidecar/config.hpp"
#include "sidecar/relay.hpp"
#include "storage/storage.hpp"

#ifdef RELAY_JEMALLOC
// jemalloc's options (CMakeLists.txt says why it is the relay's allocator), read at the first
// allocation; MALLOC_CONF adds to them. Blocks of 1 MiB and more (a large answer or result in
// hand) come from an arena of their own that gives freed pages back at once, as glibc does with
// its mmapped blocks. With jemalloc's default (8 MiB), eight jobs in hand with 8 MB results peaked
// at 152 MiB resident (S3 storage), against 134 on glibc's malloc and 90 with this; 20 MB results
// (streamed) 35, 31 and 26 MiB.
extern "C" {
const char* malloc_conf = "oversize_threshold:1048576";
}
#endif

namespace {
// Under the sanitizers the relay ends orderly: their leak and race checks look at the end.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr auto kEnding = relay::sidecar::Relay::Ending::orderly;
#else
constexpr auto kEnding = relay::sidecar::Relay::Ending::at_once;
#endif

// Signals are taken by one thread with sigwait; every other thread inherits the mask. Blocked
// before main and before every static initializer (see block_shutdown_signals).
sigset_t shutdown_signals;
__attribute__((constructor(101))) void block_at_load() {
  shutdown_signals = relay::block_shutdown_signals();
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"relay: takes inference jobs from Redis, runs them on the local model server"};
  std::string config_path;
  std::optional<std::int64_t> max_jobs, concurrency;
  std::optional<std::string> model;
  bool print_config = false;
  app.add_option("-c,--config", config_path,
                 "YAML config file (every key can be set by RELAY_* variables)");
  app.add_option("--max-jobs", max_jobs,
                 "jobs to process before exiting; 0 = no limit (overrides max_jobs)");
  app.add_option("--concurrency", concurrency,
                 "jobs in hand at once (overrides relay.concurrency)");
  app.add_option("--model", model, "model to serve (overrides model)");
  app.add_flag("--print-config-reference", print_config,
               "print the config keys as a Markdown table and exit");
  CLI11_PARSE(app, argc, argv);

  if (print_config) {
    relay::sidecar::Config c;
    std::cout << relay::sidecar::schema(c).reference_markdown();
    return 0;
  }

  const sigset_t set = shutdown_signals;  // (blocked at load)

  relay::sidecar::Config cfg;
  try {
    auto env = relay::config::process_env();
    auto with_flags = [&](const std::string& name) -> std::optional<std::string> {
      if (name == "RELAY_MAX_JOBS" && max_jobs) return std::to_string(*max_jobs);
      if (name == "RELAY_RELAY_CONCURRENCY" && concurrency) return std::to_string(*concurrency);
      if (name == "RELAY_MODEL" && model) return *model;
      return env(name);
    };
    cfg = relay::sidecar::load(config_path, with_flags);
    relay::log::set_level(cfg.log.level);
    relay::log::set_format(cfg.log.format);
  } catch (const std::exception& e) {
    relay::log::error("invalid configuration", {{"error", e.what()}});
    return 2;
  }
  relay::log::set_component("relay");

  std::unique_ptr<relay::storage::Storage> storage;
  relay::crypto::Encryption encryption;
  try {
    // Storage that is not there yet (a volume still mounting, a folder not yet created) is
    // waited for like Redis, up to relay.health_timeout; SIGTERM meanwhile exits 0.
    const auto deadline = std::chrono::steady_clock::now() + cfg.health_timeout;
    relay::Backoff backoff;
    while (!storage) {
      try {
        storage = relay::storage::make_storage(cfg.storage);
      } catch (const relay::storage::StorageError& e) {
        if (std::chrono::steady_clock::now() >= deadline) {
          relay::log::error("storage never became available; exiting", {{"error", e.what()}});
          return 1;
        }
        auto delay = backoff.next();
        relay::log::warn("storage not available yet; retrying",
                         {{"error", e.what()}, {"retry_in_ms", delay.count()}});
        timespec ts{static_cast<time_t>(delay.count() / 1000),
                    static_cast<long>(delay.count() % 1000) * 1'000'000};
        if (sigtimedwait(&set, nullptr, &ts) > 0) return 0;
      }
    }
    // Keys are loaded whenever there are any, not only with encryption.enabled: a relay decrypts
    // encrypted jobs whatever its own setting (the record names the key).
    encryption = relay::crypto::Encryption::from(
        cfg.encryption, relay::crypto::Keyring::load(relay::crypto::Keyring::process_environment(),
                                                     cfg.encryption.keys_dir));
  } catch (const std::invalid_argument& e) {
    relay::log::error("invalid configuration", {{"error", e.what()}});
    return 2;
  }

  // Its parts open here (the model's client, the progress endpoint's port): what fails is said,
  // not left to terminate().
  std::optional<relay::sidecar::Relay> relay;
  try {
    relay.emplace(cfg, std::move(storage), std::move(encryption));
  } catch (const std::invalid_argument& e) {
    relay::log::error("invalid configuration", {{"error", e.what()}});
    return 2;
  } catch (const std::exception& e) {
    relay::log::error("cannot start", {{"error", e.what()}});
    return 1;
  }
  std::thread signals([&relay, set] {
    relay::name_this_thread("signals");
    int sig = 0;
    if (sigwait(&set, &sig) == 0 && sig != SIGUSR1) relay->shutdown();
  });
  int code = 1;
  try {
    code = relay->run(kEnding);
  } catch (const std::exception& e) {
    relay::log::error("relay failed", {{"error", e.what()}});
  }
  // Wake the signal thread so that it can be joined.
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  return code;
}
