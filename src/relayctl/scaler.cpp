#include "relayctl/scaler.hpp"

#include <signal.h>

#include "common/periodic.hpp"
#include "redis/job_store.hpp"

namespace relay::ctl {

int Scaler::running(const std::string& model) const {
  auto it = state_.find(model);
  return it == state_.end() ? 0 : static_cast<int>(it->second.relays.size());
}

void Scaler::pass() {
  auto& c = conn_.get();
  auto now = std::chrono::steady_clock::now();
  for (const auto& m : p_.models) {
    auto& st = state_[m.model];
    // Reap relays that exited.
    for (auto it = st.relays.begin(); it != st.relays.end();) {
      if (auto code = (*it)->poll()) {
        if (*code != 0) {
          ++st.failures;
          auto delay = std::chrono::seconds(std::min(30, 1 << std::min(st.failures, 5)));
          st.next_start = now + delay;
          print_line("[scaler] relay for " + m.model + " exited with " + std::to_string(*code) +
                     "; next start in " + std::to_string(delay.count()) + "s");
        } else {
          st.failures = 0;
        }
        it = st.relays.erase(it);
      } else {
        ++it;
      }
    }
    auto pending = redis::JobStore(c, p_.keys).pending_count(m.model);
    if (pending <= 0 || now < st.next_start) continue;
    // One relay per waiting job, up to the maximum; the running ones will take theirs first.
    int want = static_cast<int>(std::min<long long>(pending, m.max_relays)) -
               static_cast<int>(st.relays.size());
    for (int i = 0; i < want; ++i) {
      ++st.started;
      st.relays.push_back(
          std::make_unique<Child>("relay " + m.model + " #" + std::to_string(st.started),
                                  std::vector<std::string>{p_.relay_binary}, m.relay_env));
    }
  }
}

void Scaler::run(std::stop_token stop) {
  run_periodically({"scaler", p_.interval,
                    [this] {
                      pass();
                      return false;
                    },
                    [this] { conn_.reset(); }},
                   stop);
}

void Scaler::stop_all(std::chrono::milliseconds grace) {
  for (auto& [model, st] : state_)
    for (auto& r : st.relays) r->signal(SIGTERM);
  for (auto& [model, st] : state_) {
    for (auto& r : st.relays) r->wait(grace);
    st.relays.clear();
  }
}

}  // namespace relay::ctl
