#include "redis/job_store.hpp"

#include <algorithm>
#include <set>

#include "common/time.hpp"
#include "redis/lua_scripts.hpp"
#include "redis/schedules.hpp"

namespace relay::redis {

std::string_view to_string(FinishOutcome o) {
  switch (o) {
    case FinishOutcome::ok:
      return "ok";
    case FinishOutcome::terminal:
      return "terminal";
    case FinishOutcome::lease_lost:
      return "lease_lost";
    case FinishOutcome::missing:
      return "missing";
  }
  return "ok";
}

std::vector<Connection::Call> JobStore::submit_calls(
    const Keys& keys, const JobRecord& record, bool priority,
    std::optional<std::chrono::milliseconds> listed_for, bool upload_held,
    const IdempotencyClaim* claim) {
  std::string expiry;
  if (record.expires_at)
    expiry = std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(record.expires_at->time_since_epoch())
            .count());
  std::vector<Connection::Call> calls{
      {&lua::submit,
       {keys.job(record.model, record.id), keys.pending(record.model), keys.expiries(record.model),
        keys.paused(record.model), keys.held(record.model), keys.gc_due(record.model)},
       {record.id, priority ? "L" : "R", expiry,
        upload_held ? Schedules::upload_member(record.model, record.service_type, record.id)
                    : std::string(),
        claim ? std::to_string(claim->ttl.count()) : std::string()}}};
  if (claim) calls[0].keys.push_back(claim->key);
  for (auto& [k, v] : record.to_fields()) {
    calls[0].args.push_back(k);
    calls[0].args.push_back(v);
  }
  if (!listed_for) return calls;
  // The tenant's listing index (in the tenant's slot, not the job's, so not in the script): the
  // entry, and entries older than the records' retention dropped.
  const std::string index = keys.tenant_jobs(record.tenant);
  const auto micros = [](WallTime t) {
    return std::to_string(
        std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
  };
  const WallTime created = record.created_at.value_or(wall_now());
  calls.push_back(
      {nullptr, {}, {"ZADD", index, micros(created), record.service_type + "/" + record.id}});
  calls.push_back({nullptr,
                   {},
                   {"ZREMRANGEBYSCORE", index, "-inf",
                    std::string("(").append(micros(wall_now() - *listed_for))}});
  return calls;
}

JobStore::SubmitOutcome JobStore::submit_outcome(const std::vector<Reply>& replies) {
  if (replies.empty() || !replies.front()) throw ReplyError("submit: unexpected reply");
  const redisReply* r = replies.front().get();
  if (r->type == REDIS_REPLY_STRING) return {false, as_string(r)};
  return {as_integer(r) == 1, {}};
}

std::optional<std::string> JobStore::pop(const std::string& model,
                                         std::chrono::milliseconds timeout) {
  // The server-side timeout bounds the wait; the socket waits that long and kLeastReadWait more
  // (Redis answers a timed-out block at once): a master gone without a word is found then, not
  // when TCP keepalive gives up, after hours, nor a whole retry window later.
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", static_cast<double>(timeout.count()) / 1000.0);
  Reply r;
  {
    ReadWithin margin(conn_, kLeastReadWait);
    BlockingRead blocking(conn_, timeout);
    r = conn_.command(
        {"BLMOVE", keys_.pending(model), keys_.processing(model), "LEFT", "RIGHT", secs});
  }
  return as_optional_string(r.get());
}

Connection::Call JobStore::take_call(const std::string& model, const std::string& token,
                                     std::chrono::milliseconds lease_ttl,
                                     const TakeCandidates& candidates) const {
  Connection::Call call{
      &lua::take,
      {keys_.pending(model), keys_.processing(model), keys_.taken(model, candidates.taker()),
       keys_.dropped(model)},
      {token, std::to_string(lease_ttl.count()), format_rfc3339(wall_now()), keys_.job(model, ""),
       keys_.job_channel_prefix(), std::string(Keys::kChangedSuffix)}};
  const std::size_t named = candidates.ids.size();
  call.keys.reserve(4 + 2 * named);
  for (std::size_t i = 0; i < named; ++i) {
    call.keys.push_back(keys_.job(model, candidates.ids[i]));
    call.keys.push_back(keys_.lease(model, candidates.ids[i]));
  }
  return call;
}

void TakeCandidates::found_at(long long position) {
  reach_ = std::max(reach_, position);
  if (++takes_ < kWindow) return;
  want_ = std::clamp(2 * reach_, kMin, kMax);
  reach_ = takes_ = 0;
}

void TakeCandidates::missed() {
  want_ = std::min(2 * want_, kMax);
  reach_ = takes_ = 0;
}

void TakeCandidates::popped(const std::string& id) {
  if (fresh || ids.empty()) return;  // (a look just made says nothing of the distance)
  auto at = std::find(ids.begin(), ids.end(), id);
  if (at == ids.end())
    missed();
  else
    found_at(at - ids.begin() + 1);
}

void TakeCandidates::looked(std::vector<std::string> now) {
  if (far() && !now.empty()) popped(now.front());
  ids = std::move(now);
  fresh = true;
}

Connection::Call JobStore::look_call(const std::string& model,
                                     const TakeCandidates& candidates) const {
  return {nullptr, {}, look_command(keys_, model, candidates)};
}

Connection::Call JobStore::taken_call(const std::string& model,
                                      const TakeCandidates& candidates) const {
  return {nullptr, {}, {"HGETALL", keys_.taken(model, candidates.taker())}};
}

Connection::Call JobStore::pop_call(const std::string& model) const {
  return {nullptr, {}, {"LMOVE", keys_.pending(model), keys_.processing(model), "LEFT", "RIGHT"}};
}

std::optional<std::string> JobStore::moved(const redisReply* lmove, const redisReply* look,
                                           TakeCandidates& candidates) {
  auto id = as_optional_string(lmove);
  if (id) candidates.popped(*id);
  candidates.ids = look->type == REDIS_REPLY_ARRAY ? as_strings(look) : std::vector<std::string>{};
  candidates.fresh = !id;
  return id;
}

std::optional<Taken> JobStore::begun(const std::string& model, const std::string& id,
                                     const std::string& token,
                                     std::chrono::milliseconds lease_ttl) {
  auto b = begin(model, id, token, lease_ttl);
  if (b.outcome != BeginOutcome::ok) return std::nullopt;
  return Taken{id, std::move(b.record)};
}

// take.lua's reply, the copy of the record read behind it and the look behind that: the job
// when taken; candidates become the ids the look saw at the head of pending (none when it was
// empty).
std::optional<Taken> JobStore::take_outcome(const std::string& model, const std::string& token,
                                            const redisReply* take, const redisReply* copy,
                                            const redisReply* look, TakeCandidates& candidates) {
  if (take->type != REDIS_REPLY_ARRAY || take->elements == 0)
    throw ReplyError("take: unexpected reply");
  const std::string tag = as_string(take->element[0]);
  auto ids = look->type == REDIS_REPLY_ARRAY ? as_strings(look) : std::vector<std::string>{};
  if (tag != "ok") {
    if (tag == "raced") candidates.missed();
    candidates.looked(std::move(ids));
    return std::nullopt;
  }
  if (take->elements != 3) throw ReplyError("take: unexpected reply");
  candidates.found_at(as_integer(take->element[2]));
  // (The look and the copy's read ran first when the take was refused NOSCRIPT, sent again
  // after them: the job taken is then in the look, behind the ended jobs the take dropped
  // before it, and the copy is the slot's last job's.)
  std::string id = as_string(take->element[1]);
  if (auto at = std::find(ids.begin(), ids.end(), id); at != ids.end())
    ids.erase(ids.begin(), at + 1);
  candidates.ids = std::move(ids);
  candidates.fresh = false;  // (the next take is a job away)
  JobRecord record;
  if (copy->type == REDIS_REPLY_ARRAY) record = JobRecord::from_fields(as_pair_views(copy));
  // The lease token is new with each take: a copy holding it is this take's. (Another, or none,
  // or a read refused: the record itself is read, the job being ours either way.)
  if (record.id != id || record.holder != token) {
    auto again = conn_.command({"HGETALL", keys_.job(model, id)});
    record = JobRecord::from_fields(as_pair_views(again.get()));
  }
  return Taken{std::move(id), std::move(record)};
}

std::optional<Taken> JobStore::take(const std::string& model, const std::string& token,
                                    std::chrono::milliseconds lease_ttl,
                                    TakeCandidates& candidates) {
  // Each take that misses is followed by a look at the head as it is then: a miss costs one
  // round trip.
  for (int look = 0; look < 100; ++look) {
    if (candidates.far()) {
      // (No look first: a pop needs no candidates, and finds an empty queue itself.)
      auto r = conn_.pipeline({pop_call(model), look_call(model, candidates)});
      auto id = moved(r[0].get(), r[1].get(), candidates);
      if (!id) return std::nullopt;
      if (auto taken = begun(model, *id, token, lease_ttl)) return taken;
      continue;  // (dropped from processing by begin.lua: gone or ended)
    }
    if (candidates.ids.empty()) {
      candidates.looked(as_strings(conn_.command(look_command(keys_, model, candidates)).get()));
      if (candidates.ids.empty()) return std::nullopt;
    }
    auto r = conn_.pipeline({take_call(model, token, lease_ttl, candidates),
                             taken_call(model, candidates), look_call(model, candidates)});
    if (auto job = take_outcome(model, token, r[0].get(), r[1].get(), r[2].get(), candidates))
      return job;
    if (candidates.ids.empty()) return std::nullopt;
  }
  return std::nullopt;  // the blocking path takes over
}

BeginResult JobStore::begin(const std::string& model, const std::string& id,
                            const std::string& token, std::chrono::milliseconds lease_ttl) {
  const auto now = std::chrono::time_point_cast<std::chrono::milliseconds>(wall_now());
  std::vector<Connection::Call> calls;
  calls.reserve(2);
  calls.push_back({&lua::begin,
                   {keys_.job(model, id), keys_.processing(model), keys_.lease(model, id),
                    keys_.dropped(model)},
                   {id, token, std::to_string(lease_ttl.count()), format_rfc3339(now),
                    keys_.job_changed_channel(id)}});
  calls.push_back({nullptr, {}, {"HGETALL", keys_.job(model, id)}});  // (see begin.lua)
  auto r = conn_.pipeline(calls);
  const redisReply* b = r[0].get();
  if (b->type != REDIS_REPLY_ARRAY || b->elements == 0) throw ReplyError("begin: unexpected reply");
  std::string tag = as_string(b->element[0]);
  if (tag == "missing") return {BeginOutcome::missing, {}};
  if (tag == "terminal") return {BeginOutcome::terminal, {}};
  if (r[1]->type != REDIS_REPLY_ARRAY) throw ReplyError("begin: unexpected reply");
  auto record = JobRecord::from_fields(as_pair_views(r[1].get()));
  // What begin.lua wrote, as it wrote it: the read ran before it when the script was refused
  // NOSCRIPT and sent again after the read.
  record.status = JobStatus::processing;
  record.holder = token;
  record.started_at = now;
  return {BeginOutcome::ok, std::move(record)};
}

HeartbeatResult JobStore::heartbeat(const std::string& model, const std::string& id,
                                    const std::string& token, std::chrono::milliseconds lease_ttl) {
  auto r = conn_.eval(lua::heartbeat, {keys_.lease(model, id), keys_.job(model, id)},
                      {token, std::to_string(lease_ttl.count())});
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
    throw ReplyError("heartbeat: unexpected reply");
  return {as_integer(r->element[0]) == 1, as_integer(r->element[1]) == 1};
}

std::int64_t JobStore::progress(const std::string& model, const std::string& id,
                                const std::string& token, std::optional<double> fraction,
                                const std::string& message) {
  auto reply = conn_.eval(lua::progress, {keys_.lease(model, id), keys_.job(model, id)},
                          {token, fraction ? format_progress(*fraction) : std::string(), message,
                           format_rfc3339(wall_now()), keys_.job_changed_channel(id)});
  return as_integer(reply.get());
}

Connection::Call JobStore::finish_call(const Completion& c, const std::string& token) const {
  const std::string& model = c.model;
  const std::string& id = c.job_id;
  Connection::Call call{
      &lua::finish,
      {keys_.job(model, id), keys_.lease(model, id), keys_.processing(model), keys_.events(model)},
      {id, token, std::string(to_string(c.status)), keys_.completed_channel(model), c.payload(),
       std::to_string(kEventsMaxLen), keys_.job_done_channel(id)}};
  for (auto& [k, v] : c.fields()) {
    if (k == field::status) continue;  // ARGV[3]
    call.args.push_back(k);
    call.args.push_back(v);
  }
  return call;
}

namespace {

FinishOutcome parse_finish(const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
    throw ReplyError("finish: unexpected reply");
  std::string s = as_string(r->element[0]);
  if (s == "ok") return FinishOutcome::ok;
  if (s == "terminal") return FinishOutcome::terminal;
  if (s == "lease_lost") return FinishOutcome::lease_lost;
  return FinishOutcome::missing;
}

}  // namespace

FinishOutcome JobStore::finish(const Completion& c, const std::string& token,
                               TakeCandidates* candidates) {
  if (!candidates) {
    auto call = finish_call(c, token);
    return parse_finish(conn_.eval(*call.script, std::move(call.keys), std::move(call.args)).get());
  }
  auto r = conn_.pipeline({finish_call(c, token), look_call(c.model, *candidates)});
  candidates->looked(as_strings(r[1].get()));
  return parse_finish(r[0].get());
}

FinishOutcome JobStore::finish_and_take(const Completion& c, const std::string& token,
                                        const std::string& next_token,
                                        std::chrono::milliseconds lease_ttl,
                                        TakeCandidates& candidates, std::optional<Taken>& taken) {
  if (candidates.ids.empty()) return finish(c, token, &candidates);
  return *receive_steps(send_steps(c.model, &c, token, next_token, lease_ttl, candidates),
                        candidates, taken);
}

JobStore::Sent JobStore::send_steps(const std::string& model, const Completion* c,
                                    const std::string& token, const std::string& next_token,
                                    std::chrono::milliseconds lease_ttl,
                                    const TakeCandidates& candidates) {
  Sent sent{c != nullptr, !next_token.empty() && !candidates.ids.empty(), std::nullopt};
  // Far (many relays): the take is a pop, its begin sent once its reply is read.
  if (sent.take) sent.taking = Sent::Taking{model, next_token, lease_ttl, candidates.far()};
  // (Moved in, not a braced list: an initializer list's calls would be copied whole.)
  std::vector<Connection::Call> calls;
  calls.reserve(4);
  if (sent.finish) calls.push_back(finish_call(*c, token));
  if (sent.take && sent.taking->pop) {
    calls.push_back(pop_call(model));
  } else if (sent.take) {
    calls.push_back(take_call(model, next_token, lease_ttl, candidates));
    calls.push_back(taken_call(model, candidates));
  }
  // The look: the next take's candidates (after this take, or this finish's).
  if (!calls.empty()) calls.push_back(look_call(model, candidates));
  if (!calls.empty()) conn_.send(std::move(calls));
  return sent;
}

std::optional<FinishOutcome> JobStore::receive_steps(Sent sent, TakeCandidates& candidates,
                                                     std::optional<Taken>& taken) {
  if (!sent.finish && !sent.take) return std::nullopt;
  // Unchecked: a refused finish must not hide a take that ran.
  auto replies = conn_.receive(/*checked=*/false);
  const redisReply* look = replies.back().get();
  const redisReply* step = sent.take ? replies[sent.finish ? 1 : 0].get() : nullptr;
  const bool pop = sent.take && sent.taking->pop;
  if (step && !pop && step->type != REDIS_REPLY_ERROR) {
    const redisReply* copy = replies[sent.finish ? 2 : 1].get();
    taken = take_outcome(sent.taking->model, sent.taking->token, step, copy, look, candidates);
  }
  // A pop's job is begun (leased) before the finish's error, if any, is thrown: the move ran.
  if (step && pop && step->type != REDIS_REPLY_ERROR) {
    const Sent::Taking& t = *sent.taking;
    if (auto id = moved(step, look, candidates)) {
      taken = begun(t.model, *id, t.token, t.lease_ttl);
      // (One that cannot run was dropped: the next, if any, is taken as take() would.)
      if (!taken && !candidates.ids.empty())
        taken = this->take(t.model, t.token, t.lease_ttl, candidates);
    }
  }
  std::optional<FinishOutcome> outcome;
  if (sent.finish) {
    throw_if_error(replies[0].get());
    outcome = parse_finish(replies[0].get());
    if (!sent.take && look->type == REDIS_REPLY_ARRAY) candidates.looked(as_strings(look));
  }
  // A refused take took nothing. Its error is still thrown (the finish's outcome with it: a
  // retried finish finds its own write), as before.
  if (step) throw_if_error(step);
  return outcome;
}

bool JobStore::give_back(const std::string& model, const std::string& id,
                         const std::string& token) {
  auto r = conn_.eval(lua::give_back,
                      {keys_.job(model, id), keys_.lease(model, id), keys_.processing(model),
                       keys_.pending(model), keys_.paused(model), keys_.held(model)},
                      {id, token, keys_.job_changed_channel(id)});
  return as_integer(r.get()) == 1;
}

CancelOutcome JobStore::cancel(const std::string& model, const std::string& service_type,
                               const std::string& id) {
  return cancel_job(model, service_type, id).outcome;
}

JobStore::Cancelled JobStore::cancel_job(const std::string& model, const std::string& service_type,
                                         const std::string& id) {
  auto call = cancel_call(keys_, model, service_type, id);
  return cancelled(conn_.eval(*call.script, std::move(call.keys), std::move(call.args)).get());
}

Connection::Call JobStore::cancel_call(const Keys& keys, const std::string& model,
                                       const std::string& service_type, const std::string& id) {
  Completion c;
  c.job_id = id;
  c.model = model;
  c.service_type = service_type;
  c.status = JobStatus::cancelled;
  c.finished_at = wall_now();
  return {&lua::cancel,
          {keys.job(model, id), keys.pending(model), keys.events(model), keys.retries(model),
           keys.held(model), keys.processing(model), keys.dropped(model)},
          {id, format_rfc3339(c.finished_at), keys.completed_channel(model),
           keys.cancel_channel(model), std::to_string(kEventsMaxLen), c.payload()}};
}

JobStore::Cancelled JobStore::cancelled(const redisReply* r) {
  throw_if_error(r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
    throw ReplyError("cancel: unexpected reply");
  const std::string tag = as_string(r->element[0]);
  Cancelled c;
  if (tag == "missing") {
    c.outcome = CancelOutcome::missing;
    return c;
  }
  if (tag == "cancelled")
    c.outcome = CancelOutcome::cancelled;
  else if (tag == "requested")
    c.outcome = CancelOutcome::requested;
  else if (tag == "terminal")
    c.outcome = CancelOutcome::terminal;
  else
    throw ReplyError("cancel: unexpected reply " + tag);
  if (r->elements > 1) c.record = record_of(r->element[1]);
  return c;
}

std::string JobStore::webhook_id(const std::string& job_id) {
  std::string out = "msg_";
  for (char c : job_id)
    if (c != '-') out += c;
  return out;
}

std::int64_t JobStore::set_paused(const std::string& model, bool paused) {
  auto r = conn_.eval(lua::pause, {keys_.paused(model), keys_.pending(model), keys_.held(model)},
                      {paused ? "pause" : "resume"});
  return as_integer(r.get());
}

bool JobStore::paused(const std::string& model) {
  return as_integer(conn_.command({"EXISTS", keys_.paused(model)}).get()) == 1;
}

bool JobStore::watch(const std::string& model, const std::string& id) {
  return record_of(conn_.eval(lua::watch, {keys_.job(model, id)}, {}).get()).has_value();
}

std::string_view to_string(WebhookEvent e) {
  switch (e) {
    case WebhookEvent::started:
      return "started";
    case WebhookEvent::progress:
      return "progress";
    default:
      return "terminal";
  }
}

bool JobStore::schedule_webhook(const std::string& model, const std::string& id, WebhookEvent event,
                                const std::string& suffix) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  const std::string delivery = webhook_id(id) + "_" + std::string(to_string(event)) + "_" + suffix;
  auto r =
      conn_.eval(lua::schedule_webhook,
                 {keys_.job(model, id), keys_.webhooks_due(model), keys_.webhook(model, delivery)},
                 {delivery, std::to_string(now.count()), "processing", keys_.job(model, id),
                  std::string(to_string(event))});
  return as_integer(r.get()) == 1;
}

std::optional<std::string> JobStore::reserve_idempotency(const std::string& key,
                                                         const std::string& job_id,
                                                         std::chrono::milliseconds ttl) {
  // SET NX then GET: if a retried SET finds the key, the GET tells whether it holds this
  // request's own id (the first SET ran but its reply was lost) or another request's.
  auto set = conn_.command({"SET", key, job_id, "NX", "PX", std::to_string(ttl.count())});
  if (!is_nil(set.get())) return std::nullopt;
  return idempotent_job(key).value_or(std::string());
}

std::vector<Connection::Call> JobStore::reserve_idempotency_calls(const std::string& key,
                                                                  const std::string& job_id,
                                                                  std::chrono::milliseconds ttl) {
  std::vector<Connection::Call> calls(2);
  calls[0].args = {"SET", key, job_id, "NX", "PX", std::to_string(ttl.count())};
  calls[1].args = {"GET", key};
  return calls;
}

std::optional<std::string> JobStore::reservation_holder(const std::vector<Reply>& replies) {
  if (replies.size() != 2) throw ReplyError("reserve: unexpected replies");
  for (const auto& r : replies) throw_if_error(r.get());
  if (!is_nil(replies[0].get())) return std::nullopt;
  return as_optional_string(replies[1].get()).value_or(std::string());
}

std::optional<std::string> JobStore::idempotent_job(const std::string& key) {
  return as_optional_string(conn_.command({"GET", key}).get());
}

void JobStore::release_idempotency(const std::string& key, const std::string& job_id) {
  // (renew_idempotency.lua's check, with a TTL that ends it at once: a DEL would drop a key
  // another request took after this one's reservation lapsed — its retry would make a second job.)
  renew_idempotency(key, job_id, std::chrono::milliseconds(1));
}

bool JobStore::renew_idempotency(const std::string& key, const std::string& job_id,
                                 std::chrono::milliseconds ttl) {
  return as_integer(conn_.eval(lua::renew_idempotency, {key}, {job_id, std::to_string(ttl.count())})
                        .get()) == 1;
}

void JobStore::require_replicas(std::int64_t replicas) {
  if (replicas <= 0) return;
  auto acks = as_integer(conn_.command({"WAIT", std::to_string(replicas), "1000"}).get());
  if (acks < replicas)
    throw IoError("redis: the write reached " + std::to_string(acks) + " of " +
                  std::to_string(replicas) + " replicas");
}

void JobStore::ping() {
  conn_.command({"PING"});
}

// The ids of ended jobs left in a queue (the dropped set: see cancel.lua) are not counted. They
// are in pending, or in held while the model is paused: one of the two lists holds the queue
// at a time (pause.lua moves it whole), so they come off pending first, the rest off held.
long long JobStore::pending_count(const std::string& model) {
  auto r = conn_.pipeline({{nullptr, {}, {"LLEN", keys_.pending(model)}},
                           {nullptr, {}, {"SCARD", keys_.dropped(model)}}});
  return std::max(0LL, as_integer(r[0].get()) - as_integer(r[1].get()));
}

QueueDepth JobStore::queue_depth(const std::string& model) {
  QueueDepth d;
  auto r = conn_.pipeline(
      {{nullptr, {}, {"LLEN", keys_.pending(model)}},
       {nullptr, {}, {"LLEN", keys_.held(model)}},
       {nullptr, {}, {"SCARD", keys_.dropped(model)}},
       {nullptr, {}, {"LLEN", keys_.processing(model)}},
       {nullptr, {}, {"LLEN", keys_.deadletter(model)}},
       {nullptr, {}, {"ZCARD", keys_.retries(model)}},
       {nullptr, {}, {"LRANGE", keys_.pending(model), "0", std::to_string(d.kOldestScan - 1)}}});
  const long long pending = as_integer(r[0].get()), dropped = as_integer(r[2].get());
  d.pending = std::max(0LL, pending - dropped);
  d.held = std::max(0LL, as_integer(r[1].get()) - std::max(0LL, dropped - pending));
  d.processing = as_integer(r[3].get());
  d.deadletter = as_integer(r[4].get());
  d.retrying = as_integer(r[5].get());
  const auto ids = as_strings(r[6].get());
  if (ids.empty()) return d;
  std::vector<Connection::Call> reads;
  for (const auto& id : ids)
    reads.push_back({nullptr,
                     {},
                     {"HMGET", keys_.job(model, id), std::string(field::created_at),
                      std::string(field::status)}});
  for (const auto& reply : conn_.pipeline(reads)) {
    // (An ended job's id still in the queue waits for nothing.)
    const redisReply* fields = reply.get();
    if (fields->type != REDIS_REPLY_ARRAY || fields->elements != 2) continue;
    if (as_optional_string(fields->element[1]) != "pending") continue;
    if (auto text = as_optional_string(fields->element[0]))
      if (auto created = parse_rfc3339(*text))
        if (!d.oldest_created || *created < *d.oldest_created) d.oldest_created = created;
  }
  return d;
}

std::vector<std::string> JobStore::known_models(const Endpoint& ep, const Keys& keys) {
  const std::string& prefix = keys.prefix();
  std::set<std::string> models;
  for (const auto& master : Connection::masters(ep)) {
    auto conn = Connection::open(master);
    for (const std::string& pattern : {prefix + "relay:*", prefix + "jobs:*:events"}) {
      std::string cursor = "0";
      do {
        auto r = conn.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        cursor = as_string(r->element[0]);
        for (const auto& key : as_strings(r->element[1])) {
          std::string k = key.substr(prefix.size());
          k = k.substr(k.starts_with("relay:") ? 6 : 5);
          for (std::string_view suffix : {":pending", ":processing", ":deadletter", ":events"})
            if (k.ends_with(suffix)) {
              std::string m = k.substr(0, k.size() - suffix.size());
              if (m.size() > 2 && m.front() == '{' && m.back() == '}')
                m = m.substr(1, m.size() - 2);
              models.insert(m);
            }
        }
      } while (cursor != "0");
    }
  }
  return {models.begin(), models.end()};
}

Connection::Call JobStore::requeue_deadletter_call(const std::string& model, const std::string& id,
                                                   const std::string& token) const {
  return {&lua::requeue_deadletter,
          {keys_.deadletter(model), keys_.pending(model), keys_.job(model, id), keys_.paused(model),
           keys_.held(model)},
          {id, token}};
}

bool JobStore::requeue_deadletter(const std::string& model, const std::string& id,
                                  const std::string& token) {
  auto call = requeue_deadletter_call(model, id, token);
  return as_integer(conn_.eval(*call.script, std::move(call.keys), std::move(call.args)).get()) ==
         1;
}

std::int64_t JobStore::requeue_deadletter_all(const std::string& model, const std::string& token) {
  // Bounded by the length at the start: a model dead-lettering as fast as this requeues must
  // not keep it going. Each batch leaves the list whatever its steps say (one requeued by
  // someone else meanwhile is gone from it too), so the next read starts after it.
  constexpr long long kBatch = 500;
  const std::string list = keys_.deadletter(model);
  auto left = as_integer(conn_.command({"LLEN", list}).get());
  std::int64_t moved = 0;
  while (left > 0) {
    auto ids = as_strings(
        conn_.command({"LRANGE", list, "0", std::to_string(std::min(left, kBatch) - 1)}).get());
    if (ids.empty()) break;
    std::vector<Connection::Call> calls;
    calls.reserve(ids.size());
    for (const auto& id : ids) calls.push_back(requeue_deadletter_call(model, id, token));
    for (const auto& r : conn_.pipeline(calls)) moved += as_integer(r.get()) == 1 ? 1 : 0;
    left -= static_cast<long long>(ids.size());
  }
  return moved;
}

std::vector<ReapOutcome> JobStore::reap_all(const std::string& model,
                                            const std::vector<std::string>& ids,
                                            std::chrono::milliseconds grace,
                                            long long max_attempts) {
  std::vector<ReapOutcome> out;
  out.reserve(ids.size());
  for (std::size_t from = 0; from < ids.size(); from += kReapBatch) {
    const std::size_t to = std::min(ids.size(), from + kReapBatch);
    std::vector<Completion> ends;
    std::vector<Connection::Call> calls;
    for (std::size_t i = from; i < to; ++i) {
      const std::string& id = ids[i];
      ends.push_back(Completion::failure(id, model, "dead_lettered"));
      calls.push_back(
          {&lua::reap,
           {keys_.processing(model), keys_.lease(model, id), keys_.job(model, id),
            keys_.pending(model), keys_.deadletter(model), keys_.suspects(model),
            keys_.events(model), keys_.paused(model), keys_.held(model), keys_.dropped(model)},
           {id, std::to_string(grace.count()), std::to_string(max_attempts),
            format_rfc3339(ends.back().finished_at), std::to_string(kEventsMaxLen),
            keys_.job_changed_channel(id)}});
    }
    // (Independent steps, each its own id's: in any order after a NOSCRIPT, as pipeline() may.)
    auto replies = conn_.pipeline(calls);
    std::vector<Connection::Call> signals;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const redisReply* r = replies[i].get();
      if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        throw ReplyError("reap: unexpected reply");
      const std::string tag = as_string(r->element[0]);
      if (tag == "alive") {
        out.push_back(ReapOutcome::alive);
      } else if (tag == "gone") {
        out.push_back(ReapOutcome::gone);
      } else if (tag == "marked") {
        out.push_back(ReapOutcome::marked);
      } else if (tag == "waiting") {
        out.push_back(ReapOutcome::waiting);
      } else if (tag == "requeued") {
        out.push_back(ReapOutcome::requeued);
      } else if (tag == "deadlettered" && r->elements >= 2) {
        // The transition is durable (record, events stream); its live signal follows, built
        // here with the record's service type the step returned.
        ends[i].service_type = as_string(r->element[1]);
        signals.push_back(
            {nullptr, {}, {"PUBLISH", keys_.completed_channel(model), ends[i].payload()}});
        out.push_back(ReapOutcome::deadlettered);
      } else {
        throw ReplyError("reap: unexpected reply " + tag);
      }
    }
    if (!signals.empty()) conn_.pipeline(signals);
  }
  return out;
}

