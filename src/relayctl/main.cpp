// relayctl — Relay's command-line tool, for users (through the gateway's HTTP API) and for
// operators (Redis directly). A job is named SERVICE_TYPE/ID, as `submit` prints it.
//
// clang-format off
//   relayctl up [--demo] [--port 8080] [--max-relays 4] [--data-dir DIR]   the stack on one machine
//   relayctl submit SERVICE_TYPE FILE [--operation OP] [--param k=v]... [--callback URL]
//            [--priority] [--ttl D] [--job-timeout D] [--wait]            jobs.cpp
//   relayctl status REF | wait REF [--timeout 60] | result REF [-o FILE] | cancel REF
//   relayctl queues | deadletter list MODEL | deadletter requeue MODEL (ID | --all)
//   relayctl enqueue --model M FILE | job --model M ID     operator.cpp (Redis directly)
//   relayctl encrypt|decrypt --key ID --aad AAD IN OUT                    crypt.cpp
// clang-format on
//
// --json prints what the API returned; otherwise a readable table. Exit codes: 0 success (a job
// that completed), 1 error, 3 the job failed, 4 it was cancelled, 5 still running when --wait or
// wait gave up. Gateway: --gateway or RELAY_GATEWAY_URL (default http://127.0.0.1:8080), key:
// RELAY_API_KEY. Redis and storage: --redis-url / --storage-url or RELAY_REDIS_URL /
// RELAY_STORAGE_URL.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "relayctl/commands.hpp"
#include "relayctl/up.hpp"

using namespace relay::ctl;

