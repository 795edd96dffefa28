#pragma once
// Wakes long-polling requests when their job ends. One Redis connection in subscribe mode
// (PSUBSCRIBE <prefix>job:*:done) serves every waiter of this gateway; a waiter registers a
// wake-up callback for its job id. If the subscription drops, every waiter is woken so that it
// re-reads its job (a notice may have been missed meanwhile).

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
  // Wake is called at most once per notice until the registration is destroyed.
  std::unique_ptr<Registration> watch(const std::string& job_id, Wake wake);
  void run(std::stop_token stop);
  // Wakes every waiter (they re-read their job): after a lost subscription, and at shutdown.
  void wake_all();

 private:
  redis::Endpoint ep_;
  redis::Keys keys_;
  mutable std::mutex mu_;
  std::multimap<std::string, std::pair<std::uint64_t, Wake>> waiters_;
  std::uint64_t next_token_ = 0;
  std::optional<redis::Subscription> sub_;  // guarded by mu_ for interrupt()
};

}  // namespace relay::gateway