namespace {
std::string epoch_ms(WallTime t) {
  return std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}
}  // namespace

std::vector<std::string> JobStore::due_expiries(const std::string& model, WallTime now, int limit) {
  return as_strings(conn_
                        .command({"ZRANGEBYSCORE", keys_.expiries(model), "-inf", epoch_ms(now),
                                  "LIMIT", "0", std::to_string(limit)})
                        .get());
}

std::vector<std::string> JobStore::due_retries(const std::string& model, WallTime now, int limit) {
  return as_strings(conn_
                        .command({"ZRANGEBYSCORE", keys_.retries(model), "-inf", epoch_ms(now),
                                  "LIMIT", "0", std::to_string(limit)})
                        .get());
}

std::vector<bool> JobStore::requeue_retries(const std::string& model,
                                            const std::vector<std::string>& ids) {
  std::vector<Connection::Call> calls;
  calls.reserve(ids.size());
  for (const auto& id : ids)
    calls.push_back({&lua::requeue_retry,
                     {keys_.retries(model), keys_.pending(model), keys_.job(model, id),
                      keys_.paused(model), keys_.held(model)},
                     {id}});
  std::vector<bool> out;
  out.reserve(ids.size());
  if (calls.empty()) return out;
  for (const auto& r : conn_.pipeline(calls)) out.push_back(as_string(r.get()) == "requeued");
  return out;
}

