#include "common/log.hpp"

#include <limits.h>  // PIPE_BUF
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>

#include "common/time.hpp"

namespace relay::log {
namespace {

struct State {
  std::atomic<Level> level = Level::info;  // read by every call, before anything else
  std::mutex mu;                           // the rest, never held across a system call
  bool json = true;
  std::string component;
  std::map<std::string, std::string, std::less<>> traces;  // job id -> trace id (TraceScope)
  // Lines go out without a lock between threads: one write(2) of at most PIPE_BUF bytes is
  // whole on a pipe, and a file's writes do not interleave (Linux holds the file's lock for
  // each). A longer line (rare: an error quoting a long message) could be split on a pipe, so
  // it holds this exclusively, the short ones sharing it. A lock held across the write made
  // a relay's slots queue behind each other's log lines: a futex sleep per job or so.
  std::shared_mutex out;
};

State& state() {
  static State s;
  return s;
}

std::string_view level_name(Level l) {
  switch (l) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
  }
  return "info";
}

// Straight to the descriptor: stderr is unbuffered, and stdio's own lock is what is avoided.
void write_all(std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to log to: nothing better to do
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Whole lines out (see State::out).
void emit(std::string_view lines) {
  if (lines.size() <= PIPE_BUF) {
    std::shared_lock lock(state().out);
    write_all(lines);
  } else {
    std::unique_lock lock(state().out);
    write_all(lines);
  }
}

constexpr std::size_t kDeferredMax = 64 * 1024;
thread_local std::string* deferred = nullptr;  // the outermost Deferred's lines

}  // namespace

void set_level(std::string_view level) {
  for (Level l : {Level::debug, Level::info, Level::warn, Level::error}) {
    if (level_name(l) == level) {
      state().level = l;
      return;
    }
  }
  throw std::invalid_argument("unknown log level '" + std::string(level) + "'");
}

void set_format(std::string_view format) {
  if (format != "json" && format != "text")
    throw std::invalid_argument("unknown log format '" + std::string(format) + "'");
  std::lock_guard lock(state().mu);
  state().json = format == "json";
}

void set_component(std::string_view component) {
  std::lock_guard lock(state().mu);
  state().component = component;
}

TraceScope::TraceScope(std::string job_id, std::string trace_id) : job_id_(std::move(job_id)) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.traces[job_id_] = std::move(trace_id);
}

TraceScope::~TraceScope() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.traces.erase(job_id_);
}

void write(Level level, std::string_view msg, const boost::json::object& fields) {
  auto& s = state();
  if (level < s.level.load(std::memory_order_relaxed)) return;
  // The lock is held to read the settings, not to format nor to write: every thread logs.
  bool json = true;
  std::string component, trace_id;
  {
    std::lock_guard lock(s.mu);
    json = s.json;
    component = s.component;
    if (!s.traces.empty() && !fields.contains("trace_id"))
      if (auto* id = fields.if_contains("job_id"); id && id->is_string())
        if (auto it = s.traces.find(std::string_view(id->get_string())); it != s.traces.end())
          trace_id = it->second;
  }
  std::string line;
  line.reserve(256);
  if (json) {
    // Written straight into the line: a merged JSON object copied every field (an allocation
    // each), which was most of a log line's cost — and there are several per job.
    const bool plain_keys = std::none_of(fields.begin(), fields.end(), [](const auto& kv) {
      return kv.key() == "ts" || kv.key() == "level" || kv.key() == "component" ||
             kv.key() == "msg";
    });
    if (plain_keys) {
      line += "{\"ts\":\"";
      line += format_rfc3339(wall_now());
      line += "\",\"level\":\"";
      line += level_name(level);
      line += '"';
      if (!component.empty()) {
        line += ",\"component\":";
        line += boost::json::serialize(boost::json::string_view(component));
      }
      line += ",\"msg\":";
      line += boost::json::serialize(boost::json::string_view(msg));
      for (const auto& kv : fields) {
        line += ',';
        line += boost::json::serialize(kv.key());
        line += ':';
        line += boost::json::serialize(kv.value());
      }
      if (!trace_id.empty()) {
        line += ",\"trace_id\":";
        line += boost::json::serialize(boost::json::string_view(trace_id));
      }
      line += '}';
    } else {  // a field named like one of ours replaces it, as in an object
      boost::json::object o;
      o["ts"] = format_rfc3339(wall_now());
      o["level"] = level_name(level);
      if (!component.empty()) o["component"] = component;
      o["msg"] = msg;
      for (const auto& kv : fields) o[kv.key()] = kv.value();
      if (!trace_id.empty()) o["trace_id"] = trace_id;
      line = boost::json::serialize(o);
    }
  } else {
    line =
        format_rfc3339(wall_now()) + " " + std::string(level_name(level)) + " " + std::string(msg);
    for (const auto& kv : fields) {
      line += " " + std::string(kv.key()) + "=";
      line += kv.value().is_string() ? std::string(kv.value().get_string())
                                     : boost::json::serialize(kv.value());
    }
  }
  line += '\n';
  if (!deferred) return emit(line);
  deferred->append(line);
  if (deferred->size() >= kDeferredMax) {
    emit(*deferred);
    deferred->clear();
  }
}

Deferred::Deferred() {
  if (deferred) return;
  deferred = &lines_;
  outermost_ = true;
}

Deferred::~Deferred() {
  if (!outermost_) return;
  deferred = nullptr;
  if (!lines_.empty()) emit(lines_);
}

}  // namespace relay::log
