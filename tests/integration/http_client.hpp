#pragma once
// A small HTTP client for tests (libcurl), independent of the gateway's own HTTP code.

#include <map>
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

// A string member of a JSON object body ("" when absent or not JSON).
std::string field(const HttpResult& r, const char* key);

}  // namespace relay::testing