FinishOutcome JobStore::retry(const std::string& model, const std::string& id,
                              const std::string& token, WallTime due, const std::string& failures) {
  auto r = conn_.eval(
      lua::retry,
      {keys_.job(model, id), keys_.lease(model, id), keys_.processing(model), keys_.retries(model)},
      {id, token, epoch_ms(due), format_rfc3339(due), failures, keys_.job_changed_channel(id)});
  const std::string tag = as_string(r.get());
  if (tag == "ok") return FinishOutcome::ok;
  if (tag == "terminal") return FinishOutcome::terminal;
  if (tag == "lease_lost") return FinishOutcome::lease_lost;
  return FinishOutcome::missing;
}

std::vector<bool> JobStore::expire(const std::string& model, const std::vector<std::string>& ids) {
  std::vector<Completion> ends;
  std::vector<Connection::Call> calls;
  for (const auto& id : ids) {
    ends.push_back(Completion::failure(id, model, "expired"));
    calls.push_back(
        {&lua::expire,
         {keys_.expiries(model), keys_.pending(model), keys_.job(model, id), keys_.events(model),
          keys_.held(model), keys_.retries(model), keys_.processing(model), keys_.dropped(model)},
         {id, format_rfc3339(ends.back().finished_at), std::to_string(kEventsMaxLen)}});
  }
  std::vector<bool> out;
  if (calls.empty()) return out;
  auto replies = conn_.pipeline(calls);
  // The transitions are durable (record, events stream); their live signals follow.
  std::vector<Connection::Call> signals;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const redisReply* r = replies[i].get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
      throw ReplyError("expire: unexpected reply");
    out.push_back(as_string(r->element[0]) == "expired");
    if (!out.back()) continue;
    ends[i].service_type = r->elements > 1 ? as_string(r->element[1]) : "";
    signals.push_back(
        {nullptr, {}, {"PUBLISH", keys_.completed_channel(model), ends[i].payload()}});
  }
  if (!signals.empty()) conn_.pipeline(signals);
  return out;
}