int main(int argc, char** argv) {
  CLI::App app{"relayctl: Relay's command-line tool"};
  app.require_subcommand(1);
  Options o;
  o.gateway = env_or("RELAY_GATEWAY_URL", "http://127.0.0.1:8080");
  o.api_key = env_or("RELAY_API_KEY", "");
  o.redis_url = env_or("RELAY_REDIS_URL", "redis://127.0.0.1:6379");
  o.key_prefix = env_or("RELAY_REDIS_KEY_PREFIX", "");
  o.hash_tag = env_or("RELAY_REDIS_HASH_TAG", "false") == "true";
  auto& sc = o.storage;
  sc.url = env_or("RELAY_STORAGE_URL", sc.url);
  sc.s3_endpoint = env_or("RELAY_STORAGE_S3_ENDPOINT", "");
  sc.s3_region = env_or("RELAY_STORAGE_S3_REGION", sc.s3_region);
  sc.s3_path_style = env_or("RELAY_STORAGE_S3_PATH_STYLE", "false") == "true";
  app.add_option("--gateway", o.gateway, "gateway URL");
  app.add_option("--redis-url", o.redis_url,
                 "redis[s]://[user:password@]host:port[/db] (operator commands); TLS files and "
                 "the password from RELAY_REDIS_* as for the relay");
  app.add_option("--storage-url", sc.url, "file:///path or s3://bucket/prefix (enqueue)");
  app.add_flag("--json", o.as_json, "print JSON instead of a table");

  relay::ctl::UpOptions up_opts;
  auto* up = app.add_subcommand("up", "run the whole stack on this machine (Ctrl-C stops it)");
  up->add_flag("--demo", up_opts.demo, "submit the samples, check the results, stop");
  up->add_option("--port", up_opts.port, "gateway port (0: any free port)")
      ->check(CLI::Range(0, 65535));
  up->add_option("--max-relays", up_opts.max_relays, "relays per model at most");
  up->add_option("--data-dir", up_opts.data_dir,
                 "where storage and Redis keep data (default: a temporary folder)");
  up->add_option("--samples", up_opts.samples_dir,
                 "folder of the demo's samples (default: examples/samples)");
  up->add_option("--echo-delay-ms", up_opts.echo_delay_ms,
                 "the echo model holds each answer this long")
      ->group("");

  auto* submit =
      app.add_subcommand("submit", "submit FILE as a job of SERVICE_TYPE (prints SERVICE_TYPE/ID)");
  submit->add_option("service_type", o.service_type)->required();
  submit->add_option("file", o.file, "the input (or --input-url)")->check(CLI::ExistingFile);
  submit->add_option("--input-url", o.input_url,
                     "the input by reference instead of FILE: s3://bucket/key or https://...");
  submit->add_option("--operation", o.operation);
  submit->add_option("--param", o.params, "k=v, sent in the job's params");
  submit->add_option("--callback", o.callback, "webhook URL");
  submit->add_flag("--priority", o.priority, "ahead of the queue (the gateway's priority header)");
  submit->add_option("--ttl", o.ttl, "not started within this duration (90s, 15m, 2h), it fails");
  submit->add_option("--job-timeout", o.job_timeout,
                     "running longer than this duration, the job fails");
  submit->add_option("--webhook-events", o.webhook_events,
                     "with --callback: terminal (default), started, progress, comma-separated");
  submit->add_flag("--wait", o.wait, "wait for the job to end (exit code: its status)");
  submit->add_option("--timeout", o.timeout, "with --wait: give up after this long");
  auto* status = app.add_subcommand("status", "show a job");
  status->add_option("ref", o.ref, "SERVICE_TYPE/ID")->required();
  auto* wait = app.add_subcommand("wait", "wait until a job ends (long-poll)");
  wait->add_option("ref", o.ref, "SERVICE_TYPE/ID")->required();
  wait->add_option("--timeout", o.timeout);
  auto* result = app.add_subcommand("result", "print (or save) a completed job's result");
  result->add_option("ref", o.ref, "SERVICE_TYPE/ID")->required();
  result->add_option("-o,--output", o.out_file, "save to this file");
  auto* list = app.add_subcommand("jobs", "list your jobs, newest first");
  list->add_option("service_type", o.service_type, "only this service type (default: all)");
  list->add_option("--status", o.status_filter, "only these statuses (comma-separated)");
  list->add_option("--since", o.since, "created since (RFC 3339, or a duration back: 90m, 48h)");
  list->add_option("--limit", o.limit, "how many jobs at most (default 20)");
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("ref", o.ref, "SERVICE_TYPE/ID")->required();
  auto* queues = app.add_subcommand(
      "queues", "pending, processing and dead-letter counts per model, oldest wait");
  auto* deadletter = app.add_subcommand("deadletter", "inspect or requeue dead-lettered jobs");
  deadletter->require_subcommand(1);
  auto* dl_list = deadletter->add_subcommand("list", "list a model's dead-lettered jobs");
  dl_list->add_option("model", o.model)->required();
  auto* dl_requeue =
      deadletter->add_subcommand("requeue", "put dead-lettered jobs back in the queue");
  dl_requeue->add_option("model", o.model)->required();
  dl_requeue->add_option("id", o.id);
  dl_requeue->add_flag("--all", o.all);

  auto* enqueue =
      app.add_subcommand("enqueue", "store FILE and queue a job for MODEL (bypasses the gateway)");
  enqueue->add_option("--model", o.model)->required();
  enqueue->add_option("--service-type", o.service_type);
  enqueue->add_option("--operation", o.operation);
  enqueue->add_option("--param", o.params, "k=v, passed to inference as a form field");
  enqueue->add_flag("--priority", o.priority, "LPUSH: ahead of the queue");
  enqueue->add_option("file", o.file)->required()->check(CLI::ExistingFile);
  auto* job_cmd = app.add_subcommand("job", "print a job record from Redis as JSON");
  job_cmd->add_option("--model", o.model)->required();
  job_cmd->add_option("id", o.id)->required();

  auto* encrypt =
      app.add_subcommand("encrypt", "encrypt IN to OUT in the format of stored objects");
  auto* decrypt = app.add_subcommand("decrypt", "decrypt IN to OUT (a stored input or result)");
  for (auto* sub : {encrypt, decrypt}) {
    sub->add_option("--key", o.key_id, "key id (RELAY_ENCRYPTION_KEY_<ID> or a file in --keys-dir)")
        ->required();
    sub->add_option("--aad", o.aad, "associated data: <job id>/input or <job id>/result.json")
        ->required();
    sub->add_option("--keys-dir", o.keys_dir, "folder of key files");
    sub->add_option("--segment-size", o.segment_size,
                    "ciphertext segment size (encryption.segment_size)");
    sub->add_option("in", o.file, "input file")->required()->check(CLI::ExistingFile);
    sub->add_option("out", o.out_path, "output file")->required();
  }
  CLI11_PARSE(app, argc, argv);

  if (*up) {
    if (up_opts.samples_dir.empty()) {
      auto exe = std::filesystem::read_symlink("/proc/self/exe").parent_path();
      for (auto p : {exe / "../../examples/samples", exe / "../share/relay/samples",
                     std::filesystem::path("examples/samples")})
        if (std::filesystem::exists(p / "fox.txt")) {
          up_opts.samples_dir = std::filesystem::canonical(p).string();
          break;
        }
    }
    return relay::ctl::run_up(up_opts);
  }

  try {
    if (*encrypt) return relay::ctl::crypt(o, true);
    if (*decrypt) return relay::ctl::crypt(o, false);
    if (*submit) return relay::ctl::submit(o);
    if (*status) return job(o, JobVerb::status);
    if (*wait) return job(o, JobVerb::wait);
    if (*result) return job(o, JobVerb::result);
    if (*cancel) return job(o, JobVerb::cancel);
    if (*list) {
      if (list->count("service_type") == 0) o.service_type.clear();
      return relay::ctl::jobs(o);
    }
    if (*queues) return relay::ctl::queues(o);
    if (*dl_list) return deadletter_list(o);
    if (*dl_requeue) return deadletter_requeue(o);
    if (*enqueue) return relay::ctl::enqueue(o);
    if (*job_cmd) return record(o);
  } catch (const std::exception& e) {
    std::cerr << "relayctl: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
