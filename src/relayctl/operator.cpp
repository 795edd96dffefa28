// relayctl's operator commands, on Redis directly (no gateway): queue depths, dead letters,
// a job's raw record, and enqueue (store a file and queue a job, bypassing the API).

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "common/job_id.hpp"
#include "common/random.hpp"
#include "common/time.hpp"
#include "config/schema.hpp"
#include "config/shared.hpp"
#include "redis/job_store.hpp"
#include "relayctl/commands.hpp"
#include "storage/object_keys.hpp"

namespace relay::ctl {
namespace {

// The redis.* keys from the environment as every binary reads them (password, TLS files, server
// name...), with --redis-url winning over RELAY_REDIS_URL.
struct Redis {
  config::RedisConfig rc;
  redis::Connection conn;
  redis::Keys keys;
  redis::JobStore store;

  static config::RedisConfig settings(const Options& o) {
    config::RedisConfig rc;
    config::Schema s;
    config::bind_redis(s, rc);
    s.load_file("", config::process_env());
    rc.url = o.redis_url;
    config::validate_redis(rc);
    rc.key_prefix = o.key_prefix;
    rc.hash_tag = o.hash_tag;
    return rc;
  }
  explicit Redis(const Options& o)
      : rc(settings(o)),
        conn(redis::Connection::open(rc.endpoint())),
        keys(rc.keys()),  // cluster mode: tagged whatever --hash-tag says
        store(conn, keys) {}
};

boost::json::object to_json(const JobRecord& r) {
  boost::json::object o;
  for (auto& [k, v] : r.to_fields()) o[k] = v;
  return o;
}

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

}  // namespace

int queues(const Options& o) {
  Redis db(o);
  boost::json::array out;
  for (const auto& m : redis::JobStore::known_models(db.rc.endpoint(), db.keys)) {
    auto q = db.store.queue_depth(m);
    const double age = q.oldest_wait_seconds(wall_now());
    out.push_back(boost::json::object{{"model", m},
                                      {"pending", q.pending},
                                      {"processing", q.processing},
                                      {"deadletter", q.deadletter},
                                      {"oldest_pending_seconds", age}});
  }
  if (o.as_json) {
    std::cout << boost::json::serialize(out) << "\n";
  } else {
    std::printf("%-24s %9s %11s %11s %14s\n", "MODEL", "PENDING", "PROCESSING", "DEADLETTER",
                "OLDEST WAIT");
    for (auto& v : out) {
      auto& row = v.as_object();
      std::printf("%-24s %9lld %11lld %11lld %13.1fs\n", field(row, "model").c_str(),
                  static_cast<long long>(row.at("pending").as_int64()),
                  static_cast<long long>(row.at("processing").as_int64()),
                  static_cast<long long>(row.at("deadletter").as_int64()),
                  row.at("oldest_pending_seconds").to_number<double>());
    }
  }
  return 0;
}

int deadletter_list(const Options& o) {
  Redis db(o);
  boost::json::array out;
  for (auto& i : db.store.list(db.keys.deadletter(o.model)))
    if (auto rec = db.store.get(o.model, i))
      out.push_back(boost::json::parse(boost::json::serialize(to_json(*rec))));
  if (o.as_json) {
    std::cout << boost::json::serialize(out) << "\n";
  } else {
    std::printf("%-44s %-9s %-24s %s\n", "JOB", "ATTEMPTS", "FINISHED", "ERROR");
    for (auto& v : out) {
      auto& row = v.as_object();
      std::printf("%-44s %-9s %-24s %s\n",
                  (field(row, "service_type") + "/" + field(row, "id")).c_str(),
                  field(row, "attempts").c_str(), field(row, "finished_at").c_str(),
                  field(row, "error_message").c_str());
    }
  }
  return 0;
}

int deadletter_requeue(const Options& o) {
  Redis db(o);
  if (o.id.empty() == !o.all) throw std::invalid_argument("give either an ID or --all");
  const std::string token = random_hex(8);
  const std::int64_t n = o.all ? db.store.requeue_deadletter_all(o.model, token)
                               : std::int64_t{db.store.requeue_deadletter(o.model, o.id, token)};
  if (o.as_json)
    std::cout << boost::json::serialize(boost::json::object{{"requeued", n}}) << "\n";
  else
    std::cout << "requeued " << n << " job(s)\n";
  // (--all: whatever was there; an ID not dead-lettered is an error.)
  return o.all || n == 1 ? 0 : 1;
}

int enqueue(const Options& o) {
  Redis db(o);
  auto objects = storage::make_storage(o.storage);
  boost::json::object p = parse_params(o.params);
  JobRecord r;
  r.id = new_job_id();
  r.service_type = o.service_type;
  r.model = o.model;
  r.operation = o.operation;
  r.input_key = input_object_key(o.service_type, r.id);
  r.input_filename = std::filesystem::path(o.file).filename().string();
  r.input_content_type = guess_content_type(o.file);
  r.input_size = std::filesystem::file_size(o.file);
  if (!p.empty()) r.params = boost::json::serialize(p);
  r.priority = o.priority;
  r.created_at = wall_now();
  FileSource src(o.file);
  objects->put(r.input_key, src, {});  // input first: a record never points at nothing
  if (!db.store.submit(r, o.priority)) throw std::runtime_error("job id collision");
  std::cout << r.id << "\n";
  return 0;
}

int record(const Options& o) {
  Redis db(o);
  auto rec = db.store.get(o.model, o.id);
  if (!rec) {
    std::cerr << "relayctl: no job " << o.id << "\n";
    return 1;
  }
  std::cout << boost::json::serialize(to_json(*rec)) << "\n";
  return 0;
}

}  // namespace relay::ctl