namespace {
std::string admitted_member(const std::string& model, const std::string& id) {
  return model + "/" + id;
}
}  // namespace

Connection::Call JobStore::admit_call(const Keys& keys, const std::string& tenant,
                                      const std::string& model, const std::string& id,
                                      const Quota& q) {
  return {&lua::admit,
          {keys.quota_bucket(tenant), keys.quota_admitted(tenant)},
          {std::to_string(q.max_pending), std::to_string(q.submits_per_minute),
           std::to_string(std::max<std::int64_t>(1, q.submit_burst)), admitted_member(model, id)}};
}

Admission JobStore::admit(const std::string& tenant, const std::string& model,
                          const std::string& id, const Quota& q) {
  auto call = admit_call(keys_, tenant, model, id, q);
  return admitted(conn_.eval(*call.script, std::move(call.keys), std::move(call.args)).get());
}

Admission JobStore::admitted(const redisReply* r) {
  throw_if_error(r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) throw ReplyError("admit: unexpected reply");
  const std::string tag = as_string(r->element[0]);
  if (tag == "ok") return {};
  if (tag == "max_pending") return {Admission::Outcome::max_pending, {}};
  if (tag == "rate" && r->elements > 1)
    return {Admission::Outcome::rate, std::chrono::milliseconds(as_integer(r->element[1]))};
  throw ReplyError("admit: unexpected reply " + tag);
}

