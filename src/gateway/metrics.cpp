#include "gateway/metrics.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <cstdio>
#include <cstdlib>

// jemalloc's control interface when it is the allocator linked in; null otherwise.
extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp,
                       std::size_t newlen) __attribute__((weak));
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// A sanitizer's count of what its allocator has handed out (sanitizer/allocator_interface.h,
// which GCC's packages do not install): AddressSanitizer and ThreadSanitizer replace malloc.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace relay::gateway {

Metrics& metrics() {
  static Metrics m;
  return m;
}

void observe_timings(const std::string& model, const std::string& status,
                     const std::string& timings_json) {
  if (timings_json.empty()) return;
  boost::system::error_code ec;
  auto v = boost::json::parse(timings_json, ec);
  if (ec || !v.is_object()) return;
  static constexpr std::string_view kStages[] = {"queue_wait", "download", "decrypt",
                                                 "inference",  "upload",   "total"};
  for (const auto& [key, value] : v.as_object()) {
    if (!value.is_number()) continue;
    const double seconds = value.to_number<double>() / 1000.0;
    if (key == "end_to_end")
      metrics().job_end_to_end_seconds.observe({model, status}, seconds);
    else if (std::find(std::begin(kStages), std::end(kStages), std::string_view(key)) !=
             std::end(kStages))
      metrics().job_stage_seconds.observe({model, std::string(key)}, seconds);
  }
}

void LabeledCounter::add(const std::vector<std::string>& label_values, std::uint64_t n) {
  std::lock_guard lock(mu_);
  values_[label_values] += n;
}

std::map<std::vector<std::string>, std::uint64_t> LabeledCounter::snapshot() const {
  std::lock_guard lock(mu_);
  return values_;
}

void Histogram::observe(const std::vector<std::string>& label_values, double seconds) {
  std::lock_guard lock(mu_);
  auto& s = series_[label_values];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (seconds <= bounds_[i]) ++s.buckets[i];
  ++s.count;
  s.sum += seconds;
}

std::map<std::vector<std::string>, Histogram::Series> Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  return series_;
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

std::string labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra = {}) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape_label(values[i]) + "\"";
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? "" : "{" + out + "}";
}

// Shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
// The shortest plain decimal that reads back as v: "30", "0.005", never "3e+01" (bucket
// bounds are matched as text by dashboards and recording rules).
std::string number(double v) {
  char buf[400];
  for (int decimals = 0; decimals <= 20; ++decimals) {
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);  // too small for plain decimals: exact anyway
  return buf;
}

}  // namespace

ProcessMemory process_memory() {
  ProcessMemory m;
  // statm: sizes in pages, the second the resident set.
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long size = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) == 2)
      m.resident_bytes =
          static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    std::fclose(f);
  }
  // jemalloc (the gateway's allocator, RELAY_JEMALLOC) counts what is allocated once its stats
  // are refreshed (a new "epoch"); a sanitizer's allocator its own way; glibc's malloc
  // through mallinfo2.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  m.heap_in_use_bytes = static_cast<double>(__sanitizer_get_current_allocated_bytes());
#else
  if (mallctl != nullptr) {
    std::uint64_t epoch = 1;
    std::size_t allocated = 0, len = sizeof allocated;
    if (mallctl("epoch", nullptr, nullptr, &epoch, sizeof epoch) == 0 &&
        mallctl("stats.allocated", &allocated, &len, nullptr, 0) == 0)
      m.heap_in_use_bytes = static_cast<double>(allocated);
  } else {
    const struct mallinfo2 mi = ::mallinfo2();
    m.heap_in_use_bytes = static_cast<double>(mi.uordblks + mi.hblkhd);
  }
#endif
  return m;
}

void PrometheusWriter::header(const std::string& name, const std::string& help, const char* type) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusWriter::counter(const std::string& name, const std::string& help,
                               std::uint64_t value) {
  header(name, help, "counter");
  out_ += name + " " + std::to_string(value) + "\n";
}

void PrometheusWriter::counter(const std::string& name, const std::string& help,
                               const std::vector<std::string>& label_names,
                               const std::map<std::vector<std::string>, std::uint64_t>& values) {
  header(name, help, "counter");
  for (const auto& [lv, v] : values)
    out_ += name + labels(label_names, lv) + " " + std::to_string(v) + "\n";
}

void PrometheusWriter::gauge(const std::string& name, const std::string& help,
                             const std::vector<std::string>& label_names,
                             const std::map<std::vector<std::string>, double>& values) {
  header(name, help, "gauge");
  for (const auto& [lv, v] : values)
    out_ += name + labels(label_names, lv) + " " + number(v) + "\n";
}

void PrometheusWriter::histogram(const std::string& name, const std::string& help,
                                 const std::vector<std::string>& label_names, const Histogram& h) {
  header(name, help, "histogram");
  for (const auto& [lv, s] : h.snapshot()) {
    for (size_t i = 0; i < h.bounds().size(); ++i)
      out_ += name + "_bucket" + labels(label_names, lv, "le=\"" + number(h.bounds()[i]) + "\"") +
              " " + std::to_string(s.buckets[i]) + "\n";
    out_ += name + "_bucket" + labels(label_names, lv, "le=\"+Inf\"") + " " +
            std::to_string(s.count) + "\n";
    out_ += name + "_sum" + labels(label_names, lv) + " " + number(s.sum) + "\n";
    out_ += name + "_count" + labels(label_names, lv) + " " + std::to_string(s.count) + "\n";
  }
}

}  // namespace relay::gateway
