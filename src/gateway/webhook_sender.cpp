#include "gateway/webhook_sender.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/errors.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "common/time.hpp"
#include "common/trace.hpp"
#include "gateway/callback_url.hpp"
#include "gateway/job_json.hpp"
#include "gateway/metrics.hpp"
#include "gateway/webhook_signature.hpp"
#include "http/curl.hpp"

namespace relay::gateway {
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Attempt {
  long status = 0;    // 0: no HTTP answer
  std::string error;  // transport error, when status is 0
  std::chrono::milliseconds retry_after{0};
};

Attempt post(const std::string& url, const std::vector<std::string>& pinned,
             const std::vector<std::string>& headers, const std::string& body,
             std::chrono::milliseconds timeout, std::stop_token stop) {
  Attempt a;
  auto easy = http::make_easy();
  http::Headers h;
  for (const auto& line : headers) h.add(line);
  h.add("Expect:");
  // Pin the addresses that were checked, so that DNS cannot change them between the check and
  // the connection (rebinding).
  auto u = boost::urls::parse_absolute_uri(url);
  http::Headers resolve;  // (a curl_slist, like headers)
  if (u && !pinned.empty()) {
    std::string port =
        u->has_port() ? std::string(u->port()) : (u->scheme() == "https" ? "443" : "80");
    std::string host = u->host();
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    std::string entry = host + ":" + port + ":";
    for (size_t i = 0; i < pinned.size(); ++i)
      entry += (i ? "," : "") +
               (pinned[i].find(':') != std::string::npos ? "[" + pinned[i] + "]" : pinned[i]);
    resolve.add(entry);
    curl_easy_setopt(easy.get(), CURLOPT_RESOLVE, resolve.get());
  }
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_POST, 1L);
  curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, h.get());
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy.get(), CURLOPT_FOLLOWLOCATION,
                   0L);  // a redirect could lead past the address check
  curl_easy_setopt(easy.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_write_callback discard = [](char*, size_t s, size_t n, void*) { return s * n; };
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, discard);
  http::HeaderMap answer_headers;
  curl_easy_setopt(easy.get(), CURLOPT_HEADERFUNCTION, &http::collect_headers);
  curl_easy_setopt(easy.get(), CURLOPT_HEADERDATA, &answer_headers);
  http::Transfer t(easy.get(), stop);  // throws Aborted on stop: the claim then lapses
  CURLcode rc = t.run();
  if (rc != CURLE_OK) {
    a.error = http::describe(rc);
    return a;
  }
  a.status = http::response_code(easy.get());
  const std::string retry_after = answer_headers["retry-after"];
  if (!retry_after.empty()) {
    std::int64_t secs = 0;
    auto [p, ec] =
        std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), secs);
    if (ec == std::errc{} && secs > 0)
      a.retry_after = std::chrono::seconds(std::min<std::int64_t>(secs, 86400));
  }
  return a;
}

}  // namespace

std::chrono::milliseconds webhook_backoff(int failed_attempts, std::chrono::milliseconds initial,
                                          std::chrono::milliseconds retry_after,
                                          std::mt19937_64& rng) {
  double d = static_cast<double>(initial.count());
  for (int i = 1; i < failed_attempts && d < 3'600'000.0; ++i) d *= 2;
  d = std::min(d, 3'600'000.0);
  auto jittered = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::uniform_real_distribution<double>(d / 2, d)(rng)));
  return std::max(jittered, retry_after);
}

std::string webhook_destination(const std::string& url) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u) return url;
  std::string host = u->host();
  for (auto& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string port =
      u->has_port() ? std::string(u->port()) : (u->scheme() == "https" ? "443" : "80");
  return host + ":" + port;
}

WebhookSender::WebhookSender(WebhookSenderParams p) : p_(std::move(p)), conn_(p_.endpoint) {}

WebhookSender::~WebhookSender() = default;