void JobStore::release(const std::string& tenant, const std::string& model, const std::string& id) {
  conn_.command({"ZREM", keys_.quota_admitted(tenant), admitted_member(model, id)});
}

Connection::Call JobStore::release_call(
    const Keys& keys, const std::string& tenant,
    const std::vector<std::pair<std::string, std::string>>& jobs) {
  Connection::Call call;
  call.args.reserve(jobs.size() + 2);
  call.args.push_back("ZREM");
  call.args.push_back(keys.quota_admitted(tenant));
  for (const auto& [model, id] : jobs) call.args.push_back(admitted_member(model, id));
  return call;
}

void JobStore::renew(const std::string& tenant, const std::string& model, const std::string& id) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  conn_.command(
      {"ZADD", keys_.quota_admitted(tenant), "XX", std::to_string(ms), admitted_member(model, id)});
}

int JobStore::sweep_admissions(const std::string& tenant, WallTime cutoff) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(cutoff.time_since_epoch()).count();
  const std::string key = keys_.quota_admitted(tenant);
  int dropped = 0;
  for (const auto& member : as_strings(
           conn_.command({"ZRANGEBYSCORE", key, "-inf", std::to_string(ms), "LIMIT", "0", "1000"})
               .get())) {
    const auto slash = member.find('/');
    if (slash == std::string::npos) continue;
    auto status = as_optional_string(
        conn_
            .command({"HGET", keys_.job(member.substr(0, slash), member.substr(slash + 1)),
                      std::string(field::status)})
            .get());
    auto st = status ? parse_status(*status) : std::nullopt;
    if (st && !is_terminal(*st)) continue;  // a live job holds its slot
    conn_.command({"ZREM", key, member});
    ++dropped;
  }
  return dropped;
}

