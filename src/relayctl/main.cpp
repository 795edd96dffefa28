// relayctl — command-line tool for operators. Until the gateway exists (issue 3) it talks to
// Redis and storage directly, through the same JobStore and storage code as everything else:
//
//   relayctl enqueue --model M --service-type S FILE [--operation OP] [--param k=v]... [--priority]
//   relayctl job --model M ID            the job record as JSON
//   relayctl wait --model M ID [--timeout 60s]   until the job is terminal; exit 0 completed,
//                                        3 failed, 4 cancelled, 5 timed out
//
// Redis and storage come from --redis-url / --storage-url or RELAY_REDIS_URL / RELAY_STORAGE_URL
// (and the other RELAY_STORAGE_* / AWS_* variables, as for the relay).

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "common/time.hpp"
#include "redis/job_store.hpp"
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

boost::json::object to_json(const relay::JobRecord& r) {
  boost::json::object o;
  for (auto& [k, v] : r.to_fields()) o[k] = v;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"relayctl: Relay's command-line tool"};
  app.require_subcommand(1);
  std::string redis_url = env_or("RELAY_REDIS_URL", "redis://127.0.0.1:6379");
  std::string key_prefix = env_or("RELAY_REDIS_KEY_PREFIX", "");
  bool hash_tag = env_or("RELAY_REDIS_HASH_TAG", "false") == "true";
  relay::storage::Config sc;
  sc.url = env_or("RELAY_STORAGE_URL", sc.url);
  sc.s3_endpoint = env_or("RELAY_STORAGE_S3_ENDPOINT", "");
  sc.s3_region = env_or("RELAY_STORAGE_S3_REGION", sc.s3_region);
  sc.s3_path_style = env_or("RELAY_STORAGE_S3_PATH_STYLE", "false") == "true";
  app.add_option("--redis-url", redis_url, "redis://[user:password@]host:port[/db]");
  app.add_option("--storage-url", sc.url, "file:///path or s3://bucket/prefix");
  std::string model, service_type = "default", file, operation, id, timeout = "60s";
  std::vector<std::string> params;
  bool priority = false;

  auto* enqueue =
      app.add_subcommand("enqueue", "store FILE and queue a job for MODEL (bypasses the gateway)");
  enqueue->add_option("--model", model)->required();
  enqueue->add_option("--service-type", service_type);
  enqueue->add_option("--operation", operation);
  enqueue->add_option("--param", params, "k=v, passed to inference as a form field");
  enqueue->add_flag("--priority", priority, "LPUSH: ahead of the queue");
  enqueue->add_option("file", file)->required()->check(CLI::ExistingFile);

  auto* job = app.add_subcommand("job", "print a job record as JSON");
  job->add_option("--model", model)->required();
  job->add_option("id", id)->required();

  auto* wait = app.add_subcommand("wait", "wait until a job is terminal and print it");
  wait->add_option("--model", model)->required();
  wait->add_option("--timeout", timeout);
  wait->add_option("id", id)->required();
  CLI11_PARSE(app, argc, argv);

  try {
    auto conn = relay::redis::Connection::open(relay::redis::parse_url(redis_url));
    relay::redis::JobStore store(conn, relay::redis::Keys(key_prefix, hash_tag));
    if (*enqueue) {
      auto storage = relay::storage::make_storage(sc);
      boost::json::object p;
      for (const auto& kv : params) {
        auto eq = kv.find('=');
        if (eq == std::string::npos)
          throw std::invalid_argument("--param expects k=v, got '" + kv + "'");
        p[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
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
    if (*wait) {
      auto limit = relay::parse_duration(timeout);
      if (!limit) throw std::invalid_argument("--timeout: expected a duration such as 30s");
      auto deadline = std::chrono::steady_clock::now() + *limit;
      for (;;) {
        auto r = store.get(model, id);
        if (!r) {
          std::cerr << "relayctl: no job " << id << "\n";
          return 1;
        }
        auto st = r->parsed_status();
        if (st && relay::is_terminal(*st)) {
          std::cout << boost::json::serialize(to_json(*r)) << "\n";
          return *st == relay::JobStatus::completed ? 0 : *st == relay::JobStatus::failed ? 3 : 4;
        }
        if (std::chrono::steady_clock::now() > deadline) return 5;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "relayctl: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
