#include "gateway/gc.hpp"

#include <condition_variable>
#include <mutex>

#include "common/log.hpp"
#include "redis/job_record.hpp"
#include "redis/job_store.hpp"

namespace relay::gateway {

int Gc::pass() {
  auto& c = conn_.get();
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  auto due = c.command({"ZRANGEBYSCORE", p_.keys.gc_due(), "-inf", std::to_string(now.count()),
                        "LIMIT", "0", "100"});
  int n = 0;
  for (size_t i = 0; due->type == REDIS_REPLY_ARRAY && i < due->elements; ++i) {
    std::string member = redis::as_string(due->element[i]);
    auto a = member.find('/'), b = member.rfind('/');
    if (a == std::string::npos || a == b) {
      c.command({"ZREM", p_.keys.gc_due(), member});
      continue;
    }
    std::string svc = member.substr(a + 1, b - a - 1), id = member.substr(b + 1);
    if (!p_.keep_objects) {
      try {
        p_.storage->remove(input_object_key(svc, id));
        p_.storage->remove(result_object_key(svc, id));
      } catch (const std::exception& e) {
        log::warn("gc: cannot delete objects; retrying later",
                  {{"job_id", id}, {"error", e.what()}});
        continue;  // stays due
      }
    }
    c.command({"DEL", p_.keys.webhook(redis::JobStore::webhook_id(id))});
    c.command({"ZREM", p_.keys.gc_due(), member});
    ++n;
  }
  return n;
}

void Gc::run(std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  while (!stop.stop_requested()) {
    try {
      if (pass() == 100) continue;  // a backlog: keep going
    } catch (const std::exception& e) {
      conn_.reset();
      log::debug("gc pass failed", {{"error", e.what()}});
    }
    std::unique_lock lock(mu);
    cv.wait_for(lock, stop, p_.interval, [] { return false; });
  }
}

}  // namespace relay::gateway
