#pragma once
// The gateway's metrics (SPEC §11) and the Prometheus text format writer. Counters are updated
// from any thread; /metrics renders them together with gauges read from Redis at scrape time.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace relay::gateway {

class Counter {
 public:
  void add(std::uint64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

// A counter family with labels, e.g. jobs by {service_type}.
class LabeledCounter {
 public:
  void add(const std::vector<std::string>& label_values, std::uint64_t n = 1);
  std::map<std::vector<std::string>, std::uint64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::uint64_t> values_;
};

// A histogram family with labels; buckets in seconds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {}
  void observe(const std::vector<std::string>& label_values, double seconds);
  struct Series {
    std::vector<std::uint64_t> buckets;  // cumulative counts per bound
    std::uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::vector<std::string>, Series> snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Series> series_;
};

struct Metrics {
  LabeledCounter requests;  // {route, status}
  Histogram request_seconds{{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120}};  // {route}
  LabeledCounter jobs_submitted;                                                   // {service_type}
  LabeledCounter jobs_finished;  // {model, status}
  Counter reaped, deadlettered;
  LabeledCounter expired;           // {model}: queue deadlines passed in pending
  LabeledCounter quota_refusals;    // {tenant, limit}
  LabeledCounter webhook_attempts;  // {outcome}
  Counter webhook_deferrals;        // put back for a receiver with its share in hand
  // {reason}: refused (the URL may not be called), gone (410), expired (webhooks.max_age):
  // deliveries that will never be tried again, the receiver's user never told of the job's event.
  LabeledCounter webhooks_given_up;
  // Inference jobs take from milliseconds to an hour: one set of bounds for their durations.
  Histogram job_stage_seconds{
      {0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}};  // {model, stage}
  Histogram job_end_to_end_seconds{
      {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400}};        // {model, status}
  Histogram webhook_seconds{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};  // {outcome}
};
Metrics& metrics();
// A finished job's timings (the relay's JSON, milliseconds per stage) into the stage and
// end-to-end histograms. Stages outside the known set are left out (bounded labels).
void observe_timings(const std::string& model, const std::string& status,
                     const std::string& timings_json);

// This process's memory, read at scrape time: what the kernel holds for it (resident set: what a
// cgroup's limit counts), and what of its heap is in use (malloc's own count, every arena and
// mmapped block). The two differ by what malloc keeps freed but not returned — which depends on
// which threads happened to allocate — so the heap figure is the one that follows what the
// gateway holds (connections, buffers), the resident one what it costs.
struct ProcessMemory {
  double resident_bytes = 0;
  double heap_in_use_bytes = 0;
};
ProcessMemory process_memory();

// Prometheus text exposition format 0.0.4.
class PrometheusWriter {
 public:
  void counter(const std::string& name, const std::string& help, std::uint64_t value);
  void counter(const std::string& name, const std::string& help,
               const std::vector<std::string>& label_names,
               const std::map<std::vector<std::string>, std::uint64_t>& values);
  void gauge(const std::string& name, const std::string& help,
             const std::vector<std::string>& label_names,
             const std::map<std::vector<std::string>, double>& values);
  void histogram(const std::string& name, const std::string& help,
                 const std::vector<std::string>& label_names, const Histogram& h);
  const std::string& text() const { return out_; }

 private:
  void header(const std::string& name, const std::string& help, const char* type);
  std::string out_;
};

// Escapes a label value: backslash, double quote and newline.
std::string escape_label(const std::string& v);

}  // namespace relay::gateway
