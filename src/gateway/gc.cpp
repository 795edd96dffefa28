#include "gateway/gc.hpp"

#include "common/log.hpp"
#include "common/periodic.hpp"
#include "redis/job_record.hpp"
#include "redis/schedules.hpp"
#include "storage/object_keys.hpp"

namespace relay::gateway {

int Gc::pass() {
  redis::Schedules schedules(conn_.get(), p_.keys);
  const long long now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  hold_unsettled(schedules, now);
  int n = 0;
  for (const auto& model : p_.keys.one_per_due_set(p_.models)) {
    // A batch at a time: its objects removed together (S3: one DeleteObjects request for 500
    // jobs) and forgotten together (one round trip). Removed one by one, with two requests to
    // storage and two round trips to Redis each, a store ~20 ms away let GC delete ~25 jobs'
    // objects a second: less than a busy deployment finishes, and the backlog grew for ever.
    std::vector<redis::GcItem> done;
    std::vector<std::string> objects;
    for (auto& item : schedules.gc_due(model, now, kBatch)) {
      // A held upload's job that exists after all (its creation's reply was lost, then the
      // step ran): the input is the job's. Asked now, long after the step could have run.
      if (item.upload && schedules.job_exists(item.model, item.job_id)) {
        schedules.release_upload(item.model, item.service_type, item.job_id);
        log::info("gc: a held input's job exists (its creation's reply was lost); input kept",
                  {{"job_id", item.job_id}, {"service_type", item.service_type}});
        ++n;
        continue;
      }
      // (An upload's input goes whatever gc.keep_objects says: it belongs to no job.)
      if (!p_.keep_objects || item.upload) {
        objects.push_back(input_object_key(item.service_type, item.job_id));
        objects.push_back(result_object_key(item.service_type, item.job_id));
      }
      done.push_back(std::move(item));
    }
    try {
      p_.storage->remove_many(objects);
    } catch (const std::exception& e) {
      log::warn("gc: cannot delete objects; retrying later",
                {{"jobs", static_cast<std::int64_t>(done.size())},
                 {"job_id", done.empty() ? std::string() : done.front().job_id},
                 {"error", e.what()}});
      continue;  // all stay due (what was removed is missing next time: not an error)
    }
    for (const auto& item : done)
      if (item.upload)
        log::info("gc: removed the input of an upload whose job was never created",
                  {{"job_id", item.job_id}, {"service_type", item.service_type}});
    schedules.gc_done(done);
    n += static_cast<int>(done.size());
  }
  return n;
}

void Gc::hold_unsettled(redis::Schedules& schedules, long long now_ms) {
  if (!p_.unsettled) return;
  auto items = p_.unsettled->take();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    try {
      schedules.hold_upload(item.model, item.service_type, item.job_id,
                            now_ms + p_.unsettled_hold.count());
    } catch (...) {
      p_.unsettled->put_back({items.begin() + static_cast<std::ptrdiff_t>(i), items.end()});
      throw;
    }
    log::info(
        "gc: the input of a submission whose job may exist is held; deleted when due if no "
        "job has it",
        {{"job_id", item.job_id}, {"service_type", item.service_type}});
  }
}

void Gc::sweep() {
  try {
    if (auto n = p_.storage->sweep(p_.sweep_age))
      log::info("gc: removed what crashed uploads left in storage", {{"removed", n}});
  } catch (const std::exception& e) {
    log::warn("gc: cannot sweep storage", {{"error", e.what()}});
  }
}

void Gc::run(std::stop_token stop) {
  run_periodically({"gc", p_.interval,
                    [this] {
                      if (std::chrono::steady_clock::now() >= next_sweep_) {
                        sweep();
                        next_sweep_ = std::chrono::steady_clock::now() + std::chrono::hours(1);
                      }
                      return pass() >= kBatch;  // a backlog: keep going
                    },
                    [this] { conn_.reset(); }},
                   stop);
}

}  // namespace relay::gateway
