// relayctl — command-line tool for operators. Until the gateway exists (issue 3) it talks to
// Redis and storage directly, through the same JobStore and storage code as everything else:
//
//   relayctl enqueue --model M --service-type S FILE [--operation OP] [--param k=v]... [--priority]
//   relayctl job --model M ID            the job record as JSON
//   relayctl wait --model M ID [--timeout 60s]   until the job is terminal; exit 0 completed,
//                                        3 failed, 4 cancelled, 5 timed out
//   relayctl encrypt|decrypt --key KEY_ID --aad AAD IN OUT
//                                        Tink AES-GCM-HKDF streaming (the format of stored
//                                        objects); the key comes from RELAY_ENCRYPTION_KEY_<KEY_ID>
//                                        or
//                                        --keys-dir, the AAD is "<job id>/input" or "<job
//                                        id>/result.json"
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
#include "crypto/keyring.hpp"
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

  if (*encrypt || *decrypt) {
    try {
      auto ring =
          relay::crypto::Keyring::load(relay::crypto::Keyring::process_environment(), keys_dir);
      auto key = ring.get(key_id);
      if (!key)
        throw std::invalid_argument("no key '" + key_id + "' (set RELAY_ENCRYPTION_KEY_" + key_id +
                                    ")");
      relay::crypto::StreamingParams params{32, relay::crypto::HkdfHash::sha256,
                                            static_cast<size_t>(segment_size)};
      FileSource in(file);
      std::unique_ptr<relay::ByteSource> xf;
      if (*encrypt)
        xf = std::make_unique<relay::crypto::EncryptingSource>(in, *key, aad, params);
      else
        xf = std::make_unique<relay::crypto::DecryptingSource>(in, *key, aad, params);
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
