#include "sidecar/heartbeat.hpp"

#include "common/log.hpp"
#include "redis/job_store.hpp"

namespace relay::sidecar {

void Heartbeat::watch(std::string job_id, std::string token, JobControl* job) {
  std::lock_guard lock(mu_);
  job_ = job;
  job_id_ = std::move(job_id);
  token_ = std::move(token);
  next_ = std::chrono::steady_clock::now() + p_.lease_ttl / 3;
  last_ok_ = std::chrono::steady_clock::now();
  // No wake-up: an idle run() sleeps at most lease_ttl/3, so it re-plans before next_ anyway.
  // Waking it for every job cost two context switches per job at thousands of jobs/s.
}

void Heartbeat::unwatch() {
  std::lock_guard lock(mu_);  // waits for a beat in flight; run() checks job_ under mu_
  job_ = nullptr;
}

void Heartbeat::run(std::stop_token stop) {
  std::unique_lock lock(mu_);
  const auto interval = p_.lease_ttl / 3;
  while (!stop.stop_requested()) {
    auto now = std::chrono::steady_clock::now();
    if (job_ && now >= next_) {
      beat();
      next_ = std::chrono::steady_clock::now() + interval;
      continue;
    }
    // Idle: sleep one interval. A job watched meanwhile has next_ >= now + interval, so this
    // wake-up always comes before its first beat is due.
    auto until = job_ ? next_ : now + interval;
    cv_.wait_until(lock, stop, until, [] { return false; });
  }
}

void Heartbeat::beat() {
  try {
    redis::JobStore store(p_.conn->get(), p_.keys);
    auto r = store.heartbeat(p_.model, job_id_, token_, p_.lease_ttl);
    last_ok_ = std::chrono::steady_clock::now();
    if (!r.held) {
      log::warn("lease lost; stopping the job without writing to it", {{"job_id", job_id_}});
      job_->stop(StopReason::lease_lost);
      job_ = nullptr;  // nothing more to keep alive
      return;
    }
    if (r.cancel_requested) {
      log::info("cancel flag seen by heartbeat", {{"job_id", job_id_}});
      job_->stop(StopReason::cancelled);
    }
  } catch (const redis::IoError& e) {
    // Keep trying: if Redis comes back before the lease expires, nothing was lost. If it
    // expired, the next successful beat reports the loss.
    p_.conn->reset();
    auto down_for = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - last_ok_);
    log::warn("heartbeat failed",
              {{"job_id", job_id_}, {"error", e.what()}, {"since_ms", down_for.count()}});
  }
}

}  // namespace relay::sidecar
