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
  int moved = 0;
  redis::JobStore store(conn_.get(), p_.keys);
  // Every id due now, a batch at a time: each step drops its id from the set, moved or not.
  auto drain = [&](auto due, auto move) {
    for (;;) {
      auto ids = due();
      for (const auto& id : ids) moved += move(id) ? 1 : 0;
      if (ids.size() < static_cast<std::size_t>(kBatch)) return;
    }
  };
  for (const auto& model : p_.models) {
    drain(
        [&] { return store.due_expiries(model, wall_now(), kBatch); },
        [&](const std::string& id) {
          if (!store.expire(model, id)) return false;
          metrics().expired.add({model});
          log::info("job expired: not started within its ttl", {{"job_id", id}, {"model", model}});
          return true;
        });
    drain([&] { return store.due_retries(model, wall_now(), kBatch); },
          [&](const std::string& id) {
            if (!store.requeue_retry(model, id)) return false;
            log::info("job back in pending for its retry", {{"job_id", id}, {"model", model}});
            return true;
          });
  }
  return moved;
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
