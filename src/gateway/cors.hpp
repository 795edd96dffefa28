#pragma once
// Cross-origin requests (CORS, WHATWG Fetch §3.2): which web origins a browser may call the API
// from (`server.cors_origins`). A web page on another origin — an app that uploads its users'
// files straight to the gateway, a status page polling a job — can read an answer only when it
// names the page's origin in Access-Control-Allow-Origin, and may send a request with an API key
// or a JSON body only after a preflight (OPTIONS with Access-Control-Request-Method) said yes.
//
// Nothing here decides access: a request still needs its API key, whatever its origin, and a
// client that is not a browser ignores all of it. What it decides is whether a browser lets a
// page on that origin see the answer. No origin is allowed by default; `*` allows every one
// (the API is called with keys, never cookies, so credentials are never allowed).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace relay::gateway {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Why `origin` is not an origin as a browser sends one (`scheme://host[:port]`, http or https,
// nothing after), or nullopt when it is. "*" is not an origin: the caller treats it apart.
std::optional<std::string> origin_problem(std::string_view origin);

class Cors {
 public:
  // server.cors_origins, each checked with origin_problem (or "*").
  explicit Cors(const std::vector<std::string>& origins);

  // An origin allowed to read answers: "*" when every one is, else the origin itself, exactly
  // as configured (scheme and host compared without case; a browser sends them lowercase).
  std::optional<std::string> allowed(std::string_view origin) const;

  // Headers for the answer to a request that came with `origin` (nothing without one): the
  // origin allowed, the headers a page may read, and Vary: Origin where the answer depends on it.
  HeaderList for_answer(std::string_view origin) const;

  // Headers for a preflight's 204 (the route's `methods`; the request headers the browser asked
  // for, each a header name); nullopt when the origin is not allowed.
  std::optional<HeaderList> for_preflight(std::string_view origin, std::string_view methods,
                                          std::string_view request_headers) const;

 private:
  std::vector<std::string> origins_;  // lowercase
  bool any_ = false;
};

}  // namespace relay::gateway
