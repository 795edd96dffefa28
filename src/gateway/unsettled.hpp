#pragma once
// Submissions answered 503 whose job may exist all the same: a step creating the job was sent
// and its reply never came — the connection broke, or Redis stayed silent (a frozen process, a
// command blocking it) past redis.retry_timeout and may run the step when it wakes. Deleting
// the input then could leave a job without one; keeping it for ever leaks it when no job came.
// So the input is kept, and listed here; the GC (gc.cpp) holds each for deletion once Redis
// answers (Schedules::hold_upload, due after idempotency.reservation) and, when that falls due,
// deletes the input only if no job record has it. A gateway stopped before the hold is written
// leaves the input in storage, as a crash between storing an input and creating its job does.

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace relay::gateway {

class Unsettled {
 public:
  struct Item {
    std::string model, service_type, job_id;
  };
  void add(Item item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
  }
  std::vector<Item> take() {
    std::lock_guard lock(mu_);
    return std::exchange(items_, {});
  }
  // Those not held yet (Redis away again), for the next pass.
  void put_back(std::vector<Item> items) {
    std::lock_guard lock(mu_);
    for (auto& i : items) items_.push_back(std::move(i));
  }

 private:
  std::mutex mu_;
  std::vector<Item> items_;
};

}  // namespace relay::gateway