// One attempt, on a worker thread, with the worker's own Redis connection for the outcome.
WebhookSender::Ending WebhookSender::attempt(const redis::Delivery& d, redis::LazyConnection& conn,
                                             std::mt19937_64& rng, std::stop_token stop) {
  const JobRecord& job = d.job;
  const std::string& id = d.id;
  const int attempts = static_cast<int>(d.attempts) + 1;
  const std::string& url = d.url;
  // What happened: the terminal status, or the opt-in event. The body is the job as it is now,
  // with that event first.
  const std::string event = d.event == "terminal" ? d.status : d.event;
  if (d.event != "terminal" && (job.id.empty() || is_terminal(job.status))) {
    // A started or progress webhook whose job has ended meanwhile says nothing the terminal
    // webhook does not: dropped, not sent late.
    record(redis::Schedules::webhook_outcome_call(p_.keys, d, "superseded", 0, d.attempts, "{}"),
           conn);
    log::debug("webhook superseded by the job's end", {{"webhook_id", id}, {"event", event}});
    return Ending::other;
  }
  const auto trace = parse_traceparent(job.traceparent);
  std::string body = job_json(job);
  body.insert(1, "\"event\":" + boost::json::serialize(boost::json::value(event)) + ",");

  std::string outcome;
  long long next_due = 0;
  boost::json::object last{{"at", format_rfc3339(wall_now())}, {"attempt", attempts}};
  std::vector<std::string> addresses;
  auto problem = check_callback_url(url, p_.allow_private, &addresses, p_.resolver);
  if (problem && !problem->transient) {
    outcome = "refused";
    last["error"] = problem->reason;
    metrics().webhook_attempts.add({"refused"});
    metrics().webhooks_given_up.add({"refused"});
  } else {
    Attempt a;
    double seconds = 0;
    if (problem) {
      // Its host could not be resolved now: an attempt that failed like one that could not
      // connect, tried again later (refused for good only when the name does not exist).
      a.error = problem->reason;
    } else {
      const long long ts = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
      std::vector<std::string> headers{
          "Content-Type: application/json", "User-Agent: relay-webhooks", "webhook-id: " + id,
          "webhook-event: " + event, "webhook-timestamp: " + std::to_string(ts)};
      if (!p_.key.empty())
        headers.push_back("webhook-signature: " + sign_webhook(p_.key, id, ts, body));
      // The job's trace reaches the receiver: this delivery as its parent.
      if (trace) {
        headers.push_back("traceparent: " + child_of(*trace).header());
        if (!job.tracestate.empty()) headers.push_back("tracestate: " + job.tracestate);
      }
      const auto started = std::chrono::steady_clock::now();
      a = post(url, addresses, headers, body, p_.timeout, stop);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
    if (a.status >= 200 && a.status < 300) {
      outcome = "delivered";
      last["status"] = a.status;
      metrics().webhook_attempts.add({"delivered"});
      metrics().webhook_seconds.observe({"delivered"}, seconds);
    } else {
      if (a.status)
        last["status"] = a.status;
      else
        last["error"] = a.error;
      metrics().webhook_attempts.add({a.status ? "http_error" : "network_error"});
      metrics().webhook_seconds.observe({a.status ? "http_error" : "network_error"}, seconds);
      auto delay = webhook_backoff(attempts, p_.initial_backoff, a.retry_after, rng);
      const bool expired = now_ms() + delay.count() - d.created_ms > p_.max_age.count();
      // 410 Gone: the receiver says the endpoint is gone for good (Standard Webhooks).
      outcome = (a.status == 410 || expired) ? "failed" : "retrying";
      if (outcome == "failed")
        metrics().webhooks_given_up.add({a.status == 410 ? "gone" : "expired"});
      if (outcome == "retrying") last["next_attempt_in_ms"] = delay.count();
      next_due = now_ms() + delay.count();
    }
  }
  record(redis::Schedules::webhook_outcome_call(p_.keys, d, outcome, next_due, attempts,
                                                boost::json::serialize(last)),
         conn);
  boost::json::object line{{"job_id", job.id},
                           {"webhook_id", id},
                           {"event", event},
                           {"attempt", attempts},
                           {"last", last}};
  if (trace) line["trace_id"] = trace->trace_id;
  if (outcome == "retrying" || outcome == "failed") {
    line["outcome"] = outcome;
    log::warn("webhook attempt failed", line);
  } else {
    log::info(outcome == "delivered" ? "webhook delivered" : "webhook refused", line);
  }
  if (outcome == "delivered") return Ending::answered;
  return outcome == "refused" ? Ending::other : Ending::failed;
}

void WebhookSender::record(redis::Connection::Call outcome, redis::LazyConnection& conn) {
  std::unique_lock l(outcomes_mu_);
  outcomes_.push_back(std::move(outcome));
  if (writing_) return;  // the worker writing takes it with its next round trip
  writing_ = true;
  while (!outcomes_.empty()) {
    const auto batch = std::exchange(outcomes_, {});
    l.unlock();
    std::vector<redis::Reply> replies;
    std::string error;
    try {
      replies = conn.get().pipeline(batch, /*checked=*/false);
    } catch (const std::exception& e) {
      conn.reset();
      error = e.what();
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      std::string why = error;
      if (why.empty() && replies[i] && replies[i]->type == REDIS_REPLY_ERROR)
        why = redis::as_string(replies[i].get());
      if (!why.empty())
        log::warn("webhook attempt not recorded; it is retried when its claim lapses",
                  {{"webhook_id", batch[i].args[0]}, {"error", why}});
    }
    l.lock();
  }
  writing_ = false;
}

bool WebhookSender::place(Task task) {
  Host& host = hosts_[task.destination];
  if (host.share == 0) host.share = p_.per_host;
  if (host.in_flight < host.share) {
    ++host.in_flight;
    ++in_flight_;
    queue_.push_back(std::move(task));
    work_cv_.notify_one();
    return true;
  }
  if (static_cast<std::int64_t>(host.waiting.size()) < host.share) {
    host.waiting.push_back(std::move(task));
    ++waiting_;
    return true;
  }
  return false;
}

std::int64_t WebhookSender::ended(Host& host, Ending how) {
  if (how == Ending::answered && !host.waiting.empty())
    host.share = std::min(host.share + 1, std::max(p_.per_host, p_.per_host_max));
  else if (how == Ending::failed)
    host.share = std::max(p_.per_host, host.share / 2);
  --host.in_flight;
  --in_flight_;
  // Its receiver's next deliveries take this one's place, and any its grown share made.
  std::int64_t moved = 0;
  while (!host.waiting.empty() && host.in_flight < host.share) {
    queue_.push_back(std::move(host.waiting.front()));
    host.waiting.pop_front();
    --waiting_;
    ++host.in_flight;
    ++in_flight_;
    ++moved;
  }
  host.last_end = std::chrono::steady_clock::now();
  return moved;
}

void WebhookSender::forget_idle_hosts() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(hosts_, [&](const auto& entry) {
    const Host& h = entry.second;
    return h.in_flight == 0 && h.waiting.empty() &&
           (h.share <= p_.per_host || now - h.last_end > kShareKept);
  });
}

