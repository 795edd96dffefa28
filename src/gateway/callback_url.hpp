#pragma once
// Where webhooks may go (SSRF): checked at submission, and again, with the addresses pinned,
// when a webhook is sent.

#include <optional>
#include <string>
#include <vector>

namespace relay::gateway {

// Whether a callback URL may be called: http(s), and unless allow_private, no host that is or
// resolves to a private, loopback, link-local or otherwise non-public address. Returns the
// reason it may not, or nullopt. `addresses` receives what the host resolved to (to pin them).
std::optional<std::string> check_callback_url(const std::string& url, bool allow_private,
                                              std::vector<std::string>* addresses = nullptr);
bool is_public_address(const std::string& ip);

}  // namespace relay::gateway
