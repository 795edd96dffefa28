#pragma once
// Structured logging: one JSON object per line on stderr, so that log shippers need no parsing
// rules. Every line about a job carries "job_id". Secrets and input contents are never logged.

#include <boost/json/object.hpp>
#include <string>
#include <string_view>

namespace relay::log {

enum class Level { debug, info, warn, error };

// Throws std::invalid_argument for an unknown level name ("debug", "info", "warn", "error").
void set_level(std::string_view level);
// "json" (default) or "text" (human-readable, for `relayctl up`).
void set_format(std::string_view format);
// A prefix on every line, e.g. the component name; included as "component".
void set_component(std::string_view component);

void write(Level level, std::string_view msg, const boost::json::object& fields = {});

// While a job is in hand, its trace: every line naming its job_id (from any thread: the
// heartbeat's, the cancel listener's) also gets its "trace_id".
class TraceScope {
 public:
  TraceScope(std::string job_id, std::string trace_id);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  std::string job_id_;
};
// While one lives, the lines its thread logs are kept and written together when it ends (or
// every 64 KiB): one system call for a batch's lines rather than one each, for a loop that logs
// a line per item (the gateway's completions). Nested ones leave it to the outermost. The lines
// of a process killed meanwhile are lost, so it spans a batch's work (its round trips
// included), never an idle wait.
class Deferred {
 public:
  Deferred();
  ~Deferred();
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;

 private:
  std::string lines_;
  bool outermost_ = false;
};

inline void debug(std::string_view m, const boost::json::object& f = {}) {
  write(Level::debug, m, f);
}
inline void info(std::string_view m, const boost::json::object& f = {}) {
  write(Level::info, m, f);
}
inline void warn(std::string_view m, const boost::json::object& f = {}) {
  write(Level::warn, m, f);
}
inline void error(std::string_view m, const boost::json::object& f = {}) {
  write(Level::error, m, f);
}

}  // namespace relay::log
