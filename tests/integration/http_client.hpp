#pragma once
// A small HTTP client for tests (libcurl), independent of the gateway's own HTTP code.

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace relay::testing {

struct HttpResult {
  long status = 0;  // 0: no answer (connection refused, reset...)
  std::string body;
  std::map<std::string, std::string> headers;  // lowercase names
};

struct FormPart {
  std::string name, value, filename = {}, content_type = {};
};

HttpResult http(const std::string& method, const std::string& url,
                const std::vector<std::string>& headers = {}, const std::string& body = {},
                const std::vector<FormPart>& form = {}, long timeout_ms = 60'000);

// A Server-Sent Events stream read on its own thread until the server ends it, the timeout, or
// destruction.
struct SseEvent {
  std::string id, name, data;
};
class EventStream {
 public:
  EventStream(const std::string& url, std::vector<std::string> headers = {},
              long timeout_ms = 60'000);
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;
  std::vector<SseEvent> events() const;  // the complete events so far (comments skipped)
  std::string raw() const;               // everything received
  bool ended() const;                    // the server closed the stream (or it failed)
  long status() const;                   // the HTTP status, once the header came

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A string member of a JSON object body ("" when absent or not JSON).
std::string field(const HttpResult& r, const char* key);

}  // namespace relay::testing
