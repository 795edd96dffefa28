#include "gateway/completion_consumer.hpp"

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
  for (const auto& ev : batch) {
    if (!ev.job_id.empty()) {
      try {
        p_.handle(c, CompletionEvent{ev.model, ev.job_id, ev.status, ev.timings, ev.traceparent});
      } catch (const redis::IoError&) {
        throw;
      } catch (const std::exception& e) {
        // Left pending: claimed again after claim_idle. Logged, never fatal.
        log::error("completion handling failed", {{"job_id", ev.job_id}, {"error", e.what()}});
        continue;
      }
    }
    events.ack(ev);
    ++handled;
  }
  return handled;
}

int CompletionConsumer::pass(std::chrono::milliseconds block) {
  auto& c = conn_.get();
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
  while (!stop.stop_requested()) {
    try {
      pass(std::chrono::milliseconds(1000));
      backoff.reset();
    } catch (const std::exception& e) {
      conn_.reset();
      groups_ready_ = false;  // a restarted Redis without persistence lost them
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
