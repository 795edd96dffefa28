#include "gateway/due_sweep.hpp"

#include "common/log.hpp"
#include "common/periodic.hpp"
#include "common/time.hpp"
#include "gateway/metrics.hpp"
#include "redis/job_store.hpp"

namespace relay::gateway {

namespace {
constexpr int kBatch = 100;  // due ids read per round trip; a pass goes on while it finds more
}

int DueSweep::pass() {
  int expired = 0;
  redis::JobStore store(conn_.get(), p_.keys);
  for (const auto& model : p_.models) {
    for (;;) {
      auto due = store.due_expiries(model, wall_now(), kBatch);
      for (const auto& id : due) {
        if (!store.expire(model, id)) continue;
        ++expired;
        metrics().expired.add({model});
        log::info("job expired: not started within its ttl", {{"job_id", id}, {"model", model}});
      }
      if (due.size() < static_cast<std::size_t>(kBatch)) break;
    }
    for (;;) {
      auto due = store.due_retries(model, wall_now(), kBatch);
      for (const auto& id : due)
        if (store.requeue_retry(model, id)) {
          ++expired;
          log::info("job back in pending for its retry", {{"job_id", id}, {"model", model}});
        }
      if (due.size() < static_cast<std::size_t>(kBatch)) break;
    }
  }
  return expired;
}

void DueSweep::run(std::stop_token stop) {
  run_periodically({"due sweep", p_.interval,
                    [this] {
                      pass();
                      return false;
                    },
                    [this] { conn_.reset(); }},
                   stop);
}

}  // namespace relay::gateway
