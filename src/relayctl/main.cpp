// relayctl — Relay's command-line tool, for users (through the gateway's HTTP API) and for
// operators (Redis directly). A job is named SERVICE_TYPE/ID, as `submit` prints it.
//
//   relayctl up [--demo] [--port 8080] [--max-relays 4] [--data-dir DIR]   the stack on one machine
//   relayctl submit SERVICE_TYPE FILE [--operation OP] [--param k=v]... [--callback URL]
//   [--priority] [--wait] relayctl status REF | wait REF [--timeout 60] | result REF [-o FILE] |
//   cancel REF relayctl queues | deadletter list MODEL | deadletter requeue MODEL (ID | --all)
//   relayctl enqueue --model M FILE | job --model M ID            (Redis directly, no gateway)
//   relayctl encrypt|decrypt --key ID --aad AAD IN OUT
//
// --json prints what the API returned; otherwise a readable table. Exit codes: 0 success (a job
// that completed), 1 error, 3 the job failed, 4 it was cancelled, 5 still running when --wait or
// wait gave up. Gateway: --gateway or RELAY_GATEWAY_URL (default http://127.0.0.1:8080), key:
// RELAY_API_KEY. Redis and storage: --redis-url / --storage-url or RELAY_REDIS_URL /
// RELAY_STORAGE_URL.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "common/time.hpp"
#include "config/shared.hpp"
#include "crypto/keyring.hpp"
#include "redis/job_store.hpp"
#include "relayctl/http.hpp"
#include "relayctl/up.hpp"
#include "storage/storage.hpp"

namespace {

std::string env_or(const char* name, std::string def) {
  const char* v = std::getenv(name);
  return v ? v : def;
}

class FileSource final : public relay::ByteSource {
 public:
  explicit FileSource(const std::string& path)
      : in_(path, std::ios::binary), size_(std::filesystem::file_size(path)) {}
  size_t read(std::span<char> buf) override {
    in_.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    return static_cast<size_t>(in_.gcount());
  }
  std::optional<std::uint64_t> size() const override { return size_; }

 private:
  std::ifstream in_;
  std::uint64_t size_;
};

std::string guess_content_type(const std::string& path) {
  auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".txt") return "text/plain";
  if (ext == ".json") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".wav") return "audio/wav";
  if (ext == ".pdf") return "application/pdf";
  return "application/octet-stream";
}

