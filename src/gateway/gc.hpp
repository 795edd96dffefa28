#pragma once
// Garbage collection (SPEC §6): terminal job records expire by themselves (a TTL set when the job
// ended); this loop deletes their inputs and results from storage when that time comes (unless
// gc.keep_objects) and their webhook bookkeeping; and the inputs of uploads whose job was never
// created (held for deletion by the upload, or by this loop for a submission whose job's
// creation was unknown: unsettled.hpp), unless a job has them after all. Idempotent, so every
// replica may run it.

#include <chrono>
#include <stop_token>
#include <string>
#include <vector>

#include "gateway/unsettled.hpp"
#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "redis/schedules.hpp"
#include "storage/storage.hpp"

namespace relay::gateway {

struct GcParams {
  redis::Endpoint endpoint;
  redis::Keys keys;
  std::vector<std::string> models;
  storage::Storage* storage;
  bool keep_objects = false;
  std::chrono::milliseconds interval;
  // Storage::sweep: at start, then hourly, for leftovers older than this.
  std::chrono::seconds sweep_age{3600};
  // Inputs of submissions whose job may exist (see unsettled.hpp): held for deletion this long
  // once Redis answers, then deleted if no job has them.
  Unsettled* unsettled = nullptr;
  std::chrono::milliseconds unsettled_hold{std::chrono::minutes(2)};
};

class Gc {
 public:
  explicit Gc(GcParams p) : p_(std::move(p)), conn_(p_.endpoint) {}
  int pass();    // throws redis::IoError
  void sweep();  // never throws
  void run(std::stop_token stop);
  // Jobs per model and pass: 1,000 objects, as many as S3 deletes in one request.
  static constexpr int kBatch = 500;

 private:
  // Holds the inputs the API listed as unsettled (those not held stay listed); throws IoError.
  void hold_unsettled(redis::Schedules& schedules, long long now_ms);
  GcParams p_;
  redis::LazyConnection conn_;
  std::chrono::steady_clock::time_point next_sweep_{};
};

}  // namespace relay::gateway
