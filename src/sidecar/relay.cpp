#include "sidecar/relay.hpp"

#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <thread>
#include <utility>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "common/log.hpp"
#include "common/random.hpp"
#include "common/thread_name.hpp"
#include "common/time.hpp"
#include "common/trace.hpp"
#include "redis/job_store.hpp"
#include "redis/retry.hpp"
#include "sidecar/cancel_listener.hpp"
#include "sidecar/heartbeat.hpp"
#include "sidecar/inference_client.hpp"
#include "sidecar/job_runner.hpp"
#include "sidecar/progress_endpoint.hpp"
#include "sidecar/retry_policy.hpp"
#include "sidecar/spool.hpp"

namespace relay::sidecar {
namespace {

using Clock = std::chrono::steady_clock;

// How long a give-back at shutdown waits for a Redis that is away (see process()).
constexpr std::chrono::milliseconds kGiveBackWait{5'000};

// The longest one BLMOVE of the idle path waits (see work()): an idle relay asks Redis again this
// often, and finds a master that stopped answering within it and kLeastReadWait.
constexpr std::chrono::milliseconds kPopSlice{5'000};

// The largest input read ahead of its job, into memory (as an answer that size is spooled).
constexpr std::size_t kPrefetchBytes = Spool::kMemoryLimit;

// Lease token: pod name + random, so that a lease names its holder and no two jobs share one.
std::string new_token(const std::string& pod) {
  return pod + "-" + random_hex(8);
}

// The "job finished" line, its outcome left for when it is written.
boost::json::object finished_line(const std::string& model, const JobRecord& job,
                                  const JobResult& result) {
  boost::json::object line{
      {"job_id", job.id},           {"model", model}, {"service_type", job.service_type},
      {"operation", job.operation}, {"outcome", ""},  {"timings_us", result.timings.micros()}};
  if (!result.error_code.empty()) {
    line["error_code"] = result.error_code;
    line["error"] = result.error_message.substr(0, 512);
  }
  return line;
}

// A finish's outcome as the job's log line names it: the status written, or why none was.
std::string outcome_name(redis::FinishOutcome fin, const redis::Completion& completion) {
  return fin == redis::FinishOutcome::ok ? std::string(to_string(completion.status))
                                         : std::string(redis::to_string(fin));
}

}  // namespace

// A job's last step sent ahead (relay.take_ahead), with its log line.
struct Relay::Finishing {
  redis::Completion completion;
  std::string token;
  boost::json::object line;  // "job finished", its outcome still to come
  std::string trace_id;
};

// A job whose model has answered, its result not stored yet: stored (and the job finished)
// once the model has the slot's next job (store_tail()). Until then the job is in hand as it
// was: in running_, its lease kept, its timeout armed.
struct Relay::Tail {
  JobRecord job;
  std::string token;
  std::unique_ptr<JobControl> control;
  std::unique_ptr<ScopedAlarm> limit;
  std::unique_ptr<log::TraceScope> traced;
  Answer answer;
};

// Steps sent on a slot's connection, their replies not read yet.
struct Relay::Inflight {
  redis::JobStore::Sent sent;
  std::optional<Finishing> finishing;
  Clock::time_point at;  // when sent: a job taken then has had its lease since
};

// One job at a time: a relay of concurrency 1 is one slot, on the main thread.
struct Relay::Slot {
  Slot(const redis::Endpoint& endpoint, std::unique_ptr<InferenceClient> client)
      : conn(endpoint), inference(std::move(client)) {}
  redis::LazyConnection conn;
  std::unique_ptr<InferenceClient> inference;  // its own keep-alive connection to the model
  // The ids last seen at the head of pending (for take), and a job taken by the previous
  // job's finish (already claimed).
  redis::TakeCandidates candidates;
  std::optional<redis::Taken> next;
  std::unique_ptr<JobControl> next_control;  // next's, when it was taken ahead
  Clock::time_point next_taken_at{};         // (then: when its take was sent)
  // relay.take_ahead: how long the model took over the slot's last job, and the steps sent on
  // conn whose replies are not read yet (settle(): while the model works on the next job).
  Clock::duration last_run = Clock::duration::max();
  std::optional<Inflight> inflight;
  // The last job's answer, stored while the model runs this one, and next's input, read then.
  std::optional<Tail> tail;
  std::optional<PrefetchedInput> prefetched;
  std::string spare_input;  // the last one's buffer
  // The model could not be reached (its server restarting, say): waited for, healthy, before
  // the slot takes another job.
  bool model_lost = false;
  // Guarded by Relay::mu_: where this slot's BLMOVE waits, for unblock_pops().
  bool popping = false;
  redis::BlockedClient pop_client;
};

Relay::Relay(Config config, std::unique_ptr<storage::Storage> storage,
             crypto::Encryption encryption)
    : cfg_(std::move(config)), storage_(std::move(storage)), enc_(std::move(encryption)) {
  if (!cfg_.progress_listen.empty())
    progress_ = std::make_unique<ProgressEndpoint>(cfg_.progress_listen);
  const auto endpoint = cfg_.redis_endpoint();
  for (std::int64_t i = 0; i < std::max<std::int64_t>(cfg_.concurrency, 1); ++i)
    slots_.push_back(std::make_unique<Slot>(
        endpoint, std::make_unique<InferenceClient>(cfg_.inference.url, cfg_.spool_dir, &alarms_)));
}

Relay::~Relay() = default;

void Relay::shutdown() {
  if (shutdown_.stop_requested()) return;
  log::info("shutdown requested");
  shutdown_.request_stop();
  {
    std::lock_guard lock(mu_);
    for (auto& [id, control] : running_) control->stop(StopReason::shutdown);
  }
  unblock_pops();
}

void Relay::end(int exit_code) {
  if (exit_code) exit_code_ = exit_code;
  if (ending_.request_stop()) unblock_pops();
}

bool Relay::ending() const {
  return shutdown_.stop_requested() || ending_.stop_requested();
}

bool Relay::claim() {
  if (cfg_.max_jobs == 0) return true;
  auto n = claimed_.load();
  do {
    if (n >= cfg_.max_jobs) return false;
  } while (!claimed_.compare_exchange_weak(n, n + 1));
  return true;
}

void Relay::unclaim() {
  if (cfg_.max_jobs != 0) --claimed_;
}

// Releases blocked BLMOVEs with CLIENT UNBLOCK (each then returns nil, as on timeout). Retried
// briefly because the signal may arrive just before a BLMOVE reaches the server; a slot checks
// for the end after it marks itself popping, so none starts waiting after this returns.
void Relay::unblock_pops() {
  for (const auto& slot : slots_) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      redis::BlockedClient client;
      {
        std::lock_guard lock(mu_);
        if (!slot->popping) break;
        client = slot->pop_client;
      }
      try {
        if (redis::unblock(client)) break;
      } catch (const std::exception& e) {
        log::warn("cannot unblock the queue wait", {{"error", e.what()}});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

bool Relay::wait_for_inference(InferenceClient& client) {
  const std::string url = cfg_.inference.url + cfg_.inference.health_path;
  const auto deadline = Clock::now() + cfg_.health_timeout;
  long last = -1;
  while (!shutdown_.stop_requested()) {
    long status = 0;
    try {
      status =
          client.probe(cfg_.inference.health_path, std::chrono::seconds(2), shutdown_.get_token());
    } catch (const Aborted&) {
      return false;
    }
    if (status == 200) {
      log::info("inference server healthy", {{"url", url}});
      return true;
    }
    if (status != last)
      log::info("waiting for the inference server", {{"url", url}, {"status", status}});
    last = status;
    if (Clock::now() >= deadline) {
      log::error("inference server not healthy before relay.health_timeout; exiting",
                 {{"url", url},
                  {"last_status", status},
                  {"health_timeout", format_duration(cfg_.health_timeout)}});
      return false;
    }
    sleep_unless_stopped(cfg_.health_interval, shutdown_.get_token());
  }
  return false;
}

int Relay::run(Ending ending) {
  log::info("relay starting", {{"model", cfg_.model},
                               {"pod", cfg_.pod_name},
                               {"max_jobs", cfg_.max_jobs},
                               {"concurrency", static_cast<std::int64_t>(slots_.size())}});
  const auto keys = cfg_.keys();
  const auto endpoint = cfg_.redis_endpoint();

  // Subscribed before the first BLMOVE, so no cancel for a job we take can be missed. The
  // listener subscribes on its own thread while the model is probed and the main connection
  // opens: its connection and round trips are off a one-shot relay's path to its job.
  CancelListener listener(
      {endpoint, keys.cancel_channel(cfg_.model), [this](const std::string& id) {
         std::lock_guard lock(mu_);
         if (auto it = running_.find(id); it != running_.end()) {
           log::info("cancel received", {{"job_id", id}});
           it->second->stop(StopReason::cancelled);
           return;
         }
         // Maybe a job this relay has taken and not yet registered (taken ahead: its take's
         // reply is read after the model's call): kept for hold(). Most are other relays' jobs,
         // so only the last kCancelsHeard.
         log::debug("cancel heard for no job running here; kept", {{"job_id", id}});
         if (cancels_heard_.insert(id).second) {
           cancels_order_.push_back(id);
           if (cancels_order_.size() > kCancelsHeard) {
             cancels_heard_.erase(cancels_order_.front());
             cancels_order_.pop_front();
           }
         }
       }});
  std::promise<void> subscribing;
  auto subscribed = subscribing.get_future();
  std::jthread listener_thread([&listener, &subscribing](std::stop_token st) {
    name_this_thread("cancel-listener");
    try {
      listener.subscribe();
    } catch (const std::exception& e) {  // (Redis down, or refusing us: the main connection says)
      log::warn("cannot subscribe to cancellations yet; the listener retries",
                {{"error", e.what()}});
    }
    subscribing.set_value();
    listener.run(st);
  });

  // Started now, while the model is probed: not a thread's start more on the way to the job.
  // (Its connection opens when it first beats.)
  redis::LazyConnection hb_conn(  // the heartbeat thread's
      endpoint.with_read_timeout(Heartbeat::beat_wait(cfg_.lease_ttl)));
  Heartbeat heartbeat({&hb_conn, keys, cfg_.model, cfg_.lease_ttl, cfg_.progress_interval,
                       cfg_.progress_webhook_interval});
  std::jthread heartbeat_thread([&heartbeat](std::stop_token st) {
    name_this_thread("heartbeat");
    heartbeat.run(st);
  });

  if (!wait_for_inference(*slots_.front()->inference)) return shutdown_.stop_requested() ? 0 : 1;

  // The first slot's connection waits for Redis; the others open theirs when they first need
  // it (and retry like any command). With its handshake it looks at the head of pending: when
  // jobs wait — a one-shot relay is started because they do (KEDA scales on pending) — its
  // first job is taken in one step (take.lua), not BLMOVE and then begin.lua: a round trip
  // less on the way to the job, and no moment holding it without a lease. The look is a hint:
  // refused (a Redis still loading its data), the first take is the idle path's BLMOVE.
  Slot& first = *slots_.front();
  try {
    auto conn = redis::connect_with_retry(
        endpoint, cfg_.health_timeout, shutdown_.get_token(),
        redis::JobStore::look_command(keys, cfg_.model, first.candidates));
    bool usable = true;
    try {
      first.candidates.looked(redis::as_strings(conn.read_reply().get()));
    } catch (const redis::ReplyError&) {
    } catch (const redis::TransientError& e) {
      usable = !e.new_connection();  // (a replica's READONLY: the slot connects anew)
    }
    if (usable) first.conn.adopt(std::move(conn));
  } catch (const redis::IoError& e) {
    if (shutdown_.stop_requested()) return 0;
    log::error("redis never came up; exiting", {{"error", e.what()}});
    return 1;
  }

  subscribed.wait();

  {
    // A surprise in one slot ends the relay (exit 1) after the others' jobs in hand, rather
    // than leave it running short of a slot.
    auto guarded = [this, &heartbeat](Slot& slot) {
      try {
        work(slot, heartbeat);
      } catch (const std::exception& e) {
        log::error("relay failed", {{"error", e.what()}});
        end(1);
      }
    };
    std::vector<std::jthread> others;
    for (size_t i = 1; i < slots_.size(); ++i)
      others.emplace_back([&guarded, this, i] {
        name_this_thread("slot-" + std::to_string(i));
        guarded(*slots_[i]);
      });
    guarded(*slots_.front());
  }  // (joined here)

  const std::int64_t jobs = done_;
  log::info("relay exiting", {{"jobs", jobs}, {"exit_code", exit_code_.load()}});
  if (ending == Ending::at_once) std::_Exit(exit_code_);
  // Both told first, then both waited for: they wind down at once, not one after the other.
  heartbeat_thread.request_stop();
  listener_thread.request_stop();
  heartbeat_thread.join();
  listener_thread.join();
  return exit_code_;
}

void Relay::work(Slot& slot, Heartbeat& heartbeat) {
  const auto keys = cfg_.keys();
  const auto retry_for = std::max(cfg_.lease_ttl, std::chrono::milliseconds(30'000));
  while (!ending()) {
    try {
      // (Not when max_jobs is reached: a one-shot relay whose model died with its job exits.)
      if (slot.model_lost && (cfg_.max_jobs == 0 || claimed_.load() < cfg_.max_jobs) &&
          !await_model(slot, heartbeat))
        break;
      // Busy path: a job is waiting (or was taken with the last finish, or ahead); move, lease
      // and mark it in one step. When the last look at the head of pending (this slot's last
      // finish or take, or the first slot's connect) saw none, the idle path instead: its
      // BLMOVE returns at once if a job came since, and a take would first have to look
      // again — a round trip for nothing while the queue stays empty (slots outnumbering the
      // jobs in flight: a round trip per job in four, issue 14's benchmark with 4 relays of 16
      // slots).
      if (!slot.next) settle(slot, heartbeat);
      auto taken = std::exchange(slot.next, std::nullopt);
      auto held = std::move(slot.next_control);
      if (!taken && !slot.candidates.ids.empty()) {
        if (!claim()) break;  // max_jobs reached (other slots may still be running theirs)
        taken = redis::with_retry(
            slot.conn, retry_for, shutdown_.get_token(), [&](redis::Connection& c) {
              return redis::JobStore(c, keys).take(cfg_.model, new_token(cfg_.pod_name),
                                                   cfg_.lease_ttl, slot.candidates);
            });
        if (!taken) unclaim();
      }
      if (taken) {
        if (process(slot, taken->record, taken->record.holder, heartbeat, std::move(held)) ==
            Step::stop)
          break;
        continue;
      }
      if (!claim()) break;
      const std::string token = new_token(cfg_.pod_name);
      // Idle path: the seed's BLMOVE, then the lease. It waits for queue_pop_timeout in
      // BLMOVEs of at most kPopSlice, each reply waited for kLeastReadWait past its block (pop):
      // a master that stops answering without closing the connection — a node gone without a
      // word, a partition, a frozen process — is left within seconds for a new connection
      // (after a failover, the new master), where one BLMOVE for all of queue_pop_timeout
      // (5 min) kept an idle relay on it, taking no job, until then.
      const auto idle_until = Clock::now() + cfg_.queue_pop_timeout;
      std::optional<std::string> id;
      while (!id && !ending()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(idle_until - Clock::now());
        if (left.count() <= 0) break;
        id = redis::with_retry(
            slot.conn, cfg_.health_timeout, shutdown_.get_token(), [&](redis::Connection& c) {
              // Where the BLMOVE will wait (the slot's master in cluster mode), for unblock_pops.
              auto client = c.blocking_client(keys.pending(cfg_.model));
              {
                std::lock_guard lock(mu_);
                slot.popping = true;
                slot.pop_client = std::move(client);
              }
              struct Clear {
                Relay* r;
                Slot& s;
                ~Clear() {
                  std::lock_guard lock(r->mu_);
                  s.popping = false;
                }
              } clear{this, slot};
              if (ending()) return std::optional<std::string>{};
              return redis::JobStore(c, keys).pop(cfg_.model, std::min(left, kPopSlice));
            });
      }
      if (!id) {
        unclaim();
        if (ending()) break;
        // The queue stayed empty for queue_pop_timeout. With other slots' jobs still in hand
        // the relay is not idle: this slot waits again.
        if (busy_ > 0) continue;
        if (ending_.request_stop()) {  // (said once, by the first slot to find it so)
          log::info("queue empty: no job within queue_pop_timeout; exiting",
                    {{"model", cfg_.model},
                     {"queue_pop_timeout", format_duration(cfg_.queue_pop_timeout)}});
          unblock_pops();
        }
        break;
      }
      auto begun = redis::with_retry(slot.conn, retry_for, {}, [&](redis::Connection& c) {
        return redis::JobStore(c, keys).begin(cfg_.model, *id, token, cfg_.lease_ttl);
      });
      if (begun.outcome != redis::BeginOutcome::ok) {
        unclaim();
        // (An ended job's id is expected here: one cancelled or expired deep in a long queue is
        // left there for a take to drop: see cancel.lua.)
        if (begun.outcome == redis::BeginOutcome::missing)
          log::warn("dequeued a job whose record is missing; dropped from processing",
                    {{"job_id", *id}});
        else
          log::info("dequeued a job that had ended; dropped from processing", {{"job_id", *id}});
        continue;
      }
      if (process(slot, begun.record, token, heartbeat, nullptr) == Step::stop) break;
    } catch (const redis::IoError& e) {
      // A job in hand stays in processing; its lease (if any) expires and the reaper requeues it.
      log::error("redis unavailable for too long; exiting", {{"error", e.what()}});
      end(1);
      break;
    } catch (const Aborted&) {
      break;  // shutdown while waiting for Redis
    }
  }
  // The loop may end with a job taken ahead in slot.next and the steps of the job before it
  // still to be read (settle() gives back a job they took).
  settle(slot, heartbeat);
  give_back_next(slot, heartbeat);
}

bool Relay::await_model(Slot& slot, Heartbeat& heartbeat) {
  // A job taken ahead would wait for the model here, its lease kept: it goes back to pending,
  // for a relay whose model is up.
  settle(slot, heartbeat);
  if (slot.next) {
    const std::string id = slot.next->id;
    if (give_back_next(slot, heartbeat))
      log::info("job taken ahead given back: the model is unreachable", {{"job_id", id}});
    unclaim();
  }
  log::warn("inference server unreachable; waiting for it to be healthy before the next job",
            {{"url", cfg_.inference.url + cfg_.inference.health_path},
             {"health_timeout", format_duration(cfg_.health_timeout)}});
  if (!wait_for_inference(*slot.inference)) {
    if (!shutdown_.stop_requested()) end(1);  // (it said why)
    return false;
  }
  slot.model_lost = false;
  return true;
}

bool Relay::give_back_next(Slot& slot, Heartbeat& heartbeat) {
  slot.prefetched.reset();
  return give_back(slot.next, slot.next_control, slot, heartbeat);
}

bool Relay::give_back(std::optional<redis::Taken>& job, std::unique_ptr<JobControl>& control,
                      Slot& slot, Heartbeat& heartbeat) {
  if (!job) return false;
  const std::string id = job->id;
  if (control) {
    heartbeat.unwatch(id);
    std::lock_guard lock(mu_);
    running_.erase(id);
  }
  // Taken and not run (a shutdown, or held ahead behind a job that ran long): back to the front
  // of pending at once.
  bool given = false;
  try {
    given =
        redis::JobStore(slot.conn.get(), cfg_.keys()).give_back(cfg_.model, id, job->record.holder);
  } catch (const std::exception& e) {
    slot.conn.reset();
    log::warn("a job taken but not run could not be given back: left to the reaper",
              {{"job_id", id}, {"error", e.what()}});
  }
  job.reset();
  control.reset();
  return given;
}

bool Relay::takes_ahead(const Slot& slot) const {
  // Short jobs only (a long one's next job would wait in this relay, out of reach of a relay
  // starting meanwhile), only with a backlog (the head of pending as the last take or finish saw
  // it: with none, a take ahead would be a round trip for nothing).
  return cfg_.take_ahead.count() > 0 && slot.last_run < cfg_.take_ahead &&
         !slot.candidates.ids.empty() && !ending();
}

void Relay::send_ahead(Slot& slot, Heartbeat& heartbeat, std::optional<Finishing> finishing,
                       bool take) {
  take = take && !ending() && claim();
  try {
    auto sent = redis::JobStore(slot.conn.get(), cfg_.keys())
                    .send_steps(cfg_.model, finishing ? &finishing->completion : nullptr,
                                finishing ? finishing->token : std::string(),
                                take ? new_token(cfg_.pod_name) : std::string(), cfg_.lease_ttl,
                                slot.candidates);
    if (take && !sent.take) unclaim();
    slot.inflight = Inflight{sent, std::move(finishing), Clock::now()};
  } catch (const redis::IoError& e) {
    // Not sent, or not whole: the outcome is written the usual way (its first try may have
    // run), the take dropped (if it ran, its job comes back by the reaper).
    slot.conn.reset();
    if (take) unclaim();
    if (finishing)
      slot.inflight = Inflight{
          {.finish = true, .take = false, .taking = {}}, std::move(finishing), Clock::now()};
    settle_sent(slot, heartbeat, /*lost=*/true);
  }
}

void Relay::settle(Slot& slot, Heartbeat& heartbeat, bool lost, bool ahead) {
  settle_sent(slot, heartbeat, lost);
  if (!slot.tail) return;
  // (After the replies due: the tail's steps use the connection.)
  store_tail(slot, heartbeat, ahead);
  settle_sent(slot, heartbeat);  // what its finish sent, if a job taken ahead waited
}

void Relay::settle_sent(Slot& slot, Heartbeat& heartbeat, bool lost) {
  if (!slot.inflight) return;
  Inflight in = std::move(*slot.inflight);
  slot.inflight.reset();
  std::optional<redis::FinishOutcome> fin;
  std::optional<redis::Taken> next;
  if (!lost) {
    try {
      redis::JobStore store(slot.conn.get(), cfg_.keys());
      fin = store.receive_steps(in.sent, slot.candidates, next);
      if (fin == redis::FinishOutcome::ok) store.require_replicas(cfg_.redis.wait_replicas);
    } catch (const redis::IoError& e) {
      // The outcome is written again below. A take whose reply was read is ours to run, even
      // with the finish refused; one lost with the connection comes back by the reaper.
      slot.conn.reset();
      lost = true;
    }
  }
  if (in.sent.take && !next) unclaim();
  if (in.finishing) {
    std::optional<log::TraceScope> traced;
    if (!in.finishing->trace_id.empty())
      traced.emplace(in.finishing->completion.job_id, in.finishing->trace_id);
    auto& line = in.finishing->line;
    if (lost || !fin)
      line["outcome"] = write_outcome(slot.conn, slot.candidates, in.finishing->completion,
                                      in.finishing->token, nullptr, /*again=*/true);
    else
      line["outcome"] = outcome_name(*fin, in.finishing->completion);
    log::info("job finished", line);
  }
  if (!next) return;
  auto control = held_control(*next, heartbeat, in.at);
  if (slot.next) {
    // (The end of work(): a job taken ahead is waiting already. This one, taken after it, goes
    // back first, to stay behind it at the front of pending.)
    give_back(next, control, slot, heartbeat);
    return;
  }
  slot.next = std::move(next);
  slot.next_control = std::move(control);
  slot.next_taken_at = in.at;
}

void Relay::hold(const JobRecord& job, JobControl& control) {
  std::lock_guard lock(mu_);
  running_[job.id] = &control;
  // (The first reason wins: a cancel before a shutdown.)
  if (job.cancel_requested || cancels_heard_.contains(job.id)) control.stop(StopReason::cancelled);
  if (shutdown_.stop_requested()) control.stop(StopReason::shutdown);  // (after shutdown()'s)
}

Relay::Step Relay::process(Slot& slot, const JobRecord& job, const std::string& token,
                           Heartbeat& heartbeat, std::unique_ptr<JobControl> held) {
  const auto keys = cfg_.keys();
  auto& conn = slot.conn;
  ++done_;
  const std::string& job_id = job.id;

  // (A job taken ahead has its control already, in running_ since its take's reply was read.)
  auto owned = held ? std::move(held) : std::make_unique<JobControl>();
  JobControl& control = *owned;
  // Every log line about this job carries its trace_id while it is in hand.
  std::unique_ptr<log::TraceScope> traced;
  if (auto trace = parse_traceparent(job.traceparent))
    traced = std::make_unique<log::TraceScope>(job_id, trace->trace_id);
  ++busy_;
  struct Idle {
    std::atomic<int>& busy;
    ~Idle() { --busy; }
  } idle{busy_};
  hold(job, control);
  std::exception_ptr unsettled;  // from reading what was sent ahead, while the model worked

  JobResult result;
  heartbeat.watch(job_id, token, &control, job.wants_webhook("progress"));
  // Until the job's end here — or an exception leaving process() — the listener and the
  // heartbeat know the job (and its control, which goes with this call).
  struct Registered {
    Relay& relay;
    Heartbeat& heartbeat;
    const std::string& id;
    bool on = true;
    void release() {
      if (std::exchange(on, false)) relay.release(id, heartbeat);
    }
    ~Registered() { release(); }
  } registered{*this, heartbeat, job_id};
  if (job.wants_webhook("started")) {
    settle(slot, heartbeat);  // (the connection is this step's: what was sent ahead is read first)
    // Advisory, like progress: one try, and the job goes on whatever happens.
    try {
      redis::JobStore(conn.get(), keys)
          .schedule_webhook(cfg_.model, job_id, redis::WebhookEvent::started,
                            token.substr(token.rfind('-') + 1));
    } catch (const redis::IoError& e) {
      conn.reset();
      log::warn("started webhook not scheduled", {{"job_id", job_id}, {"error", e.what()}});
    }
  }
  // The model reports progress to its own URL for this job until the job ends here.
  std::string progress_url;
  if (progress_)
    progress_url = progress_->open(
        [&heartbeat, &job_id](ProgressReport r) { heartbeat.report(job_id, std::move(r)); });
  struct CloseProgress {
    ProgressEndpoint* p;
    const std::string& url;
    ~CloseProgress() {
      if (p) p->close(url);
    }
  } close_progress{progress_.get(), progress_url};
  // The execution limit: when it passes, the job stops as for a cancel, and fails timed_out.
  std::unique_ptr<ScopedAlarm> limit;
  if (job.timeout)
    limit = std::make_unique<ScopedAlarm>(alarms_, Clock::now() + *job.timeout,
                                          [&control] { control.stop(StopReason::timed_out); });
  if (job.expires_at && wall_now() >= *job.expires_at && !control.token().stop_requested()) {
    // Not started within its ttl (the gateway's sweep had not reached it yet): it never runs.
    result.disposition = Disposition::failed;
    result.error_code = "expired";
    result.error_message = "not started within its ttl";
  } else if (control.token().stop_requested()) {
    // Cancelled, shut down or its lease lost before it started: nothing to run.
    result.disposition = control.reason() == StopReason::cancelled    ? Disposition::cancelled
                         : control.reason() == StopReason::lease_lost ? Disposition::abandoned
                                                                      : Disposition::given_back;
  } else {
    // With a backlog and short jobs, the next job is taken while the model runs this one (with
    // the last job's finish, when its result is still to be stored: store_tail()).
    if (!slot.inflight && !slot.next && !slot.tail && takes_ahead(slot))
      send_ahead(slot, heartbeat, std::nullopt, true);
    // What was sent ahead is read while the model works on this job (the replies are there by
    // then): a job taken ahead is registered for cancels and its lease within a round trip of
    // its take, not after this job. It waits for this job at most take_ahead from its take:
    // if the model has not answered by then, this job is not a short one after all, and the
    // job taken ahead goes back to the front of pending, for a relay that is free.
    // The last job's result is stored and its outcome written then too, and the input of the
    // job taken ahead read: the model waits for neither storage nor Redis between two jobs.
    ModelAtWork while_model_works;
    if (slot.inflight || slot.next || slot.tail) {
      while_model_works.sent = [&]() -> std::optional<Clock::time_point> {
        try {
          settle(slot, heartbeat, /*lost=*/false, /*ahead=*/true);
          prefetch_next(slot);
        } catch (...) {
          unsettled = std::current_exception();
          return std::nullopt;
        }
        if (!slot.next_control) return std::nullopt;
        return slot.next_taken_at + cfg_.take_ahead;
      };
      while_model_works.late = [&] {
        try {
          if (!slot.next) return;
          const std::string id = slot.next->id;
          if (give_back_next(slot, heartbeat))
            log::info("job taken ahead given back: the job before it runs longer than take_ahead",
                      {{"job_id", id}, {"take_ahead", format_duration(cfg_.take_ahead)}});
          unclaim();
        } catch (...) {
          unsettled = std::current_exception();
        }
      };
    }
    const auto began = Clock::now();
    auto input = std::exchange(slot.prefetched, std::nullopt);
    auto ran = run_model(cfg_, *storage_, *slot.inference, enc_, job, control, progress_url,
                         std::move(while_model_works), input ? &*input : nullptr);
    if (input) slot.spare_input = std::move(input->bytes);  // (its memory, for the next one)
    slot.last_run = Clock::now() - began;
    if (auto* answer = std::get_if<Answer>(&ran)) {
      control.storing();
      if (slot.next && !unsettled && !ending() && !control.token().stop_requested()) {
        // A job taken ahead waits: it goes to the model first, and this one's result is stored
        // while the model works on it. This job stays in hand meanwhile.
        if (progress_) progress_->close(progress_url);
        registered.on = false;  // (store_tail() releases it)
        slot.tail = Tail{
            job, token, std::move(owned), std::move(limit), std::move(traced), std::move(*answer)};
        return Step::next;
      }
      result = store_answer(*storage_, enc_, job, control, std::move(*answer),
                            cfg_.storage_retry_timeout);
    } else {
      result = std::get<JobResult>(std::move(ran));
    }
  }
  limit.reset();  // disarmed (or rung): no timeout lands on the next job
  if (progress_) progress_->close(progress_url);  // before unwatch: no report after it
  registered.release();
  if (unsettled) std::rethrow_exception(unsettled);
  settle(slot, heartbeat);  // the job before's last step, and the job taken ahead, if any
  return conclude(slot, heartbeat, job, token, std::move(result), &slot.next);
}

void Relay::release(const std::string& job_id, Heartbeat& heartbeat) {
  heartbeat.unwatch(job_id);
  std::lock_guard lock(mu_);
  running_.erase(job_id);
}

void Relay::store_tail(Slot& slot, Heartbeat& heartbeat, bool ahead) {
  if (!slot.tail) return;
  Tail tail = std::move(*slot.tail);
  slot.tail.reset();
  JobResult result = store_answer(*storage_, enc_, tail.job, *tail.control, std::move(tail.answer),
                                  cfg_.storage_retry_timeout);
  tail.limit.reset();
  release(tail.job.id, heartbeat);
  // The finish takes the slot's next job with it: in the model's time (ahead), only while jobs
  // are short and some wait, as take-ahead would; else as any finish does.
  const auto at = Clock::now();
  const bool take = !slot.next && (!ahead || takes_ahead(slot));
  conclude(slot, heartbeat, tail.job, tail.token, std::move(result), take ? &slot.next : nullptr);
  if (slot.next && !slot.next_control) {
    // Taken while the slot has a job in hand (the model works on it, or is about to): it waits
    // as one taken ahead does — a cancel reaches it, its lease is kept, late() may give it back.
    slot.next_control = held_control(*slot.next, heartbeat, at);
    slot.next_taken_at = at;
  }
}

std::unique_ptr<JobControl> Relay::held_control(const redis::Taken& job, Heartbeat& heartbeat,
                                                Clock::time_point taken_at) {
  // The job is this relay's since its take: a cancel reaches it from now on (one heard in the
  // meantime was kept), and its lease is kept — at once if a beat has come due since.
  auto control = std::make_unique<JobControl>();
  hold(job.record, *control);
  heartbeat.watch(job.id, job.record.holder, control.get(), false, taken_at);
  return control;
}

void Relay::prefetch_next(Slot& slot) {
  if (!slot.next || !slot.next_control) return;
  if (slot.prefetched && slot.prefetched->job_id == slot.next->id) return;
  // (An encrypted input's limit is that of its plaintext, sealed.)
  const auto& job = slot.next->record;
  const std::size_t limit =
      job.key_id.empty() ? kPrefetchBytes : crypto::ciphertext_size(kPrefetchBytes, enc_.params);
  slot.prefetched = prefetch_input(*storage_, job, limit, slot.next_control->token(),
                                   std::move(slot.spare_input));
}

Relay::Step Relay::conclude(Slot& slot, Heartbeat& heartbeat, const JobRecord& job,
                            const std::string& token, JobResult result,
                            std::optional<redis::Taken>* next) {
  const auto keys = cfg_.keys();
  auto& conn = slot.conn;
  const std::string& job_id = job.id;
  const auto retry_for = std::max(cfg_.lease_ttl, std::chrono::milliseconds(30'000));
  // The last step: one script writes the outcome (or gives the job back).
  std::string outcome;
  // The model gone (refused, or dropped the request mid-way): the slot waits for it, healthy,
  // before it takes another job — not fail each job it takes while the model restarts.
  if (result.disposition == Disposition::model_away || result.error_code == "inference_unreachable")
    slot.model_lost = true;
  if (result.disposition == Disposition::given_back ||
      result.disposition == Disposition::model_away) {
    // The pod is being stopped (Kubernetes gives it terminationGracePeriodSeconds, 30 s in the
    // chart): a Redis that is away is waited for a few seconds, not retry_for. Without the give-
    // back the job is what a crash leaves — its lease expires and the reaper requeues it.
    // (The model away: the same, and the relay goes on once it is back.)
    // A job taken ahead goes back first, to stay behind this one at the front of pending.
    if (slot.next) {
      give_back_next(slot, heartbeat);
      unclaim();
    }
    try {
      bool ok = redis::with_retry(conn, kGiveBackWait, {}, [&](redis::Connection& c) {
        return redis::JobStore(c, keys).give_back(cfg_.model, job_id, token);
      });
      outcome = ok ? "given_back" : "lease_lost";
    } catch (const redis::IoError& e) {
      conn.reset();
      outcome = "left_to_the_reaper";
      log::warn("job not given back, Redis unavailable: left to the reaper",
                {{"job_id", job_id}, {"error", e.what()}});
    }
  } else if (result.disposition == Disposition::abandoned) {
    outcome = "lease_lost";
  } else if (auto delay = retry_delay(job, result, random_unit())) {
    // A failure that may pass, with attempts left: the job waits for its retry (no event, no
    // webhook: those come with the final outcome).
    const auto due = wall_now() + *delay;
    const std::string failures = failures_with(job, result, wall_now());
    auto fin = redis::with_retry(
        conn, retry_for, {},
        [&](redis::Connection& c) {
          return redis::JobStore(c, keys).retry(cfg_.model, job_id, token, due, failures);
        },
        {}, outcome_patience(conn, job_id, token));
    outcome = fin == redis::FinishOutcome::ok ? "retrying" : std::string(redis::to_string(fin));
  } else {
    // Submission to now, for the gateway's end-to-end histogram (and the job's timings).
    if (job.created_at)
      result.timings.set(
          "end_to_end",
          std::chrono::duration<double, std::milli>(wall_now() - *job.created_at).count());
    const redis::Completion completion{
        .job_id = job_id,
        .model = cfg_.model,
        .service_type = job.service_type,
        .status = result.disposition == Disposition::completed   ? JobStatus::completed
                  : result.disposition == Disposition::cancelled ? JobStatus::cancelled
                                                                 : JobStatus::failed,
        .finished_at = wall_now(),
        .result_key = result.result_key,
        .result_content_type = result.result_content_type,
        .error_code = result.error_code,
        .error_message = result.error_message,
        .timings = result.timings.json(),
        // With retries, the record keeps every failed attempt, the last one included.
        .failures = job.max_attempts && result.disposition == Disposition::failed
                        ? failures_with(job, result, wall_now())
                        : std::string()};
    if (slot.next) {
      // A job taken ahead waits: it goes to the model now, and this one's outcome (with the
      // take of the job after it, while jobs are short) is sent meanwhile, its reply read when
      // the model has answered (settle(), which logs this job's line).
      Finishing f{completion, token, finished_line(cfg_.model, job, result), {}};
      if (auto trace = parse_traceparent(job.traceparent)) f.trace_id = trace->trace_id;
      send_ahead(slot, heartbeat, std::move(f), takes_ahead(slot));
      return Step::next;
    }
    outcome = write_outcome(conn, slot.candidates, completion, token, next);
  }

  auto line = finished_line(cfg_.model, job, result);
  line["outcome"] = outcome;
  log::info("job finished", line);
  // The job never reached the model: not one of max_jobs (a one-shot relay takes a job again
  // once the model is back).
  if (result.disposition == Disposition::model_away) unclaim();
  // After a give-back the process is shutting down; otherwise carry on.
  return result.disposition == Disposition::given_back ? Step::stop : Step::next;
}

std::function<std::optional<std::chrono::milliseconds>(const redis::TransientError&)>
Relay::outcome_patience(redis::LazyConnection& conn, const std::string& job_id,
                        const std::string& token) {
  using Wait = std::optional<std::chrono::milliseconds>;
  // SIGTERM does not end the wait: the model's work is in hand, and giving up would leave the
  // job to be reaped and run again. The pod's grace period (its SIGKILL) bounds it instead.
  return [this, &conn, job_id, token,
          told = false](const redis::TransientError& e) mutable -> Wait {
    if (!e.out_of_memory()) return std::nullopt;
    if (shutdown_.stop_requested() && !told) {
      log::info("stopping once the job's outcome is written (Redis is out of memory)",
                {{"job_id", job_id}});
      told = true;
    }
    // (The heartbeat let go of the job when it ended.) A lease found lost is the finish's to
    // say, on its next try: it checks it before writing anything.
    try {
      redis::JobStore(conn.get(), cfg_.keys()).heartbeat(cfg_.model, job_id, token, cfg_.lease_ttl);
    } catch (const redis::IoError&) {
      conn.reset();  // (the step's next try says what is wrong)
    }
    return cfg_.lease_ttl / 3;
  };
}

std::string Relay::write_outcome(redis::LazyConnection& conn, redis::TakeCandidates& candidates,
                                 const redis::Completion& completion, const std::string& token,
                                 std::optional<redis::Taken>* next, bool again) {
  const auto keys = cfg_.keys();
  const auto retry_for = std::max(cfg_.lease_ttl, std::chrono::milliseconds(30'000));
  // A retried finish may find the job terminal by its own first attempt (the reply was lost,
  // or too few replicas acknowledged it in time): the lease was ours until then, so nobody
  // else could have ended it — that is this outcome, written.
  // The next job is taken in the same round trip, unless this relay stops after this one.
  // A retry finishes only. The first try's take may have run: its job is in *next when its
  // reply was read (Redis may refuse the finish and run the take), and comes back by the
  // reaper when the reply was lost with the connection, like any take's.
  const bool take_next = next && !ending() && claim();
  bool retried = again;
  auto fin = redis::with_retry(
      conn, retry_for, {},
      [&](redis::Connection& c) {
        redis::JobStore store(c, keys);
        redis::FinishOutcome f;
        if (take_next && !retried && !shutdown_.stop_requested()) {
          // (*next is set even when the finish is refused: its retry below does not take.)
          f = store.finish_and_take(completion, token, new_token(cfg_.pod_name), cfg_.lease_ttl,
                                    candidates, *next);
        } else {
          f = store.finish(completion, token, &candidates);
        }
        if (f == redis::FinishOutcome::ok || (retried && f == redis::FinishOutcome::terminal))
          store.require_replicas(cfg_.redis.wait_replicas);
        return f;
      },
      [&](int) { retried = true; }, outcome_patience(conn, completion.job_id, token));
  if (take_next && !*next) unclaim();  // no job waited
  if (retried && fin == redis::FinishOutcome::terminal) fin = redis::FinishOutcome::ok;
  return outcome_name(fin, completion);
}

}  // namespace relay::sidecar
