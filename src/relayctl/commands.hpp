#pragma once
// relayctl's commands, one group per file: jobs.cpp (a user's jobs, through the gateway's API),
// operator.cpp (queues, dead letters, records: Redis directly), crypt.cpp (stored objects'
// encryption). main.cpp only parses the command line into Options and calls one of them. Each
// returns the process's exit code (README: 0, 1 error, 3 failed, 4 cancelled, 5 still running).

#include <boost/json.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_stream.hpp"
#include "storage/storage.hpp"

namespace relay::ctl {

struct Options {
  // Global options, and their environment variables.
  std::string gateway, api_key, redis_url, key_prefix;
  bool hash_tag = false;
  bool as_json = false;
  storage::Config storage;
  // The commands' arguments.
  std::string model, service_type = "default", file, operation, id, ref, out_file, callback,
                     timeout = "60s";
  std::vector<std::string> params;
  std::string ttl, job_timeout;  // submit: the job's deadlines, as durations
  std::string webhook_events;    // submit
  std::string input_url;         // submit: the input by reference instead of a file
  // jobs: the listing's filters; since is RFC 3339 or a duration back from now ("1h").
  std::string status_filter, since;
  std::int64_t limit = 20;
  bool priority = false, wait = false, all = false;
  // encrypt / decrypt
  std::string key_id, aad, keys_dir, out_path;
  std::int64_t segment_size = 1 << 20;
};

// jobs.cpp
int submit(const Options& o);
enum class JobVerb { status, wait, result, cancel };
int job(const Options& o, JobVerb verb);
int jobs(const Options& o);

// operator.cpp
int queues(const Options& o);
int deadletter_list(const Options& o);
int deadletter_requeue(const Options& o);
int enqueue(const Options& o);
int record(const Options& o);

// crypt.cpp
int crypt(const Options& o, bool encrypt);

// Shared by the groups.
std::string env_or(const char* name, std::string def);
std::string field(const boost::json::object& o, const char* k);
boost::json::object parse_params(const std::vector<std::string>& params);

// A file as a ByteSource, with its size.
class FileSource final : public ByteSource {
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

}  // namespace relay::ctl
