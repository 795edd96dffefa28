#include "sidecar/heartbeat.hpp"

#include "common/log.hpp"
#include "redis/job_store.hpp"

namespace relay::sidecar {

void Heartbeat::watch(std::string job_id, std::string token, JobControl* job,
                      bool progress_webhooks) {
  std::lock_guard lock(mu_);
  job_ = job;
  progress_.reset();
  progress_webhooks_ = progress_webhooks;
  next_progress_ = next_progress_webhook_ = {};
  job_id_ = std::move(job_id);
  token_ = std::move(token);
  next_ = std::chrono::steady_clock::now() + p_.lease_ttl / 3;
  last_ok_ = std::chrono::steady_clock::now();
  // No wake-up: an idle run() sleeps at most lease_ttl/3, so it re-plans before next_ anyway.
  // Waking it for every job cost two context switches per job at thousands of jobs/s.
}

void Heartbeat::report(ProgressReport r) {
  {
    std::lock_guard lock(mu_);
    if (!job_) return;
    progress_ = std::move(r);
  }
  cv_.notify_one();
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
    if (job_ && progress_ && now >= next_progress_) {
      write_progress();
      next_progress_ = std::chrono::steady_clock::now() + p_.progress_interval;
      continue;
    }
    // Idle: sleep one interval. A job watched meanwhile has next_ >= now + interval, so this
    // wake-up always comes before its first beat is due. A report wakes it (once its turn
    // has come; until then the wait ends at that turn).
    auto until = job_ ? next_ : now + interval;
    if (job_ && progress_) until = std::min(until, next_progress_);
    cv_.wait_until(lock, stop, until, [&] {
      return job_ && progress_ && std::chrono::steady_clock::now() >= next_progress_;
    });
  }
}

void Heartbeat::write_progress() {
  ProgressReport r = std::move(*progress_);
  progress_.reset();
  try {
    redis::JobStore store(p_.conn->get(), p_.keys);
    auto seq = store.progress(p_.model, job_id_, token_, r.fraction, r.message);
    if (seq == 0) return;  // the lease is gone; the next beat stops the job
    const auto now = std::chrono::steady_clock::now();
    if (progress_webhooks_ && now >= next_progress_webhook_) {
      store.schedule_webhook(p_.model, job_id_, redis::WebhookEvent::progress, std::to_string(seq));
      next_progress_webhook_ = now + p_.progress_webhook_interval;
    }
  } catch (const redis::IoError& e) {
    // Progress is advisory: a report lost to a Redis outage is superseded by the next one.
    p_.conn->reset();
    log::warn("progress not recorded", {{"job_id", job_id_}, {"error", e.what()}});
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
