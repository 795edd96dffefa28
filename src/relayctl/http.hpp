#pragma once
// relayctl's calls to the gateway API, on the project's libcurl wrapper (src/http/).

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace relay::ctl {

struct HttpAnswer {
  long status = 0;  // 0: no answer
  std::string body, error;
  std::map<std::string, std::string> headers;  // lowercase names
};

struct Upload {
  std::string file;  // streamed from disk as the "file" part (none when empty: an input_url)
  std::map<std::string, std::string> fields;  // other form fields
  bool progress = false;                      // a progress bar on stderr
};

// Where a successful (2xx) answer's body goes instead of HttpAnswer::body: written on at the
// file's position. `resuming`: the file holds the start of the body already, and an answer other
// than 206 (the rest, asked for with Range) empties it first — the whole body is coming. Other
// answers' bodies stay in `body`.
struct SaveTo {
  std::FILE* file = nullptr;
  bool resuming = false;
};

HttpAnswer http_call(const std::string& method, const std::string& url,
                     const std::vector<std::string>& headers = {}, const Upload* upload = nullptr,
                     SaveTo save_to = {}, long timeout_ms = 0);

// GET url, each piece of the body handed to on_data as it arrives (an event stream) until it
// returns false, the server ends it, or timeout_ms. The answer's status (0: none, error set).
HttpAnswer http_stream(const std::string& url, const std::vector<std::string>& headers,
                       const std::function<bool(std::string_view)>& on_data, long timeout_ms);

}  // namespace relay::ctl
