#include "sidecar/relay.hpp"

#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <condition_variable>
#include <future>
#include <thread>
#include <utility>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "common/log.hpp"
#include "common/random.hpp"
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

namespace relay::sidecar {
namespace {

using Clock = std::chrono::steady_clock;

// Lease token: pod name + random, so that a lease names its holder and no two jobs share one.
std::string new_token(const std::string& pod) {
  return pod + "-" + random_hex(8);
}

}  // namespace

Relay::Relay(Config config, std::unique_ptr<storage::Storage> storage,
             crypto::Encryption encryption)
    : cfg_(std::move(config)),
      storage_(std::move(storage)),
      inference_(std::make_unique<InferenceClient>(cfg_.inference.url, cfg_.spool_dir, &alarms_)),
      enc_(std::move(encryption)) {
  if (!cfg_.progress_listen.empty())
    progress_ = std::make_unique<ProgressEndpoint>(cfg_.progress_listen);
}

Relay::~Relay() = default;

void Relay::shutdown() {
  if (shutdown_.stop_requested()) return;
  log::info("shutdown requested");
  shutdown_.request_stop();
  {
    std::lock_guard lock(mu_);
    if (current_) current_->stop(StopReason::shutdown);
  }
  unblock_pop();
}

// Releases a blocked BLMOVE with CLIENT UNBLOCK (it then returns nil, as on timeout). Retried
// briefly because the signal may arrive just before the BLMOVE reaches the server.
void Relay::unblock_pop() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    redis::BlockedClient client;
    {
      std::lock_guard lock(mu_);
      if (!popping_) return;
      client = pop_client_;
    }
    try {
      if (redis::unblock(client)) return;
    } catch (const std::exception& e) {
      log::warn("cannot unblock the queue wait", {{"error", e.what()}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Relay::wait_for_inference() {
  const std::string url = cfg_.inference.url + cfg_.inference.health_path;
  const auto deadline = Clock::now() + cfg_.health_timeout;
  long last = -1;
  while (!shutdown_.stop_requested()) {
    long status = 0;
    try {
      status = inference_->probe(cfg_.inference.health_path, std::chrono::seconds(2),
                                 shutdown_.get_token());
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

int Relay::run() {
  log::info("relay starting",
            {{"model", cfg_.model}, {"pod", cfg_.pod_name}, {"max_jobs", cfg_.max_jobs}});
  const auto keys = cfg_.keys();
  const auto endpoint = cfg_.redis_endpoint();

  // Subscribed before the first BLMOVE, so no cancel for a job we take can be missed. The
  // listener subscribes on its own thread while the model is probed and the main connection
  // opens: its connection and round trips are off a one-shot relay's path to its job.
  CancelListener listener(
      {endpoint, keys.cancel_channel(cfg_.model), [this](const std::string& id) {
         std::lock_guard lock(mu_);
         if (current_ && id == current_id_) {
           log::info("cancel received", {{"job_id", id}});
           current_->stop(StopReason::cancelled);
         }
       }});
  std::promise<void> subscribing;
  auto subscribed = subscribing.get_future();
  std::jthread listener_thread([&listener, &subscribing](std::stop_token st) {
    try {
      listener.subscribe();
    } catch (const std::exception& e) {  // (Redis down, or refusing us: the main connection says)
      log::warn("cannot subscribe to cancellations yet; the listener retries",
                {{"error", e.what()}});
    }
    subscribing.set_value();
    listener.run(st);
  });

  if (!wait_for_inference()) return shutdown_.stop_requested() ? 0 : 1;

  redis::LazyConnection main_conn(endpoint);
  try {
    main_conn.adopt(
        redis::connect_with_retry(endpoint, cfg_.health_timeout, shutdown_.get_token()));
  } catch (const redis::IoError& e) {
    if (shutdown_.stop_requested()) return 0;
    log::error("redis never came up; exiting", {{"error", e.what()}});
    return 1;
  }

  subscribed.wait();

  redis::LazyConnection hb_conn(endpoint);  // the heartbeat thread's
  Heartbeat heartbeat({&hb_conn, keys, cfg_.model, cfg_.lease_ttl, cfg_.progress_interval,
                       cfg_.progress_webhook_interval});
  std::jthread heartbeat_thread([&heartbeat](std::stop_token st) { heartbeat.run(st); });

  std::int64_t done = 0;
  int exit_code = 0;
  const auto retry_for = std::max(cfg_.lease_ttl, std::chrono::milliseconds(30'000));
  while (!shutdown_.stop_requested() && (cfg_.max_jobs == 0 || done < cfg_.max_jobs)) {
    try {
      // Busy path: a job is waiting (or was taken with the last finish); move, lease and mark
      // it in one step.
      auto taken = std::exchange(next_, std::nullopt);
      if (!taken)
        taken = redis::with_retry(
            main_conn, retry_for, shutdown_.get_token(), [&](redis::Connection& c) {
              return redis::JobStore(c, keys).take(cfg_.model, new_token(cfg_.pod_name),
                                                   cfg_.lease_ttl, candidates_);
            });
      if (taken) {
        ++done;
        const bool more = cfg_.max_jobs == 0 || done < cfg_.max_jobs;
        if (process(taken->record, taken->record.holder, main_conn, heartbeat, more) == Step::stop)
          break;
        continue;
      }
      const std::string token = new_token(cfg_.pod_name);
      // Idle path: the seed's BLMOVE, then the lease.
      auto id = redis::with_retry(
          main_conn, cfg_.health_timeout, shutdown_.get_token(), [&](redis::Connection& c) {
            // Where the BLMOVE will wait (the slot's master in cluster mode), for unblock_pop.
            auto client = c.blocking_client(keys.pending(cfg_.model));
            {
              std::lock_guard lock(mu_);
              popping_ = true;
              pop_client_ = std::move(client);
            }
            struct Clear {
              Relay* r;
              ~Clear() {
                std::lock_guard lock(r->mu_);
                r->popping_ = false;
              }
            } clear{this};
            if (shutdown_.stop_requested()) return std::optional<std::string>{};
            return redis::JobStore(c, keys).pop(cfg_.model, cfg_.queue_pop_timeout);
          });
      if (!id) {
        if (!shutdown_.stop_requested())
          log::info("queue empty: no job within queue_pop_timeout; exiting",
                    {{"model", cfg_.model},
                     {"queue_pop_timeout", format_duration(cfg_.queue_pop_timeout)}});
        break;
      }
      auto begun = redis::with_retry(main_conn, retry_for, {}, [&](redis::Connection& c) {
        return redis::JobStore(c, keys).begin(cfg_.model, *id, token, cfg_.lease_ttl);
      });
      if (begun.outcome != redis::BeginOutcome::ok) {
        log::warn("dequeued a job that cannot run; dropped from processing",
                  {{"job_id", *id},
                   {"reason", begun.outcome == redis::BeginOutcome::missing ? "record missing"
                                                                            : "already terminal"}});
        continue;
      }
      ++done;
      const bool more = cfg_.max_jobs == 0 || done < cfg_.max_jobs;
      if (process(begun.record, token, main_conn, heartbeat, more) == Step::stop) break;
    } catch (const redis::IoError& e) {
      // A job in hand stays in processing; its lease (if any) expires and the reaper requeues it.
      log::error("redis unavailable for too long; exiting", {{"error", e.what()}});
      exit_code = 1;
      break;
    } catch (const Aborted&) {
      break;  // shutdown while waiting for Redis
    }
  }
  if (next_) {
    // Taken with the last finish, then a shutdown: back to the front of pending at once.
    try {
      redis::JobStore(main_conn.get(), keys).give_back(cfg_.model, next_->id, next_->record.holder);
    } catch (const std::exception& e) {
      log::warn("a job taken before the shutdown is left to the reaper",
                {{"job_id", next_->id}, {"error", e.what()}});
    }
    next_.reset();
  }
  // Both told first, then both waited for: they wind down at once, not one after the other.
  heartbeat_thread.request_stop();
  listener_thread.request_stop();
  heartbeat_thread.join();
  listener_thread.join();
  log::info("relay exiting", {{"jobs", done}, {"exit_code", exit_code}});
  return exit_code;
}

Relay::Step Relay::process(const JobRecord& job, const std::string& token,
                           redis::LazyConnection& conn, Heartbeat& heartbeat, bool take_next) {
  const auto keys = cfg_.keys();
  const std::string& job_id = job.id;
  const auto retry_for = std::max(cfg_.lease_ttl, std::chrono::milliseconds(30'000));

  JobControl control;
  // Every log line about this job carries its trace_id while it is in hand.
  std::optional<log::TraceScope> traced;
  if (auto trace = parse_traceparent(job.traceparent)) traced.emplace(job_id, trace->trace_id);
  {
    std::lock_guard lock(mu_);
    current_ = &control;
    current_id_ = job_id;
  }
  if (job.cancel_requested) control.stop(StopReason::cancelled);
  if (shutdown_.stop_requested()) control.stop(StopReason::shutdown);

  JobResult result;
  heartbeat.watch(job_id, token, &control, job.wants_webhook("progress"));
  if (job.wants_webhook("started")) {
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
    progress_url =
        progress_->open([&heartbeat](ProgressReport r) { heartbeat.report(std::move(r)); });
  struct CloseProgress {
    ProgressEndpoint* p;
    ~CloseProgress() {
      if (p) p->close();
    }
  } close_progress{progress_.get()};
  // The execution limit: when it passes, the job stops as for a cancel, and fails timed_out.
  std::optional<ScopedAlarm> limit;
  if (job.timeout)
    limit.emplace(alarms_, Clock::now() + *job.timeout,
                  [&control] { control.stop(StopReason::timed_out); });
  if (job.expires_at && wall_now() >= *job.expires_at && !control.token().stop_requested()) {
    // Not started within its ttl (the gateway's sweep had not reached it yet): it never runs.
    result.disposition = Disposition::failed;
    result.error_code = "expired";
    result.error_message = "not started within its ttl";
  } else if (control.token().stop_requested()) {
    // Cancelled or shut down before it started: nothing to run.
    result.disposition = control.reason() == StopReason::cancelled ? Disposition::cancelled
                                                                   : Disposition::given_back;
  } else {
    result = run_job(cfg_, *storage_, *inference_, enc_, job, control, progress_url);
  }
  limit.reset();                      // disarmed (or rung): no timeout lands on the next job
  if (progress_) progress_->close();  // before unwatch: no report reaches the next job
  heartbeat.unwatch();
  {
    std::lock_guard lock(mu_);
    current_ = nullptr;
    current_id_.clear();
  }

  // The last step: one script writes the outcome (or gives the job back).
  std::string outcome;
  if (result.disposition == Disposition::given_back) {
    bool ok = redis::with_retry(conn, retry_for, {}, [&](redis::Connection& c) {
      return redis::JobStore(c, keys).give_back(cfg_.model, job_id, token);
    });
    outcome = ok ? "given_back" : "lease_lost";
  } else if (result.disposition == Disposition::abandoned) {
    outcome = "lease_lost";
  } else if (auto delay = retry_delay(job, result, random_unit())) {
    // A failure that may pass, with attempts left: the job waits for its retry (no event, no
    // webhook: those come with the final outcome).
    const auto due = wall_now() + *delay;
    const std::string failures = failures_with(job, result, wall_now());
    auto fin = redis::with_retry(conn, retry_for, {}, [&](redis::Connection& c) {
      return redis::JobStore(c, keys).retry(cfg_.model, job_id, token, due, failures);
    });
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
    // A retried finish may find the job terminal by its own first attempt (the reply was lost,
    // or too few replicas acknowledged it in time): the lease was ours until then, so nobody
    // else could have ended it — that is this outcome, written.
    // The next job is taken in the same round trip, unless this relay stops after this one.
    // A retry finishes only: the first try's take may have run (its job, if any, comes back
    // by the reaper, like any job whose relay lost the reply of its take).
    bool retried = false;
    auto fin = redis::with_retry(
        conn, retry_for, {},
        [&](redis::Connection& c) {
          redis::JobStore store(c, keys);
          redis::FinishOutcome f;
          if (take_next && !retried && !shutdown_.stop_requested()) {
            auto [outcome, next] = store.finish_and_take(
                completion, token, new_token(cfg_.pod_name), cfg_.lease_ttl, candidates_);
            f = outcome;
            next_ = std::move(next);
          } else {
            f = store.finish(completion, token, &candidates_);
          }
          if (f == redis::FinishOutcome::ok || (retried && f == redis::FinishOutcome::terminal))
            store.require_replicas(cfg_.redis.wait_replicas);
          return f;
        },
        [&](int) { retried = true; });
    if (retried && fin == redis::FinishOutcome::terminal) fin = redis::FinishOutcome::ok;
    outcome = fin == redis::FinishOutcome::ok ? std::string(to_string(completion.status))
                                              : std::string(redis::to_string(fin));
  }

  boost::json::object line{
      {"job_id", job_id},           {"model", cfg_.model}, {"service_type", job.service_type},
      {"operation", job.operation}, {"outcome", outcome},  {"timings_us", result.timings.micros()}};
  if (!result.error_code.empty()) {
    line["error_code"] = result.error_code;
    line["error"] = result.error_message.substr(0, 512);
  }
  log::info("job finished", line);
  // After a give-back the process is shutting down; otherwise carry on.
  return result.disposition == Disposition::given_back ? Step::stop : Step::next;
}

}  // namespace relay::sidecar
