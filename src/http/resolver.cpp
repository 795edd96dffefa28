#include "http/resolver.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/thread_name.hpp"
#include "common/time.hpp"

namespace relay::http {
namespace {

using Clock = std::chrono::steady_clock;

Resolution unavailable(std::string why) {
  return {Resolution::Outcome::unavailable, {}, std::move(why)};
}

}  // namespace

struct Resolver::State {
  struct Entry {
    bool started = false;    // a lookup thread took it
    bool done = false;       // answered
    bool outwaited = false;  // a caller's wait ran out while it was looked up: it is slow
    std::size_t waiters = 0;
    Resolution answer;
    Clock::time_point expires;
  };

  Options options;
  Lookup lookup;
  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable_any answer_cv;  // (waits that a stop token may end)
  std::unordered_map<std::string, Entry> entries;
  std::deque<std::string> queue;      // names waiting for a lookup thread
  std::size_t waiting = 0;            // callers waiting for an answer
  std::size_t threads = 0, idle = 0;  // lookup threads started (on demand), and waiting for work
  bool stopping = false;

  // One lookup thread. It holds the state, not the Resolver: a lookup outliving the Resolver
  // finishes here and is dropped with the last reference.
  static void run(std::shared_ptr<State> s) {
    name_this_thread("dns");
    std::unique_lock lock(s->mu);
    for (;;) {
      ++s->idle;
      s->work_cv.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
      --s->idle;
      if (s->stopping) return;
      std::string host = std::move(s->queue.front());
      s->queue.pop_front();
      auto it = s->entries.find(host);
      // (A name queued twice — dropped from its first turn, then asked again — is taken once.)
      if (it == s->entries.end() || it->second.started) continue;
      if (it->second.waiters == 0) {
        // Queued behind slow lookups until everyone asking gave up: not looked up, so that
        // abandoned names do not take the threads after them.
        s->entries.erase(it);
        continue;
      }
      it->second.started = true;
      lock.unlock();
      Resolution answer;
      try {
        answer = s->lookup(host);
      } catch (const std::exception& e) {
        answer = unavailable(e.what());
      }
      lock.lock();
      auto& e = s->entries[host];
      e.started = e.done = true;
      e.expires =
          Clock::now() +
          (answer.outcome == Resolution::Outcome::ok ? s->options.ttl : s->options.negative_ttl);
      e.answer = std::move(answer);
      s->answer_cv.notify_all();
    }
  }

  // Room for one more name: expired answers go first; nothing is dropped while looked up.
  bool make_room(Clock::time_point now) {
    if (entries.size() < options.max_entries) return true;
    std::erase_if(entries,
                  [&](const auto& kv) { return kv.second.done && kv.second.expires <= now; });
    if (entries.size() < options.max_entries) return true;
    std::erase_if(entries, [](const auto& kv) { return kv.second.done; });
    return entries.size() < options.max_entries;
  }
};

Resolver::Resolver(Options options, Lookup lookup) : state_(std::make_shared<State>()) {
  state_->options = options;
  state_->options.lookups = std::max<std::size_t>(1, options.lookups);
  state_->lookup = std::move(lookup);
}

Resolver::~Resolver() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->work_cv.notify_all();
}

Resolution Resolver::resolve(const std::string& host, std::stop_token stop) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1)
    return {Resolution::Outcome::ok, {host}, {}};

  State& s = *state_;
  const Options& o = s.options;
  std::unique_lock lock(s.mu);
  const auto now = Clock::now();
  auto it = s.entries.find(host);
  if (it != s.entries.end() && it->second.done && it->second.expires <= now) {
    s.entries.erase(it);
    it = s.entries.end();
  }
  if (it != s.entries.end() && it->second.done) return it->second.answer;
  if (it != s.entries.end() && it->second.outwaited)
    return unavailable("did not resolve within " + format_duration(o.timeout) +
                       " (its lookup is still running)");
  if (s.waiting >= o.max_waiting)
    return unavailable("cannot be resolved now: too many requests waiting for name lookups");
  if (it == s.entries.end()) {
    if (!s.make_room(now)) return unavailable("cannot be resolved now: too many names");
    it = s.entries.emplace(host, State::Entry{}).first;
    s.queue.push_back(host);
    // Threads start when first needed (a relay that never looks a name up starts none), up to
    // `lookups`; then they stay. Beyond them names queue, each wait still bounded by timeout.
    if (s.idle == 0 && s.threads < o.lookups) {
      ++s.threads;
      std::thread(&State::run, state_).detach();
    } else {
      s.work_cv.notify_one();
    }
  }
  ++s.waiting;
  ++it->second.waiters;
  // (Entries with waiters stay: make_room drops only answered ones, a thread only unwanted ones.)
  const bool answered = s.answer_cv.wait_until(lock, stop, now + o.timeout, [&] {
    auto e = s.entries.find(host);
    return e == s.entries.end() || e->second.done;
  });
  --s.waiting;
  auto e = s.entries.find(host);
  if (e == s.entries.end()) return unavailable("not resolved: the lookup was abandoned");
  --e->second.waiters;
  if (answered) return e->second.answer;
  if (stop.stop_requested()) return unavailable("not resolved: the lookup was abandoned");
  // Slow only if it was being looked up: one queued behind slow names is not marked.
  if (e->second.started) e->second.outwaited = true;
  return unavailable("did not resolve within " + format_duration(o.timeout));
}

Resolution Resolver::system_lookup(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    // A name that does not exist, or exists without addresses, will not do; anything else
    // (EAI_AGAIN: the name server did not answer or failed) may pass.
    if (rc == EAI_NONAME || rc == EAI_NODATA || rc == 0)
      return {Resolution::Outcome::not_found, {}, "does not resolve"};
    return unavailable(std::string("cannot be resolved now: ") + ::gai_strerror(rc));
  }
  Resolution r{Resolution::Outcome::ok, {}, {}};
  for (addrinfo* p = res; p; p = p->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (p->ai_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, ip, sizeof ip);
    else if (p->ai_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr, ip, sizeof ip);
    else
      continue;
    r.addresses.emplace_back(ip);
  }
  ::freeaddrinfo(res);
  if (r.addresses.empty()) return {Resolution::Outcome::not_found, {}, "does not resolve"};
  return r;
}

}  // namespace relay::http
