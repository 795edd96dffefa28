#pragma once
// Every Redis key and channel name is built here and nowhere else (SPEC §3).
//
// With hash_tag on, each model's keys carry "{<model>}" so that all keys one Lua script touches
// hash to one Redis Cluster slot — the job record included: it becomes "job:{<model>}:<id>",
// which is why job() takes the model — and so do the webhook, GC and idempotency keys. Channels
// are not keys and keep their plain names. Redis Cluster mode turns the tag on (it is what makes
// each Lua step single-slot); redis/slot.hpp computes the slot, keys_test.cpp checks it.

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace relay::redis {

class Keys {
 public:
  Keys() = default;
  Keys(std::string prefix, bool hash_tag) : prefix_(std::move(prefix)), hash_tag_(hash_tag) {}

  std::string pending(std::string_view model) const { return model_key(model, "pending"); }
  std::string processing(std::string_view model) const { return model_key(model, "processing"); }
  std::string deadletter(std::string_view model) const { return model_key(model, "deadletter"); }
  // A paused model (lua/pause.lua): the flag, and the list that is its queue meanwhile (pending
  // stays empty, so the scaler, which counts pending, starts no pod).
  std::string paused(std::string_view model) const { return model_key(model, "paused"); }
  std::string held(std::string_view model) const { return model_key(model, "held"); }
  // Ids of jobs that ended (cancelled, expired) while deep in a long pending or held list, left
  // there for a take to drop when they reach the head (lua/cancel.lua, lua/expire.lua): a set,
  // so that the queue's depth leaves them out.
  std::string dropped(std::string_view model) const { return model_key(model, "dropped"); }
  std::string lease(std::string_view model, std::string_view id) const {
    return cat({prefix_, "relay:", open(), model, close(), ":lease:", id});
  }
  // A copy of the record of the job a relay's slot (taker) took last (lua/take.lua), read by a
  // plain HGETALL behind the take; it expires with the lease it came with.
  std::string taken(std::string_view model, std::string_view taker) const {
    return cat({prefix_, "relay:", open(), model, close(), ":taken:", taker});
  }
  // Durable log of terminal transitions (stream), read by the gateway's consumer group.
  std::string events(std::string_view model) const {
    return cat({prefix_, "jobs:", open(), model, close(), ":events"});
  }
  // The job record (hash).
  std::string job(std::string_view model, std::string_view id) const {
    return hash_tag_ ? cat({prefix_, "job:{", model, "}:", id}) : cat({prefix_, "job:", id});
  }

  // Queue deadlines: ids of jobs with a ttl by their expires_at (ms since the epoch), for the
  // gateway's expiry sweep.
  std::string expiries(std::string_view model) const { return model_key(model, "expiries"); }
  // Failed jobs waiting for their retry, by due time (ms since the epoch): not in pending, so
  // the scaler does not count them; the gateway's due sweep puts them back.
  std::string retries(std::string_view model) const { return model_key(model, "retries"); }
  // A tenant's jobs, newest last: "<service_type>/<id>" by creation time (ms since the epoch),
  // for listing; trimmed to the records' retention.
  std::string tenant_jobs(std::string_view tenant) const {
    return cat({prefix_, "relay:tenant:", open(), tenant, close(), ":jobs"});
  }
  // Quotas, per tenant (both in the tenant's slot with the hash tag): the submit-rate token
  // bucket, and the admitted jobs not yet terminal ("<model>/<id>" by admission time).
  std::string quota_bucket(std::string_view tenant) const { return tenant_key(tenant, "bucket"); }
  std::string quota_admitted(std::string_view tenant) const {
    return tenant_key(tenant, "admitted");
  }
  // Reaper bookkeeping (hash id -> first time, Redis clock ms, the id was seen lease-less).
  std::string suspects(std::string_view model) const { return model_key(model, "suspects"); }
  // Webhook deliveries: a sorted set of delivery ids by due time, and one hash per delivery.
  // Without the hash tag one set serves every model (the layout before Cluster support, kept
  // so that deliveries scheduled before an upgrade are still sent); with it, one per model, so
  // that schedule_webhook.lua's keys share the job's slot. Loops visit distinct_due_sets().
  std::string webhooks_due(std::string_view model) const {
    return hash_tag_ ? model_key(model, "webhooks:due") : cat({prefix_, "relay:webhooks:due"});
  }
  std::string webhook(std::string_view model, std::string_view delivery_id) const {
    return hash_tag_ ? cat({prefix_, "relay:{", model, "}:webhook:", delivery_id})
                     : cat({prefix_, "relay:webhook:", delivery_id});
  }
  // The models whose webhooks_due() and gc_due() sets a loop must visit to see them all: every
  // model with the tag, one (any) without, since then they share one set.
  std::vector<std::string> one_per_due_set(const std::vector<std::string>& models) const {
    if (hash_tag_ || models.empty()) return models;
    return {models.front()};
  }
  // Finished jobs whose objects are due for deletion ("<model>/<service_type>/<id>" by time);
  // per model with the hash tag, like webhooks_due().
  std::string gc_due(std::string_view model) const {
    return hash_tag_ ? model_key(model, "gc:due") : cat({prefix_, "relay:gc:due"});
  }
  // Idempotency-Key -> job id, per tenant (the key is hashed: clients choose its contents).
  // A key only ever names a job of the service type it was sent to (its model's, with the tag).
  std::string idempotency(std::string_view model, std::string_view tenant,
                          std::string_view key_hash) const {
    return hash_tag_ ? cat({prefix_, "relay:{", model, "}:idem:", tenant, ":", key_hash})
                     : cat({prefix_, "relay:idem:", tenant, ":", key_hash});
  }

  // Pub/sub channels.
  std::string completed_channel(std::string_view model) const {
    return cat({prefix_, "jobs:", model, ":completed"});
  }
  std::string cancel_channel(std::string_view model) const {
    return cat({prefix_, "relay:", model, ":cancel"});
  }
  std::string job_done_channel(std::string_view id) const {
    return cat({prefix_, "job:", id, ":done"});
  }
  // A job's other state changes (started, progress, back to pending), for live event streams;
  // terminal transitions are job_done_channel's.
  std::string job_changed_channel(std::string_view id) const {
    return cat({job_channel_prefix(), id, kChangedSuffix});
  }
  // What comes before a job's id in its channels, and after it in the changed one: for a script
  // that names a job's channel from an id it finds (take.lua).
  std::string job_channel_prefix() const { return cat({prefix_, "job:"}); }
  static constexpr std::string_view kChangedSuffix = ":changed";

  const std::string& prefix() const { return prefix_; }
  bool hash_tag() const { return hash_tag_; }

 private:
  // One allocation per name: a relay's take names up to 64 candidate jobs, three names each,
  // and chained `+` allocated at every step (a fifth of the relay's allocations per job).
  static std::string cat(std::initializer_list<std::string_view> parts) {
    size_t n = 0;
    for (auto p : parts) n += p.size();
    std::string out;
    out.reserve(n);
    for (auto p : parts) out.append(p);
    return out;
  }
  std::string_view open() const { return hash_tag_ ? "{" : ""; }
  std::string_view close() const { return hash_tag_ ? "}" : ""; }
  std::string tenant_key(std::string_view tenant, std::string_view suffix) const {
    return cat({prefix_, "relay:quota:", open(), tenant, close(), ":", suffix});
  }
  std::string model_key(std::string_view model, std::string_view suffix) const {
    return cat({prefix_, "relay:", open(), model, close(), ":", suffix});
  }

  std::string prefix_;
  bool hash_tag_ = false;
};

}  // namespace relay::redis
