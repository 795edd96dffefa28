#pragma once
// Shared fixture for the relay's integration tests: a fresh redis-server per test, a storage
// backend, and helpers that submit jobs through the project's own JobStore (the same code the
// gateway uses) and start relay processes.

#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json.hpp>
#include <fstream>
#include <iostream>

#include "common/job_id.hpp"
#include "common/time.hpp"
#include "crypto/keyring.hpp"
#include "crypto/streaming_aead.hpp"
#include "harness.hpp"
#include "redis/job_store.hpp"
#include "redis/slot.hpp"
#include "storage/object_keys.hpp"
#include "storage/storage.hpp"

namespace relay::testing {

struct SubmitOptions {
  std::string operation = {};
  std::string filename = "sample.txt";
  std::string content_type = "text/plain";
  std::string params = {};
  bool priority = false;
  bool upload_input = true;
  std::optional<std::uint64_t> size = {};  // recorded input size, when the stream does not know it
  // Stored sealed with this key (32 raw bytes), recorded as key_id's, as the gateway does with
  // encryption on.
  std::string key_id = {};
  std::string key = {};
};

// A pending job's record as the gateway writes it (for the Redis steps' tests).
inline JobRecord pending_job(const std::string& model) {
  JobRecord r;
  r.id = new_job_id();
  r.service_type = "svc";
  r.model = model;
  r.input_key = "svc/" + r.id + "/input";
  r.created_at = parse_rfc3339("2026-11-30T00:00:00.000Z");
  return r;
}

inline std::string read_all(storage::Storage& st, const std::string& key) {
  auto src = st.open(key, {});
  std::string out, buf(65536, '\0');
  while (size_t n = src->read(buf)) out.append(buf.data(), n);
  return out;
}

// What the no-op server says it received, from the stored result.json.
inline boost::json::object file_part(const std::string& result_json) {
  auto v = boost::json::parse(result_json).as_object();
  for (auto& p : v.at("parts").as_array())
    if (p.as_object().at("name").as_string() == "file") return p.as_object();
  return {};
}

class RelayTest : public ::testing::Test {
 protected:
  RelayTest() : conn_(redis_.connect()), store_(conn_, keys_) {}

  void TearDown() override {
    if (HasFailure()) {
      for (const auto& path : relay_logs_) {
        std::ifstream f(path);
        std::cerr << "---- " << path << " ----\n" << f.rdbuf() << "\n";
      }
    }
  }

  Env base_env(const InferenceServer& inference) const {
    Env env{{"RELAY_MODEL", model_},
            {"RELAY_STORAGE_URL", "file://" + files_.path()},
            {"RELAY_INFERENCE_URL", inference.url()},
            {"RELAY_RELAY_HEALTH_INTERVAL", "50ms"},
            {"RELAY_QUEUE_POP_TIMEOUT", "2s"},
            {"RELAY_LOG_LEVEL", "debug"}};
    for (auto& [k, v] : redis_.env()) env[k] = v;
    return env;
  }

  // The same, with storage on the S3 test server.
  Env base_env(const InferenceServer& inference, const S3Server& s3) const {
    Env env = base_env(inference);
    for (auto& [k, v] : s3.env()) env[k] = v;
    return env;
  }

