#include "gateway/completion_consumer.hpp"

#include <algorithm>
#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::gateway {

void CompletionConsumer::ensure_groups(redis::EventLog& log) {
  if (groups_ready_) return;
  for (const auto& model : p_.models) log.ensure_group(model);
  groups_ready_ = true;
}

int CompletionConsumer::handle(redis::Connection& c, redis::EventLog& events,
                               const std::vector<redis::Event>& batch) {
  int handled = 0;
  // One settle per model: a read over several streams returns each stream's entries together.
  for (auto from = batch.begin(); from != batch.end();) {
    auto to =
        std::find_if(from, batch.end(), [&](const auto& e) { return e.model != from->model; });
    const std::vector<redis::Event> run(from, to);
    from = to;
    std::vector<std::string> tenants;
    try {
      tenants = events.settle(run.front().model, run, p_.job_retention);
    } catch (const redis::IoError&) {
      throw;
    } catch (const std::exception& e) {
      // Left pending: claimed again after claim_idle. Logged, never fatal.
      log::error("completion handling failed",
                 {{"model", run.front().model}, {"entries", run.size()}, {"error", e.what()}});
      continue;
    }
    handled += static_cast<int>(run.size());
    for (size_t i = 0; i < run.size(); ++i) {
      const auto& ev = run[i];
      if (ev.job_id.empty()) continue;
      try {
        p_.settled(c, CompletionEvent{ev.model, ev.job_id, ev.status, ev.timings, ev.traceparent,
                                      tenants[i]});
      } catch (const redis::IoError&) {
        throw;
      } catch (const std::exception& e) {
        log::error("completion follow-up failed", {{"job_id", ev.job_id}, {"error", e.what()}});
      }
    }
  }
  return handled;
}

int CompletionConsumer::pass(std::chrono::milliseconds block) {
  auto& c = [this]() -> redis::Connection& {
    std::lock_guard lock(conn_mu_);
    return conn_.get();
  }();
  redis::EventLog events(c, p_.keys, kEventsGroup);
  ensure_groups(events);
  int handled = 0;
  auto now = std::chrono::steady_clock::now();
  if (now - last_claim_ >= p_.claim_idle / 2) {
    last_claim_ = now;
    for (const auto& model : p_.models)
      handled += handle(c, events, events.claim_idle(model, p_.consumer, p_.claim_idle, 100));
  }
  return handled + handle(c, events, events.read(p_.models, p_.consumer, 100, block));
}

void CompletionConsumer::run(std::stop_token stop) {
  Backoff backoff;
  auto last_error_log = std::chrono::steady_clock::time_point{};
  std::stop_callback on_stop(stop, [this] {
    std::lock_guard lock(conn_mu_);
    conn_.interrupt();
  });
  while (!stop.stop_requested()) {
    try {
      pass(std::chrono::milliseconds(1000));
      backoff.reset();
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(conn_mu_);
        conn_.reset();
      }
      if (stop.stop_requested()) break;  // (interrupted by the stop)
      groups_ready_ = false;             // a restarted Redis without persistence lost them
      auto now = std::chrono::steady_clock::now();
      if (now - last_error_log > std::chrono::minutes(1)) {
        log::warn("completion consumer: redis unavailable; retrying", {{"error", e.what()}});
        last_error_log = now;
      }
      if (!sleep_unless_stopped(backoff.next(), stop)) break;
    }
  }
}

}  // namespace relay::gateway