WebhookSender::Round WebhookSender::dispatch(int limit) {
  redis::Schedules schedules(conn_.get(), p_.keys);
  // Claimed for the attempt's timeout plus a margin, and for as long again for each wait a
  // delivery may have in memory before it (its receiver's turn, then a free worker): no other
  // replica claims it meanwhile, and if this one dies, another retries it.
  const auto lock = 3 * p_.timeout + std::chrono::seconds(30);
  Round round;
  {
    std::lock_guard l(mu_);
    forget_idle_hosts();
  }
  for (const auto& model : p_.keys.one_per_due_set(p_.models)) {
    if (round.claimed >= limit) break;
    const auto ids = schedules.claim_webhooks(model, now_ms(), lock, limit - round.claimed);
    round.claimed += static_cast<int>(ids.size());
    // (Those that vanished, expired with their job, are not among them.)
    std::vector<std::string> deferred;
    for (auto& d : schedules.deliveries(model, ids)) {
      std::string dest = webhook_destination(d.url);
      std::string id = d.id;
      {
        std::lock_guard l(mu_);
        if (place({std::move(d), std::move(dest)})) continue;
      }
      // That receiver already has its share of deliveries in flight and waiting: this one
      // waits its turn in Redis (no attempt counted), and other receivers' deliveries go ahead.
      deferred.push_back(std::move(id));
    }
    schedules.defer_webhooks(model, deferred, now_ms() + kDeferMs);
    round.deferred += static_cast<int>(deferred.size());
  }
  return round;
}

