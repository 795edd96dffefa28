#include "sidecar/heartbeat.hpp"

#include "common/log.hpp"
#include "redis/job_store.hpp"

namespace relay::sidecar {

void Heartbeat::watch(std::string job_id, std::string token, JobControl* job,
                      bool progress_webhooks, Clock::time_point leased_at) {
  const auto now = Clock::now();
  const auto since = leased_at == Clock::time_point{} ? now : std::min(leased_at, now);
  Watched w;
  w.token = std::move(token);
  w.job = job;
  w.next = since + p_.lease_ttl / 3;
  w.last_ok = since;
  w.progress_webhooks = progress_webhooks;
  const bool due = w.next <= now;
  {
    std::lock_guard lock(mu_);
    jobs_.insert_or_assign(std::move(job_id), std::move(w));
  }
  // Otherwise no wake-up: run() plans its sleep at most lease_ttl/3 ahead, so it re-plans
  // before this job's first beat is due anyway. Waking it for every job cost two context
  // switches per job at thousands of jobs/s.
  if (due) cv_.notify_one();
}

void Heartbeat::report(const std::string& job_id, ProgressReport r) {
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    it->second.progress = std::move(r);
  }
  cv_.notify_one();
}

void Heartbeat::unwatch(const std::string& job_id) {
  std::lock_guard lock(mu_);  // waits for a beat in flight; run() looks jobs up under mu_
  jobs_.erase(job_id);
}

bool Heartbeat::work_due(Clock::time_point now) const {
  for (const auto& [id, w] : jobs_)
    if (now >= w.next || (w.progress && now >= w.next_progress)) return true;
  return false;
}

void Heartbeat::run(std::stop_token stop) {
  std::unique_lock lock(mu_);
  const auto interval = p_.lease_ttl / 3;
  std::vector<std::string> due;
  while (!stop.stop_requested()) {
    // Everything due now, job by job, letting go of the lock between jobs: a slot starting or
    // ending a job (watch, unwatch) waits for one beat at most, not for every job's.
    auto now = Clock::now();
    due.clear();
    for (const auto& [id, w] : jobs_)
      if (now >= w.next || (w.progress && now >= w.next_progress)) due.push_back(id);
    bool redis_down = false;
    for (const auto& id : due) {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;  // unwatched meanwhile
      auto& w = it->second;
      if (now >= w.next) {
        // After one beat failed on Redis, the others of this round would wait out the same
        // timeout each, one after another: they count as failed too, and try next round.
        const Beat b = redis_down ? Beat::failed : beat(id, w);
        if (b == Beat::lost) {
          jobs_.erase(it);  // nothing more to keep alive
          continue;
        }
        redis_down = redis_down || b == Beat::failed;
        // (A failed beat is tried again soon: its lease may still have time to be kept.)
        w.next = Clock::now() + (b == Beat::failed ? std::min(interval, kRetryAfter) : interval);
      }
      if (!redis_down && w.progress && now >= w.next_progress) {
        write_progress(id, w);
        w.next_progress = Clock::now() + p_.progress_interval;
      }
      lock.unlock();
      lock.lock();
    }
    auto until = Clock::now() + interval;
    for (const auto& [id, w] : jobs_) {
      until = std::min(until, w.next);
      if (w.progress) until = std::min(until, w.next_progress);
    }
    // A job watched meanwhile has its first beat at least an interval after its watch(), so
    // this wake-up comes before it is due — but for a job taken ahead, whose watch() wakes the
    // thread when its beat is due already. A report wakes the thread (once its turn has come;
    // until then the wait ends at that turn).
    cv_.wait_until(lock, stop, until, [&] { return work_due(Clock::now()); });
  }
}

void Heartbeat::write_progress(const std::string& id, Watched& w) {
  ProgressReport r = std::move(*w.progress);
  w.progress.reset();
  try {
    redis::JobStore store(p_.conn->get(), p_.keys);
    auto seq = store.progress(p_.model, id, w.token, r.fraction, r.message);
    if (seq == 0) return;  // the lease is gone; the next beat stops the job
    const auto now = Clock::now();
    if (w.progress_webhooks && now >= w.next_progress_webhook) {
      store.schedule_webhook(p_.model, id, redis::WebhookEvent::progress, std::to_string(seq));
      w.next_progress_webhook = now + p_.progress_webhook_interval;
    }
  } catch (const redis::IoError& e) {
    // Progress is advisory: a report lost to a Redis outage is superseded by the next one.
    p_.conn->reset();
    log::warn("progress not recorded", {{"job_id", id}, {"error", e.what()}});
  }
}

Heartbeat::Beat Heartbeat::beat(const std::string& id, Watched& w) {
  try {
    redis::JobStore store(p_.conn->get(), p_.keys);
    auto r = store.heartbeat(p_.model, id, w.token, p_.lease_ttl);
    w.last_ok = Clock::now();
    if (!r.held) {
      log::warn("lease lost; stopping the job without writing to it", {{"job_id", id}});
      w.job->stop(StopReason::lease_lost);
      return Beat::lost;
    }
    if (r.cancel_requested) {
      log::info("cancel flag seen by heartbeat", {{"job_id", id}});
      w.job->stop(StopReason::cancelled);
    }
  } catch (const redis::IoError& e) {
    // Keep trying: if Redis comes back before the lease expires, nothing was lost. If it
    // expired, the next successful beat reports the loss.
    p_.conn->reset();
    auto down_for = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - w.last_ok);
    log::warn("heartbeat failed",
              {{"job_id", id}, {"error", e.what()}, {"since_ms", down_for.count()}});
    return Beat::failed;
  }
  return Beat::held;
}

}  // namespace relay::sidecar
