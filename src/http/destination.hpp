#pragma once
// Where the system may connect on a client's say-so (SSRF): webhook callbacks (the gateway) and
// inputs by URL (the relay). Checked when the URL is given, and again, with the addresses
// pinned for the connection, when it is used.

#include <optional>
#include <string>
#include <vector>

#include "http/resolver.hpp"

namespace relay::http {

struct Destination {
  std::vector<std::string> schemes;  // e.g. {"http", "https"}
  bool allow_private = false;
  std::string what;           // the URL's name in messages: "callback_url", "input_url"
  std::string allow_setting;  // the setting that allows private addresses, for messages
};

// Why a URL may not be called.
struct DestinationProblem {
  std::string reason;
  // Its host could not be resolved now (a name server slow or failing): the same URL may pass
  // later. Otherwise the URL will not do as it is.
  bool transient = false;
};

// Whether url may be called: one of the schemes, no credentials in it, and unless
// allow_private, no host that is or resolves to a private, loopback, link-local or otherwise
// non-public address. Returns why it may not, or nullopt. `addresses` receives what the host
// resolved to (to pin them). Through `resolver` when given (a deadline, a cache, the wait ended
// by `stop`; see resolver.hpp), else getaddrinfo on the calling thread, for as long as it takes.
std::optional<DestinationProblem> check_destination(const std::string& url,
                                                    const Destination& rules,
                                                    std::vector<std::string>* addresses = nullptr,
                                                    Resolver* resolver = nullptr,
                                                    std::stop_token stop = {});
bool is_public_address(const std::string& ip);

}  // namespace relay::http
