#include "gateway/reaper.hpp"

#include <set>

#include "common/log.hpp"
#include "common/periodic.hpp"
#include "common/time.hpp"
#include "gateway/metrics.hpp"
#include "redis/job_store.hpp"

namespace relay::gateway {

ReapStats Reaper::pass() {
  ReapStats stats;
  redis::JobStore store(conn_.get(), p_.keys);
  for (const auto& model : p_.models) {
    auto ids = store.list(p_.keys.processing(model));
    std::set<std::string> seen(ids.begin(), ids.end());
    // Marks for ids that have left processing since are cleared by the same step ("gone").
    for (auto& id : store.hash_keys(p_.keys.suspects(model)))
      if (!seen.count(id)) ids.push_back(id);
    const auto outcomes = store.reap_all(model, ids, p_.grace, p_.max_attempts);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto outcome = outcomes[i];
      const std::string& id = ids[i];
      if (outcome == redis::ReapOutcome::requeued) {
        ++stats.requeued;
        metrics().reaped.add(1);
        log::warn("job reaped: its relay stopped without finishing; requeued",
                  {{"job_id", id}, {"model", model}});
      } else if (outcome == redis::ReapOutcome::deadlettered) {
        ++stats.deadlettered;
        metrics().deadlettered.add(1);
        log::error("job dead-lettered after repeated relay crashes",
                   {{"job_id", id}, {"model", model}});
      }
    }
  }
  for (const auto& tenant : p_.tenants)
    if (int n = store.sweep_admissions(tenant, wall_now() - p_.admission_grace))
      log::info("quota admissions of jobs that never came to be released",
                {{"tenant", tenant}, {"count", n}});
  return stats;
}

void Reaper::run(std::stop_token stop) {
  run_periodically({"reaper", p_.interval,
                    [this] {
                      pass();
                      return false;
                    },
                    [this] { conn_.reset(); }},
                   stop);
}

}  // namespace relay::gateway
