#include "relay/heartbeat.hpp"

#include <condition_variable>
#include <mutex>

#include "common/log.hpp"
#include "redis/job_store.hpp"

namespace relay::sidecar {

void Heartbeat::run(std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  const auto interval = p_.lease_ttl / 3;
  auto last_ok = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock lock(mu);
      cv.wait_for(lock, stop, interval, [] { return false; });  // wakes early only on stop
      if (stop.stop_requested()) return;
    }
    try {
      redis::JobStore store(p_.conn->get(), p_.keys);
      auto r = store.heartbeat(p_.model, p_.job_id, p_.token, p_.lease_ttl);
      last_ok = std::chrono::steady_clock::now();
      if (!r.held) {
        log::warn("lease lost; stopping the job without writing to it", {{"job_id", p_.job_id}});
        p_.job->stop(StopReason::lease_lost);
        return;
      }
      if (r.cancel_requested) {
        log::info("cancel flag seen by heartbeat", {{"job_id", p_.job_id}});
        p_.job->stop(StopReason::cancelled);
      }
    } catch (const redis::IoError& e) {
      // Keep trying: if Redis comes back before the lease expires, nothing was lost. If it
      // expired, the next successful heartbeat reports the loss.
      p_.conn->reset();
      auto down_for = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last_ok);
      log::warn("heartbeat failed", {{"job_id", p_.job_id}, {"error", e.what()}, {"since_ms", down_for.count()}});
    }
  }
}

}  // namespace relay::sidecar
