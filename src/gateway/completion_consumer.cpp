#include "gateway/completion_consumer.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "common/backoff.hpp"
#include "common/log.hpp"
#include "redis/job_store.hpp"

namespace relay::gateway {

void CompletionConsumer::prepare(redis::Connection& c, redis::EventLog& events) {
  if (prepared_) return;
  for (const auto& model : p_.models) events.ensure_group(model);
  adopt_own_pending(c, events);
  prepared_ = true;
}

namespace {

// pass() starts no read once the stop has come (run() then ends the loop).
struct Stopping : std::runtime_error {
  Stopping() : std::runtime_error("stopping") {}
};

// A read over several streams returns each stream's entries together: one settle per model.
std::vector<std::vector<redis::Event>> by_model(const std::vector<redis::Event>& batch) {
  std::vector<std::vector<redis::Event>> runs;
  for (auto from = batch.begin(); from != batch.end();) {
    auto to =
        std::find_if(from, batch.end(), [&](const auto& e) { return e.model != from->model; });
    runs.emplace_back(from, to);
    from = to;
  }
  return runs;
}

}  // namespace

void CompletionConsumer::follow_up(redis::Connection& c, const std::vector<redis::Event>& run,
                                   const std::vector<std::string>& tenants) {
  log::Deferred lines;  // a line per job: written together
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> ended;  // by tenant
  for (size_t i = 0; i < run.size(); ++i) {
    const auto& ev = run[i];
    if (ev.job_id.empty()) continue;
    try {
      p_.settled(c, CompletionEvent{ev.model, ev.job_id, ev.status, ev.timings, ev.traceparent,
                                    tenants[i]});
    } catch (const std::exception& e) {
      // (A Redis failure here fails the next round trip too, which resets the connection.)
      log::error("completion follow-up failed", {{"job_id", ev.job_id}, {"error", e.what()}});
    }
    // (A record gone has no tenant: the reaper's sweep frees its slot.)
    if (p_.release_admissions && !tenants[i].empty())
      ended[tenants[i]].emplace_back(ev.model, ev.job_id);
  }
  for (const auto& [tenant, jobs] : ended)
    releases_.push_back(redis::JobStore::release_call(p_.keys, tenant, jobs));
}

void CompletionConsumer::adopt_own_pending(redis::Connection& c, redis::EventLog& events) {
  auto pending = events.parse_read(
      p_.models, c.pipeline({events.pending_call(p_.models, p_.consumer, kBatch)}).front().get());
  for (auto& e : pending)
    if (std::none_of(unsettled_.begin(), unsettled_.end(),
                     [&](const auto& u) { return u.model == e.model && u.entry_id == e.entry_id; }))
      unsettled_.push_back(std::move(e));
  // (handle() settles one run per model: a model's entries together.)
  std::stable_sort(unsettled_.begin(), unsettled_.end(),
                   [](const auto& a, const auto& b) { return a.model < b.model; });
}

int CompletionConsumer::settled(redis::Connection& c, const std::vector<redis::Event>& run,
                                const redisReply* reply) {
  std::vector<std::string> tenants;
  try {
    tenants = redis::EventLog::parse_settle(reply, run.size());
  } catch (const redis::IoError&) {  // refused for a passing state (LOADING, BUSY...): retried
    unsettled_.insert(unsettled_.end(), run.begin(), run.end());
    return 0;
  } catch (const std::exception& e) {
    // Left pending: claimed again after claim_idle. Logged, never fatal.
    log::error("completion handling failed",
               {{"model", run.front().model}, {"entries", run.size()}, {"error", e.what()}});
    return 0;
  }
  follow_up(c, run, tenants);
  return static_cast<int>(run.size());
}

int CompletionConsumer::handle(redis::Connection& c, redis::EventLog& events,
                               std::vector<redis::Event> batch,
                               std::optional<redis::Connection::Call> read,
                               redis::Reply* read_reply) {
  const auto runs = by_model(batch);
  // Releases first: in cluster mode their node is then visited before a read that may block.
  std::vector<redis::Connection::Call> calls = std::exchange(releases_, {});
  const size_t released = calls.size();
  calls.reserve(released + runs.size() + 1);
  for (const auto& run : runs)
    calls.push_back(events.settle_call(run.front().model, run, p_.job_retention));
  if (read) calls.push_back(std::move(*read));
  if (calls.empty()) return 0;
  std::vector<redis::Reply> replies;
  try {
    replies = c.pipeline(calls, /*checked=*/false);
  } catch (const std::exception&) {
    // The connection failed: the batch is settled again by the next pass (at no cost if it was),
    // and the releases are sent again.
    unsettled_.insert(unsettled_.end(), std::make_move_iterator(batch.begin()),
                      std::make_move_iterator(batch.end()));
    releases_.insert(releases_.begin(), std::make_move_iterator(calls.begin()),
                     std::make_move_iterator(calls.begin() + static_cast<long>(released)));
    throw;
  }
  for (size_t i = 0; i < released; ++i)
    if (replies[i] && replies[i]->type == REDIS_REPLY_ERROR)  // (the sweep frees them later)
      log::warn("quota slots not released",
                {{"tenant_key", calls[i].args[1]}, {"error", redis::as_string(replies[i].get())}});
  int handled = 0;
  for (size_t i = 0; i < runs.size(); ++i)
    handled += settled(c, runs[i], replies[released + i].get());
  if (read_reply) *read_reply = std::move(replies.back());
  return handled;
}

int CompletionConsumer::pass(std::chrono::milliseconds block) {
  auto& c = [this]() -> redis::Connection& {
    std::lock_guard lock(conn_mu_);
    if (stopping_) throw Stopping();
    return conn_.get();
  }();
  redis::EventLog events(c, p_.keys, kEventsGroup);
  prepare(c, events);
  int handled = 0;
  auto now = std::chrono::steady_clock::now();
  if (now - last_claim_ >= p_.claim_idle / 2) {
    last_claim_ = now;
    for (const auto& model : p_.models)
      handled += handle(c, events, events.claim_idle(model, p_.consumer, p_.claim_idle, kBatch));
  }

  // The batch the last pass read is settled in the round trip that waits for the next one.
  // Redis runs the settle at once (long-polls woken, webhooks scheduled, entries acknowledged);
  // only its follow-up here waits for the read's reply, so the read waits at most
  // kFollowUpWait while one is due.
  const auto wait = unsettled_.empty() ? block : std::min(block, kFollowUpWait);
  redis::Reply read;
  {
    std::optional<redis::BlockingRead> blocking;
    if (wait.count() > 0) blocking.emplace(c, wait);
    handled += handle(c, events, std::exchange(unsettled_, {}),
                      events.read_call(p_.models, p_.consumer, kBatch, wait), &read);
  }
  auto entries = events.parse_read(p_.models, read.get());  // (an error reply throws)
  unsettled_.insert(unsettled_.end(), std::make_move_iterator(entries.begin()),
                    std::make_move_iterator(entries.end()));
  return handled;
}

void CompletionConsumer::run(std::stop_token stop) {
  Backoff backoff;
  auto last_error_log = std::chrono::steady_clock::time_point{};
  bool failing = false;  // the last pass that ended before the stop failed
  {
    std::lock_guard lock(conn_mu_);
    stopping_ = false;  // (a consumer run again after a stop)
  }
  std::stop_callback on_stop(stop, [this] {
    std::lock_guard lock(conn_mu_);
    if (std::exchange(stopping_, true)) return;  // settle_at_stop() came first
    conn_.interrupt();
  });
  while (!stop.stop_requested()) {
    try {
      pass(std::chrono::milliseconds(1000));
      backoff.reset();
      failing = false;
      // Entries came, fewer than a batch: with relays at work more are on their way, and a
      // moment's wait lets them come in the next read, settled in one step (see kGather).
      if (!unsettled_.empty() && unsettled_.size() < static_cast<size_t>(kBatch) &&
          !sleep_unless_stopped(kGather, stop))
        break;
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(conn_mu_);
        conn_.reset();
      }
      if (stop.stop_requested()) break;  // (interrupted by the stop)
      failing = true;
      prepared_ = false;  // (a restarted Redis without persistence lost the groups)
      auto now = std::chrono::steady_clock::now();
      if (now - last_error_log > std::chrono::minutes(1)) {
        log::warn("completion consumer: redis unavailable; retrying", {{"error", e.what()}});
        last_error_log = now;
      }
      if (!sleep_unless_stopped(backoff.next(), stop)) break;
    }
  }
  if (unsettled_.empty() && failing) return;  // (Redis away: no connect timeout at exit)
  settle_at_stop();
}

void CompletionConsumer::settle_at_stop() {
  // The stop interrupted the round trip that settled the last batch read (or would have), or
  // a read whose entries Redis had already delivered when the connection was cut. So, on a
  // fresh connection, that batch and this consumer's own pending entries (which hold the
  // others) are settled once more (at no cost if they were) and followed up. With Redis away
  // they stay pending for another replica (after claim_idle).
  try {
    redis::Connection& c = [this]() -> redis::Connection& {
      std::lock_guard lock(conn_mu_);
      stopping_ = true;  // (a stop callback still to come leaves this connection alone)
      conn_.reset();
      return conn_.get();
    }();
    // (Within the gateway's exit grace: a paused Redis leaves them to another replica.)
    c.set_read_timeout(kStopWait);
    redis::EventLog events(c, p_.keys, kEventsGroup);
    adopt_own_pending(c, events);
    handle(c, events, std::exchange(unsettled_, {}));
    if (!releases_.empty()) handle(c, events, {});  // (the last batch's)
  } catch (const std::exception& e) {
    log::warn("completion consumer: the last batch read is left to another replica",
              {{"entries", unsettled_.size()}, {"error", e.what()}});
  }
}

}  // namespace relay::gateway
