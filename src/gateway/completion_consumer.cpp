#include "gateway/completion_consumer.hpp"

#include <thread>

#include "common/backoff.hpp"
#include "common/log.hpp"

namespace relay::gateway {

void CompletionConsumer::ensure_groups(redis::Connection& c) {
  if (groups_ready_) return;
  for (const auto& model : p_.models) {
    try {
      // From the stream's start ("0"): completions written while no gateway ran are not lost.
      c.command({"XGROUP", "CREATE", p_.keys.events(model), kEventsGroup, "0", "MKSTREAM"});
    } catch (const redis::ReplyError& e) {
      if (std::string_view(e.what()).find("BUSYGROUP") == std::string_view::npos) throw;
    }
  }
  groups_ready_ = true;
}

int CompletionConsumer::handle_entries(redis::Connection& c, const std::string& model,
                                       const std::string& stream, const redisReply* entries) {
  int handled = 0;
  for (size_t i = 0; entries && entries->type == REDIS_REPLY_ARRAY && i < entries->elements; ++i) {
    const redisReply* entry = entries->element[i];
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2) continue;
    std::string entry_id = redis::as_string(entry->element[0]);
    CompletionEvent ev{model, {}, {}};
    const redisReply* fields = entry->element[1];
    for (size_t f = 0; fields && fields->type == REDIS_REPLY_ARRAY && f + 1 < fields->elements;
         f += 2) {
      std::string k = redis::as_string(fields->element[f]);
      if (k == "job_id")
        ev.job_id = redis::as_string(fields->element[f + 1]);
      else if (k == "status")
        ev.status = redis::as_string(fields->element[f + 1]);
    }
    if (!ev.job_id.empty()) {
      try {
        p_.handle(c, ev);
      } catch (const redis::IoError&) {
        throw;
      } catch (const std::exception& e) {
        // Left pending: claimed again after claim_idle. Logged, never fatal.
        log::error("completion handling failed", {{"job_id", ev.job_id}, {"error", e.what()}});
        continue;
      }
    }
    c.command({"XACK", stream, kEventsGroup, entry_id});
    ++handled;
  }
  return handled;
}

int CompletionConsumer::pass(std::chrono::milliseconds block) {
  auto& c = conn_.get();
  ensure_groups(c);
  int handled = 0;
  auto now = std::chrono::steady_clock::now();
  if (now - last_claim_ >= p_.claim_idle / 2) {
    last_claim_ = now;
    for (const auto& model : p_.models) {
      auto stream = p_.keys.events(model);
      auto r = c.command({"XAUTOCLAIM", stream, kEventsGroup, p_.consumer,
                          std::to_string(p_.claim_idle.count()), "0-0", "COUNT", "100"});
      if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2)
        handled += handle_entries(c, model, stream, r->element[1]);
    }
  }
  std::vector<std::string> argv{"XREADGROUP", "GROUP", kEventsGroup, p_.consumer, "COUNT", "100"};
  if (block.count() > 0) {
    argv.push_back("BLOCK");
    argv.push_back(std::to_string(block.count()));
  }
  argv.push_back("STREAMS");
  for (const auto& m : p_.models) argv.push_back(p_.keys.events(m));
  for (size_t i = 0; i < p_.models.size(); ++i) argv.push_back(">");
  c.set_read_timeout(block + std::chrono::seconds(30));
  auto r = c.command(argv);
  c.set_read_timeout(std::chrono::seconds(30));
  if (r->type != REDIS_REPLY_ARRAY) return handled;  // nil: nothing new
  for (size_t s = 0; s < r->elements; ++s) {
    const redisReply* per_stream = r->element[s];
    if (per_stream->type != REDIS_REPLY_ARRAY || per_stream->elements != 2) continue;
    std::string stream = redis::as_string(per_stream->element[0]);
    std::string model;
    for (const auto& m : p_.models)
      if (p_.keys.events(m) == stream) model = m;
    handled += handle_entries(c, model, stream, per_stream->element[1]);
  }
  return handled;
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