// --param k=v ... as a JSON object.
boost::json::object parse_params(const std::vector<std::string>& params) {
  boost::json::object p;
  for (const auto& kv : params) {
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--param expects k=v, got '" + kv + "'");
    p[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return p;
}

boost::json::object to_json(const relay::JobRecord& r) {
  boost::json::object o;
  for (auto& [k, v] : r.to_fields()) o[k] = v;
  return o;
}

}  // namespace

namespace {

std::string field(const boost::json::object& o, const char* k) {
  auto it = o.find(k);
  if (it == o.end() || it->value().is_null()) return "";
  if (it->value().is_string()) return std::string(it->value().as_string());
  return boost::json::serialize(it->value());
}

int exit_for(const std::string& status) {
  if (status == "completed") return 0;
  if (status == "failed") return 3;
  if (status == "cancelled") return 4;
  return 5;  // still pending or processing
}

void print_job(const boost::json::object& j) {
  std::printf("%-44s %-10s %-24s %-24s %s\n", "JOB", "STATUS", "CREATED", "FINISHED", "ERROR");
  std::string err;
  if (auto it = j.find("error"); it != j.end() && it->value().is_object())
    err = field(it->value().as_object(), "code") + ": " + field(it->value().as_object(), "message");
  std::printf("%-44s %-10s %-24s %-24s %s\n",
              (field(j, "service_type") + "/" + field(j, "id")).c_str(), field(j, "status").c_str(),
              field(j, "created_at").c_str(), field(j, "finished_at").c_str(), err.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"relayctl: Relay's command-line tool"};
  app.require_subcommand(1);
  std::string gateway = env_or("RELAY_GATEWAY_URL", "http://127.0.0.1:8080");
  std::string api_key = env_or("RELAY_API_KEY", "");
  std::string redis_url = env_or("RELAY_REDIS_URL", "redis://127.0.0.1:6379");
  std::string key_prefix = env_or("RELAY_REDIS_KEY_PREFIX", "");
  bool hash_tag = env_or("RELAY_REDIS_HASH_TAG", "false") == "true";
  bool as_json = false;
  relay::storage::Config sc;
  sc.url = env_or("RELAY_STORAGE_URL", sc.url);
  sc.s3_endpoint = env_or("RELAY_STORAGE_S3_ENDPOINT", "");
  sc.s3_region = env_or("RELAY_STORAGE_S3_REGION", sc.s3_region);
  sc.s3_path_style = env_or("RELAY_STORAGE_S3_PATH_STYLE", "false") == "true";
  app.add_option("--gateway", gateway, "gateway URL");
  app.add_option("--redis-url", redis_url,
                 "redis[s]://[user:password@]host:port[/db] (operator commands); TLS files and "
                 "the password from RELAY_REDIS_* as for the relay");
  app.add_option("--storage-url", sc.url, "file:///path or s3://bucket/prefix (enqueue)");
  app.add_flag("--json", as_json, "print JSON instead of a table");
  std::string model, service_type = "default", file, operation, id, ref, out_file, callback,
                     timeout = "60s";
  std::vector<std::string> params;
  bool priority = false, wait_flag = false, all = false;

  relay::ctl::UpOptions up_opts;
  auto* up = app.add_subcommand("up", "run the whole stack on this machine (Ctrl-C stops it)");
  up->add_flag("--demo", up_opts.demo, "submit the samples, check the results, stop");
  up->add_option("--port", up_opts.port, "gateway port (0: any free port)");
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
  submit->add_option("service_type", service_type)->required();
  submit->add_option("file", file)->required()->check(CLI::ExistingFile);
  submit->add_option("--operation", operation);
  submit->add_option("--param", params, "k=v, sent in the job's params");
  submit->add_option("--callback", callback, "webhook URL");
  submit->add_flag("--priority", priority, "ahead of the queue (the gateway's priority header)");
  submit->add_flag("--wait", wait_flag, "wait for the job to end (exit code: its status)");
  submit->add_option("--timeout", timeout, "with --wait: give up after this long");
  auto* status = app.add_subcommand("status", "show a job");
  status->add_option("ref", ref, "SERVICE_TYPE/ID")->required();
  auto* wait = app.add_subcommand("wait", "wait until a job ends (long-poll)");
  wait->add_option("ref", ref, "SERVICE_TYPE/ID")->required();
  wait->add_option("--timeout", timeout);
  auto* result = app.add_subcommand("result", "print (or save) a completed job's result");
  result->add_option("ref", ref, "SERVICE_TYPE/ID")->required();
  result->add_option("-o,--output", out_file, "save to this file");
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("ref", ref, "SERVICE_TYPE/ID")->required();
  auto* queues = app.add_subcommand(
      "queues", "pending, processing and dead-letter counts per model, oldest wait");
  auto* deadletter = app.add_subcommand("deadletter", "inspect or requeue dead-lettered jobs");
  deadletter->require_subcommand(1);
  auto* dl_list = deadletter->add_subcommand("list", "list a model's dead-lettered jobs");
  dl_list->add_option("model", model)->required();
  auto* dl_requeue =
      deadletter->add_subcommand("requeue", "put dead-lettered jobs back in the queue");
  dl_requeue->add_option("model", model)->required();
  dl_requeue->add_option("id", id);
  dl_requeue->add_flag("--all", all);

  auto* enqueue =
      app.add_subcommand("enqueue", "store FILE and queue a job for MODEL (bypasses the gateway)");
  enqueue->add_option("--model", model)->required();
  enqueue->add_option("--service-type", service_type);
  enqueue->add_option("--operation", operation);
  enqueue->add_option("--param", params, "k=v, passed to inference as a form field");
  enqueue->add_flag("--priority", priority, "LPUSH: ahead of the queue");
  enqueue->add_option("file", file)->required()->check(CLI::ExistingFile);
  auto* job = app.add_subcommand("job", "print a job record from Redis as JSON");
  job->add_option("--model", model)->required();
  job->add_option("id", id)->required();

  std::string key_id, aad, keys_dir, out_path;
  std::int64_t segment_size = 1 << 20;
  auto* encrypt =
      app.add_subcommand("encrypt", "encrypt IN to OUT in the format of stored objects");
  auto* decrypt = app.add_subcommand("decrypt", "decrypt IN to OUT (a stored input or result)");
  for (auto* sub : {encrypt, decrypt}) {
    sub->add_option("--key", key_id, "key id (RELAY_ENCRYPTION_KEY_<ID> or a file in --keys-dir)")
        ->required();
    sub->add_option("--aad", aad, "associated data: <job id>/input or <job id>/result.json")
        ->required();
    sub->add_option("--keys-dir", keys_dir, "folder of key files");
    sub->add_option("--segment-size", segment_size,
                    "ciphertext segment size (encryption.segment_size)");
    sub->add_option("in", file, "input file")->required()->check(CLI::ExistingFile);
    sub->add_option("out", out_path, "output file")->required();
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

  if (*encrypt || *decrypt) {
    try {
      auto ring =
          relay::crypto::Keyring::load(relay::crypto::Keyring::process_environment(), keys_dir);
      auto key = ring.get(key_id);
      if (!key)
        throw std::invalid_argument("no key '" + key_id + "' (set RELAY_ENCRYPTION_KEY_" + key_id +
                                    ")");
      relay::crypto::StreamingParams sp{32, relay::crypto::HkdfHash::sha256,
                                        static_cast<size_t>(segment_size)};
      FileSource in(file);
      std::unique_ptr<relay::ByteSource> xf;
      if (*encrypt)
        xf = std::make_unique<relay::crypto::EncryptingSource>(in, *key, aad, sp);
      else
        xf = std::make_unique<relay::crypto::DecryptingSource>(in, *key, aad, sp);
      // Written to a temporary file and renamed: a failed decryption leaves no partial output.
      std::string tmp = out_path + ".part";
      {
        std::ofstream out(tmp, std::ios::binary);
        std::string buf(1 << 20, '\0');
        while (size_t n = xf->read(buf)) out.write(buf.data(), static_cast<std::streamsize>(n));
        if (!out) throw std::runtime_error("cannot write " + tmp);
      }
      std::filesystem::rename(tmp, out_path);
      return 0;
    } catch (const relay::crypto::DecryptionError& e) {
      std::filesystem::remove(out_path + ".part");
      std::cerr << "relayctl: " << e.what() << "\n";
      return 3;
    } catch (const std::exception& e) {
      std::filesystem::remove(out_path + ".part");
      std::cerr << "relayctl: " << e.what() << "\n";
      return 1;
    }
  }

  std::vector<std::string> auth;
  if (!api_key.empty()) auth.push_back("Authorization: Bearer " + api_key);
  auto api_error = [&](const relay::ctl::HttpAnswer& a) {
    if (a.status == 0)
      std::cerr << "relayctl: cannot reach the gateway at " << gateway << ": " << a.error << "\n";
    else
      std::cerr << "relayctl: HTTP " << a.status << ": " << a.body << "\n";
    return 1;
  };
  auto job_url = [&](const std::string& r) -> std::optional<std::string> {
    auto slash = r.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == r.size()) return std::nullopt;
    return gateway + "/jobs/" + r;
  };
  auto wait_for = [&](const std::string& url) {
    auto limit = relay::parse_duration(timeout).value_or(std::chrono::seconds(60));
    auto deadline = std::chrono::steady_clock::now() + limit;
    relay::ctl::HttpAnswer a;
    do {
      auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline -
                                                                   std::chrono::steady_clock::now())
                      .count();
      a = relay::ctl::http_call(
          "GET", url + "?wait=" + std::to_string(std::clamp<long long>(left, 1, 60)), auth);
      if (a.status != 200) return a;
      auto st = field(boost::json::parse(a.body).as_object(), "status");
      if (exit_for(st) != 5) return a;
    } while (std::chrono::steady_clock::now() < deadline);
    return a;
  };
  auto show = [&](const relay::ctl::HttpAnswer& a) {
    auto j = boost::json::parse(a.body).as_object();
    if (as_json)
      std::cout << a.body << "\n";
    else
      print_job(j);
    return exit_for(field(j, "status"));
  };

  try {
    if (*submit) {
      relay::ctl::Upload u{file, {}, !as_json && ::isatty(2)};
      if (!operation.empty()) u.fields["operation"] = operation;
      if (!callback.empty()) u.fields["callback_url"] = callback;
      if (!params.empty()) u.fields["params"] = boost::json::serialize(parse_params(params));
      auto headers = auth;
      if (priority) headers.push_back(env_or("RELAY_PRIORITY_HEADER", "X-Priority") + ": 1");
      auto a = relay::ctl::http_call("POST", gateway + "/jobs/" + service_type, headers, &u);
      if (a.status != 202) return api_error(a);
      auto j = boost::json::parse(a.body).as_object();
      std::string r = field(j, "service_type") + "/" + field(j, "id");
      if (!wait_flag) {
        if (as_json)
          std::cout << a.body << "\n";
        else
          std::cout << r << "\n";
        return 0;
      }
      auto done = wait_for(gateway + "/jobs/" + r);
      if (done.status != 200) return api_error(done);
      return show(done);
    }
    if (*status || *wait || *result || *cancel) {
      auto url = job_url(ref);
      if (!url) throw std::invalid_argument("expected SERVICE_TYPE/ID, got '" + ref + "'");
      if (*status || *wait) {
        auto a = *wait ? wait_for(*url) : relay::ctl::http_call("GET", *url, auth);
        if (a.status != 200) return api_error(a);
        return show(a);
      }
      if (*result) {
        auto a = relay::ctl::http_call("GET", *url + "/result", auth, nullptr, out_file);
        if (a.status != 200) {
          if (!out_file.empty()) std::filesystem::remove(out_file);
          return api_error(a);
        }
        if (out_file.empty()) std::cout << a.body << (a.body.ends_with("\n") ? "" : "\n");
        return 0;
      }
      auto a = relay::ctl::http_call("DELETE", *url, auth);
      if (a.status != 200 && a.status != 202) return api_error(a);
      // The job's exit code (4: cancelled), except that a job its relay is still stopping
      // (5, "still running") is a cancel under way: 0. Printed once.
      const int code = show(a);
      return code == 5 ? 0 : code;
    }

    // Operator commands: Redis directly.
    // The redis.* keys from the environment as every binary reads them (password, TLS files,
    // server name...), with --redis-url winning over RELAY_REDIS_URL.
    relay::config::RedisConfig rc;
    {
      relay::config::Schema s;
      relay::config::bind_redis(s, rc);
      s.load_file("", relay::config::process_env());
      rc.url = redis_url;
      relay::config::validate_redis(rc);
    }
    auto conn = relay::redis::Connection::open(rc.endpoint());
    rc.key_prefix = key_prefix;
    rc.hash_tag = hash_tag;
    const relay::redis::Keys keys = rc.keys();  // cluster mode: tagged whatever --hash-tag says
    relay::redis::JobStore store(conn, keys);
    if (*queues) {
      boost::json::array out;
      for (const auto& m : relay::redis::JobStore::known_models(rc.endpoint(), keys)) {
        auto q = store.queue_depth(m);
        double age = 0;
        if (q.oldest_pending)
          if (auto rec = store.get(m, *q.oldest_pending))
            if (auto t = relay::parse_rfc3339(rec->created_at))
              age = std::chrono::duration<double>(relay::wall_now() - *t).count();
        out.push_back(boost::json::object{{"model", m},
                                          {"pending", q.pending},
                                          {"processing", q.processing},
                                          {"deadletter", q.deadletter},
                                          {"oldest_pending_seconds", age}});
      }
      if (as_json) {
        std::cout << boost::json::serialize(out) << "\n";
      } else {
        std::printf("%-24s %9s %11s %11s %14s\n", "MODEL", "PENDING", "PROCESSING", "DEADLETTER",
                    "OLDEST WAIT");
        for (auto& v : out) {
          auto& o = v.as_object();
          std::printf("%-24s %9lld %11lld %11lld %13.1fs\n", field(o, "model").c_str(),
                      static_cast<long long>(o.at("pending").as_int64()),
                      static_cast<long long>(o.at("processing").as_int64()),
                      static_cast<long long>(o.at("deadletter").as_int64()),
                      o.at("oldest_pending_seconds").to_number<double>());
        }
      }
      return 0;
    }
    if (*dl_list) {
      boost::json::array out;
      for (auto& i : store.list(keys.deadletter(model)))
        if (auto rec = store.get(model, i))
          out.push_back(boost::json::parse(boost::json::serialize(to_json(*rec))));
      if (as_json) {
        std::cout << boost::json::serialize(out) << "\n";
      } else {
        std::printf("%-44s %-9s %-24s %s\n", "JOB", "ATTEMPTS", "FINISHED", "ERROR");
        for (auto& v : out) {
          auto& o = v.as_object();
          std::printf("%-44s %-9s %-24s %s\n",
                      (field(o, "service_type") + "/" + field(o, "id")).c_str(),
                      field(o, "attempts").c_str(), field(o, "finished_at").c_str(),
                      field(o, "error_message").c_str());
        }
      }
      return 0;
    }
    if (*dl_requeue) {
      if (id.empty() == !all) throw std::invalid_argument("give either an ID or --all");
      std::vector<std::string> ids =
          all ? store.list(keys.deadletter(model)) : std::vector<std::string>{id};
      int n = 0;
      for (auto& i : ids) n += store.requeue_deadletter(model, i) ? 1 : 0;
      if (as_json)
        std::cout << boost::json::serialize(boost::json::object{{"requeued", n}}) << "\n";
      else
        std::cout << "requeued " << n << " job(s)\n";
      return n == static_cast<int>(ids.size()) ? 0 : 1;
    }
    if (*enqueue) {
      auto storage = relay::storage::make_storage(sc);
      boost::json::object p = parse_params(params);
      relay::JobRecord r;
      r.id = relay::new_job_id();
      r.service_type = service_type;
      r.model = model;
      r.operation = operation;
      r.status = "pending";
      r.input_key = relay::input_object_key(service_type, r.id);
      r.input_filename = std::filesystem::path(file).filename().string();
      r.input_content_type = guess_content_type(file);
      r.input_size = std::to_string(std::filesystem::file_size(file));
      if (!p.empty()) r.params = boost::json::serialize(p);
      if (priority) r.priority = "1";
      r.attempts = "0";
      r.created_at = relay::format_rfc3339(relay::wall_now());
      FileSource src(file);
      storage->put(r.input_key, src, {});  // input first: a record never points at nothing
      if (!store.submit(r, priority)) throw std::runtime_error("job id collision");
      std::cout << r.id << "\n";
      return 0;
    }
    if (*job) {
      auto r = store.get(model, id);
      if (!r) {
        std::cerr << "relayctl: no job " << id << "\n";
        return 1;
      }
      std::cout << boost::json::serialize(to_json(*r)) << "\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "relayctl: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