  std::unique_ptr<Process> start_relay(Env env, std::vector<std::string> args = {}) {
    std::vector<std::string> argv{relay_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    // Log paths, not Process pointers: the test body may destroy its processes before TearDown.
    relay_logs_.push_back(logs_.path() + "/relay-" + std::to_string(relay_logs_.size()) + ".log");
    return std::make_unique<Process>(argv, env, relay_logs_.back());
  }

  std::unique_ptr<storage::Storage> storage_for(const Env& env) {
    storage::Config c;
    c.url = env.at("RELAY_STORAGE_URL");
    if (env.count("RELAY_STORAGE_S3_ENDPOINT")) {
      c.s3_endpoint = env.at("RELAY_STORAGE_S3_ENDPOINT");
      c.s3_path_style = true;
      ::setenv("AWS_ACCESS_KEY_ID", env.at("AWS_ACCESS_KEY_ID").c_str(), 1);
      ::setenv("AWS_SECRET_ACCESS_KEY", env.at("AWS_SECRET_ACCESS_KEY").c_str(), 1);
    }
    return storage::make_storage(c);
  }

  // Stores the input (unless told not to) and submits the job; returns its id.
  std::string submit(storage::Storage& storage, const std::string& content,
                     const SubmitOptions& o = {}) {
    MemorySource src(content);
    return submit(storage, src, o, store_);
  }
  // n jobs, inputs "input 0" to "input <n-1>"; their ids in that order.
  std::vector<std::string> submit_many(storage::Storage& storage, int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(submit(storage, "input " + std::to_string(i)));
    return ids;
  }
  // The same with the input as a stream and through another job store (a restarted Redis).
  std::string submit(storage::Storage& storage, ByteSource& input, const SubmitOptions& o,
                     redis::JobStore& store) {
    JobRecord r;
    r.id = new_job_id();
    r.service_type = "svc";
    r.model = model_;
    r.operation = o.operation;
    r.input_key = input_object_key(r.service_type, r.id);
    r.input_filename = o.filename;
    r.input_content_type = o.content_type;
    if (auto n = o.size ? o.size : input.size()) r.input_size = *n;
    r.params = o.params;
    r.priority = o.priority;
    r.created_at = wall_now();
    if (o.upload_input && !o.key_id.empty()) {
      r.key_id = o.key_id;
      crypto::EncryptingSource sealed(input, o.key, crypto::input_aad(r.id));
      storage.put(r.input_key, sealed, {});
    } else if (o.upload_input) {
      storage.put(r.input_key, input, {});
    }
    EXPECT_TRUE(store.submit(r, o.priority));
    return r.id;
  }

  JobRecord record(const std::string& id) {
    auto r = store_.get(model_, id);
    return r ? *r : JobRecord{};
  }
  // "" when there is no such job.
  std::string status(const std::string& id) {
    auto r = store_.get(model_, id);
    return r ? std::string(to_string(r->status)) : std::string();
  }

  std::vector<std::string> list(const std::string& key) {
    auto r = conn_.command({"LRANGE", key, "0", "-1"});
    std::vector<std::string> out;
    for (size_t i = 0; i < r->elements; ++i) out.push_back(redis::as_string(r->element[i]));
    return out;
  }
  bool exists(const std::string& key) {
    return redis::as_integer(conn_.command({"EXISTS", key}).get()) == 1;
  }
  // A connection to the server holding the model's queue (cluster: the node serving its slot),
  // where a relay's BLMOVE waits.
  redis::Connection queue_node() {
    return redis_.cluster() ? redis::Connection::open(redis_.node_endpoint(
                                  redis_.node_of_slot(redis::key_slot(keys_.pending(model_)))))
                            : redis_.connect();
  }
  // Calls so far of a command (lower case: "blmove"), on the server holding the model's queue.
  long long calls_of(const std::string& command) {
    const auto info = redis::as_string(queue_node().command({"INFO", "commandstats"}).get());
    const std::string field = "cmdstat_" + command + ":calls=";
    const auto at = info.find(field);
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
  }
  // PUBLISH, heard by the channel's subscribers everywhere before it returns: in a cluster, sent
  // to each node itself (a node forwards a PUBLISH to the others over the cluster bus, later
  // than its reply). The subscribers that heard it, all nodes together.
  long long publish_heard(const std::string& channel, const std::string& message) {
    if (!redis_.cluster())
      return redis::as_integer(conn_.command({"PUBLISH", channel, message}).get());
    long long heard = 0;
    for (int i = 0; i < redis_.nodes(); ++i)
      heard += redis::as_integer(redis::Connection::open(redis_.node_endpoint(i))
                                     .command({"PUBLISH", channel, message})
                                     .get());
    return heard;
  }
  // Until a client (the relay) is blocked in BLMOVE, as INFO clients reports it.
  bool wait_for_blocked_client() {
    return wait_until(
        [&] {
          auto info = redis::as_string(queue_node().command({"INFO", "clients"}).get());
          return info.find("blocked_clients:1") != std::string::npos;
        },
        20s);
  }
  long long events_count() {
    return redis::as_integer(conn_.command({"XLEN", keys_.events(model_)}).get());
  }

  RedisServer redis_;
  TempDir files_, logs_;
  redis::Connection conn_;
  redis::Keys keys_{"", RedisServer::cluster_by_default()};  // cluster mode tags keys
  redis::JobStore store_;
  std::string model_ = "m1";
  std::vector<std::string> relay_logs_;
};

}  // namespace relay::testing
