#pragma once
// W3C Trace Context (traceparent, tracestate): a job carries its trace across the asynchronous
// hops — submit, the relay's request to the model, the webhooks — so a tracing system sees one
// trace, and every log line about the job names its trace_id. Propagation only: no spans are
// exported (no OpenTelemetry SDK is packaged for Debian 12).
//
//   traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>

#include <optional>
#include <string>
#include <string_view>

namespace relay {

struct TraceParent {
  std::string trace_id, parent_id, flags;
  std::string header() const { return "00-" + trace_id + "-" + parent_id + "-" + flags; }
};

// A valid traceparent (version 00, or a later version read as 00 would be, as the spec says);
// nullopt otherwise, including the all-zero ids the spec rules out.
std::optional<TraceParent> parse_traceparent(std::string_view header);
// A new trace, not sampled, for a job submitted without one (its logs still correlate).
TraceParent new_trace();
// What a hop sends on: the same trace and flags, a new parent id (this hop's span).
TraceParent child_of(const TraceParent& parent);
// tracestate as received when it fits the spec's bounds (at most 512 characters of printable
// ASCII); "" otherwise (dropping it is what the spec allows).
std::string clean_tracestate(std::string_view header);

}  // namespace relay