void WebhookSender::work(std::stop_token stop) {
  redis::LazyConnection conn(p_.endpoint);
  std::mt19937_64 rng{std::random_device{}()};
  std::stop_callback wake(stop, [this] {
    std::lock_guard g(mu_);
    work_cv_.notify_all();
  });
  std::unique_lock l(mu_);
  std::optional<Task> next;
  for (;;) {
    if (!next) {
      work_cv_.wait(l, [&] { return stop.stop_requested() || !queue_.empty(); });
      if (stop.stop_requested()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const Task task = std::move(*next);
    next.reset();
    l.unlock();
    Ending how = Ending::other;
    try {
      how = attempt(task.delivery, conn, rng, stop);
    } catch (const Aborted&) {
      // Stopping: the claim lapses and another attempt follows (here or on another replica).
    } catch (const std::exception& e) {
      conn.reset();
      log::warn("webhook attempt not recorded; it is retried when its claim lapses",
                {{"webhook_id", task.delivery.id}, {"error", e.what()}});
    }
    l.lock();
    ++ended_;
    Host& host = hosts_[task.destination];
    // This worker takes up the next delivery itself — most often its receiver's next, which
    // takes this one's place — and wakes another only for each one more, after letting go of
    // the lock. (Waking one for each while this one took it up, and under the lock, cost a futex
    // wake, a context switch and a wait for the lock per webhook: a profile under a webhook per
    // job found the workers' lock the gateway's most contended.)
    const std::int64_t moved = ended(host, how);
    if (host.in_flight == 0 && host.waiting.empty() && host.share <= p_.per_host)
      hosts_.erase(task.destination);  // (nothing learned to keep)
    if (!queue_.empty() && !stop.stop_requested()) {
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const bool tell_dispatcher = dispatcher_listens_;
    if (moved > 1 || tell_dispatcher) {
      l.unlock();
      for (std::int64_t i = 1; i < moved; ++i) work_cv_.notify_one();
      if (tell_dispatcher) idle_cv_.notify_one();
      l.lock();
    }
  }
}

void WebhookSender::run(std::stop_token stop) {
  std::vector<std::jthread> workers;
  for (std::int64_t i = 0; i < p_.concurrency; ++i)
    workers.emplace_back([this](std::stop_token st) {
      name_this_thread("webhooks");
      work(st);
    });
  auto last_error_log = std::chrono::steady_clock::time_point{};
  // For a while after a round that put deliveries back (a receiver had its share in hand), a
  // round claims only as many as attempts ended since it last claimed: each frees one place,
  // most likely for that same receiver's next delivery. Once per kDeferMs a round claims all a
  // free place allows again, as the deliveries put back come due.
  using Clock = std::chrono::steady_clock;
  auto backed_up_until = Clock::time_point{};
  std::uint64_t ended_at_claim = 0;
  while (!stop.stop_requested()) {
    const bool backed_up = Clock::now() < backed_up_until;
    int limit = 0;
    {
      std::lock_guard l(mu_);
      limit = static_cast<int>(in_hand_limit() - in_flight_ - waiting_);
      // (One at least when an attempt ended or a poll came: another receiver's may be next.)
      if (backed_up)
        limit = std::min<std::int64_t>(limit, std::max<std::uint64_t>(ended_ - ended_at_claim, 1));
      if (limit > 0) ended_at_claim = ended_;
    }
    Round round;
    try {
      if (limit > 0) round = dispatch(limit);
    } catch (const std::exception& e) {
      conn_.reset();
      auto now = Clock::now();
      if (now - last_error_log > std::chrono::minutes(1)) {
        log::warn("webhook sender: redis unavailable; retrying", {{"error", e.what()}});
        last_error_log = now;
      }
    }
    if (round.deferred > 0) {
      metrics().webhook_deferrals.add(static_cast<std::uint64_t>(round.deferred));
      if (!backed_up) backed_up_until = Clock::now() + std::chrono::milliseconds(kDeferMs);
    }
    std::unique_lock l(mu_);
    const bool full = in_flight_ + waiting_ >= in_hand_limit();
    if (round.deferred == 0 && limit > 0 && round.claimed == limit && !full)
      continue;  // more may be due
    // Until the next poll, or until an attempt ends when that frees a place to claim for: all
    // places taken, or deliveries put back for want of one.
    const std::uint64_t ended = ended_;
    const bool wake_on_end = full || Clock::now() < backed_up_until;
    dispatcher_listens_ = wake_on_end;  // (else the workers do not wake it at every end)
    idle_cv_.wait_for(l, stop, p_.poll_interval, [&] { return wake_on_end && ended_ > ended; });
    dispatcher_listens_ = false;
  }
  for (auto& w : workers) w.request_stop();
  // The workers' destructors join: an attempt in flight is aborted (its claim lapses).
}

}  // namespace relay::gateway
