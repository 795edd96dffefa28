#include "gateway/metrics.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

TEST(Prometheus, CountersGaugesAndHistogramsInTextFormat) {
  PrometheusWriter w;
  w.counter("relay_reaped_total", "Jobs requeued by the reaper.", 3);
  LabeledCounter jobs;
  jobs.add({"ocr"}, 2);
  jobs.add({"asr"});
  w.counter("relay_jobs_submitted_total", "Jobs submitted.", {"service_type"}, jobs.snapshot());
  w.gauge("relay_queue_depth", "Jobs waiting.", {"model", "queue"}, {{{"m1", "pending"}, 4.0}});
  Histogram h({0.1, 1});
  h.observe({"GET /healthz"}, 0.05);
  h.observe({"GET /healthz"}, 0.5);
  h.observe({"GET /healthz"}, 5);
  w.histogram("relay_http_request_duration_seconds", "Latency.", {"route"}, h);
  EXPECT_EQ(w.text(),
            "# HELP relay_reaped_total Jobs requeued by the reaper.\n"
            "# TYPE relay_reaped_total counter\n"
            "relay_reaped_total 3\n"
            "# HELP relay_jobs_submitted_total Jobs submitted.\n"
            "# TYPE relay_jobs_submitted_total counter\n"
            "relay_jobs_submitted_total{service_type=\"asr\"} 1\n"
            "relay_jobs_submitted_total{service_type=\"ocr\"} 2\n"
            "# HELP relay_queue_depth Jobs waiting.\n"
            "# TYPE relay_queue_depth gauge\n"
            "relay_queue_depth{model=\"m1\",queue=\"pending\"} 4\n"
            "# HELP relay_http_request_duration_seconds Latency.\n"
            "# TYPE relay_http_request_duration_seconds histogram\n"
            "relay_http_request_duration_seconds_bucket{route=\"GET /healthz\",le=\"0.1\"} 1\n"
            "relay_http_request_duration_seconds_bucket{route=\"GET /healthz\",le=\"1\"} 2\n"
            "relay_http_request_duration_seconds_bucket{route=\"GET /healthz\",le=\"+Inf\"} 3\n"
            "relay_http_request_duration_seconds_sum{route=\"GET /healthz\"} 5.55\n"
            "relay_http_request_duration_seconds_count{route=\"GET /healthz\"} 3\n");
}

// Bucket bounds are plain decimals: dashboards and recording rules match le="30", not "3e+01".
TEST(Prometheus, BucketBoundsArePlainNumbers) {
  Histogram h({0.005, 30, 3600, 14400, 0.25});
  h.observe({"x"}, 1);
  PrometheusWriter w;
  w.histogram("h", "h.", {"l"}, h);
  for (const char* le : {"le=\"0.005\"", "le=\"30\"", "le=\"3600\"", "le=\"14400\"", "le=\"0.25\""})
    EXPECT_NE(w.text().find(le), std::string::npos) << le << "\n" << w.text();
  EXPECT_EQ(w.text().find("e+"), std::string::npos) << w.text();
}

TEST(Prometheus, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace relay::gateway
