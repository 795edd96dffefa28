#include "gateway/expirer.hpp"

#include "common/log.hpp"
#include "common/periodic.hpp"
#include "common/time.hpp"
#include "gateway/metrics.hpp"
#include "redis/job_store.hpp"

namespace relay::gateway {

namespace {
constexpr int kBatch = 100;  // due ids read per round trip; a pass goes on while it finds more
}

int Expirer::pass() {
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
  }
  return expired;
}

void Expirer::run(std::stop_token stop) {
  run_periodically({"expiry sweep", p_.interval,
                    [this] {
                      pass();
                      return false;
                    },
                    [this] { conn_.reset(); }},
                   stop);
}

}  // namespace relay::gateway
