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
  // Every id due now, a batch at a time (its steps in one round trip): each step drops its id
  // from the set, moved or not.
  auto drain = [&](auto due, auto move, auto moved_one) {
    for (;;) {
      auto ids = due();
      const std::vector<bool> done = ids.empty() ? std::vector<bool>{} : move(ids);
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (done[i]) {
          moved_one(ids[i]);
          ++moved;
        }
      if (ids.size() < static_cast<std::size_t>(kBatch)) return;
    }
  };
  for (const auto& model : p_.models) {
    drain(
        [&] { return store.due_expiries(model, wall_now(), kBatch); },
        [&](const std::vector<std::string>& ids) { return store.expire(model, ids); },
        [&](const std::string& id) {
          metrics().expired.add({model});
          log::info("job expired: not started within its ttl", {{"job_id", id}, {"model", model}});
        });
    drain([&] { return store.due_retries(model, wall_now(), kBatch); },
          [&](const std::vector<std::string>& ids) { return store.requeue_retries(model, ids); },
          [&](const std::string& id) {
            log::info("job back in pending for its retry", {{"job_id", id}, {"model", model}});
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