std::vector<std::pair<std::string, std::int64_t>> JobStore::index_page(const std::string& tenant,
                                                                       std::int64_t newest_us,
                                                                       std::int64_t oldest_us,
                                                                       int count) {
  auto r =
      conn_.command({"ZREVRANGEBYSCORE", keys_.tenant_jobs(tenant), std::to_string(newest_us),
                     std::to_string(oldest_us), "WITHSCORES", "LIMIT", "0", std::to_string(count)});
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (auto& [member, score] : as_pairs(r.get()))
    out.emplace_back(member, static_cast<std::int64_t>(std::stod(score)));
  return out;
}

std::vector<std::string> JobStore::list(const std::string& key) {
  return as_strings(conn_.command({"LRANGE", key, "0", "-1"}).get());
}

std::vector<std::string> JobStore::hash_keys(const std::string& key) {
  return as_strings(conn_.command({"HKEYS", key}).get());
}

std::optional<JobRecord> JobStore::get(const std::string& model, const std::string& id) {
  return record_of(conn_.command({"HGETALL", keys_.job(model, id)}).get());
}

std::optional<JobRecord> JobStore::record_of(const redisReply* r) {
  throw_if_error(r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return std::nullopt;
  return JobRecord::from_fields(as_pair_views(r));
}

std::optional<JobRecord> JobStore::get_watched(const std::string& model, const std::string& id,
                                               const std::string& tenant,
                                               const std::string& service_type) {
  auto call = get_watched_call(keys_, model, id, tenant, service_type);
  return record_of(conn_.eval(*call.script, std::move(call.keys), std::move(call.args)).get());
}

Connection::Call JobStore::get_watched_call(const Keys& keys, const std::string& model,
                                            const std::string& id, const std::string& tenant,
                                            const std::string& service_type) {
  return {&lua::watch, {keys.job(model, id)}, {tenant, service_type}};
}

}  // namespace relay::redis
