#pragma once
// Wakes long-polling requests when their job ends, and live event streams when it changes. One
// Redis connection in subscribe mode (PSUBSCRIBE <prefix>job:*, which matches job:<id>:done and
// job:<id>:changed) serves every waiter of this gateway; a waiter registers a wake-up callback
// for its job id. If the subscription drops, every waiter is woken so that it re-reads its job
// (a notice may have been missed meanwhile).

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "redis/subscription.hpp"

namespace relay::gateway {

class Notifier {
 public:
  using Wake = std::function<void()>;  // called on the notifier thread: keep it short

  Notifier(redis::Endpoint ep, redis::Keys keys) : ep_(std::move(ep)), keys_(std::move(keys)) {}

  class Registration {
   public:
    Registration(Notifier& n, std::string id, std::uint64_t token)
        : n_(n), id_(std::move(id)), token_(token) {}
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    Notifier& n_;
    std::string id_;
    std::uint64_t token_;
  };
  // Wake is called once per notice until the registration is destroyed: the job's end, and
  // with every_change its other changes too.
  std::unique_ptr<Registration> watch(const std::string& job_id, Wake wake,
                                      bool every_change = false);
  void run(std::stop_token stop);
  // Wakes every waiter (they re-read their job): after a lost subscription, and at shutdown.
  void wake_all();

 private:
  redis::Endpoint ep_;
  redis::Keys keys_;
  mutable std::mutex mu_;
  struct Waiter {
    std::uint64_t token;
    Wake wake;
    bool every_change;
  };
  std::multimap<std::string, Waiter> waiters_;
  std::uint64_t next_token_ = 0;
  std::optional<redis::Subscription> sub_;  // guarded by mu_ for interrupt()
};

}  // namespace relay::gateway
