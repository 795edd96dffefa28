#pragma once
// What the gateway says about a job, shared by the API and the webhook sender.

#include <optional>
#include <string>
#include <vector>

#include "redis/job_record.hpp"

namespace relay::gateway {

// A job record as the API's JSON (SPEC §2); webhook bodies are the same document.
std::string job_json(const JobRecord& r);

// Whether a callback URL may be called: http(s), and unless allow_private, no host that is or
// resolves to a private, loopback, link-local or otherwise non-public address. Returns the
// reason it may not, or nullopt. `addresses` receives what the host resolved to (to pin them).
std::optional<std::string> check_callback_url(const std::string& url, bool allow_private,
                                              std::vector<std::string>* addresses = nullptr);
bool is_public_address(const std::string& ip);

}  // namespace relay::gateway
