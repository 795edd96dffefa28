#pragma once
// Where the system may connect on a client's say-so (SSRF): webhook callbacks (the gateway) and
// inputs by URL (the relay). Checked when the URL is given, and again, with the addresses
// pinned for the connection, when it is used.

#include <optional>
#include <string>
#include <vector>

namespace relay::http {

struct Destination {
  std::vector<std::string> schemes;  // e.g. {"http", "https"}
  bool allow_private = false;
  std::string what;           // the URL's name in messages: "callback_url", "input_url"
  std::string allow_setting;  // the setting that allows private addresses, for messages
};

// Whether url may be called: one of the schemes, no credentials in it, and unless
// allow_private, no host that is or resolves to a private, loopback, link-local or otherwise
// non-public address. Returns the reason it may not, or nullopt. `addresses` receives what the
// host resolved to (to pin them).
std::optional<std::string> check_destination(const std::string& url, const Destination& rules,
                                             std::vector<std::string>* addresses = nullptr);
bool is_public_address(const std::string& ip);

}  // namespace relay::http
