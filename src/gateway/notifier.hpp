#pragma once
// Wakes long-polling requests when their job ends, and live event streams when it changes. One
// Redis connection in subscribe mode (PSUBSCRIBE <prefix>job:*, which matches job:<id>:done and
// job:<id>:changed) serves every waiter of this gateway; a waiter registers a wake-up callback
// for its job id. If the subscription drops, every waiter is woken so that it re-reads its job
// (a notice may have been missed meanwhile).
// A long-poll registers after the read that flagged its job watched: an end announced in
// between reaches no waiter. So the ends heard with nobody waiting are kept for kRecentFor (at
// most kRecentMax of them), and a registration for one of them is woken at once — rather than
// every long-poll reading its job a second time after registering, a round trip and a trip to
// a request thread per waited job (issue 14). Past those bounds a notice can still be missed;
// the long-poll then answers at its deadline with the job as it is, as before.
// A relay's finish announces a waited-for job's end with the job's record (lua/finish.lua): a
// waiter gets that notice and can answer from it without reading the job (issue 14: a read
// was a round trip and two hand-offs between threads on the path to every waiting client). An
// end kept for a later registration keeps its notice too, within kRecentBytes in all.

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <utility>

#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "redis/subscription.hpp"

namespace relay::gateway {

class Notifier {
 public:
  // Called on the notifier thread (keep it short) with the notice: the job's record as a relay's
  // finish announced it (a JSON array of field, value), or anything else ("completed", "" when
  // everyone is woken) — then the waiter reads the job.
  using Wake = std::function<void(const std::string& notice)>;

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
  // Ends heard with no waiter, oldest first (see above); guarded by mu_.
  static constexpr std::chrono::seconds kRecentFor{10};
  static constexpr std::size_t kRecentMax = 100'000;
  static constexpr std::size_t kRecentBytes = 32 << 20;  // of the notices kept with them
  void remember_end(const std::string& job_id, const std::string& notice);
  struct Recent {
    std::string id;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Recent> recent_;
  std::unordered_map<std::string, std::string> recent_notices_;  // by id
  std::size_t recent_bytes_ = 0;
  std::optional<redis::Subscription> sub_;  // guarded by mu_ for interrupt()
};

}  // namespace relay::gateway
