#include "gateway/cors.hpp"

#include <algorithm>
#include <cctype>

#include "common/port.hpp"
#include "common/text.hpp"

namespace relay::gateway {
namespace {

// RFC 9110 §5.6.2: the characters of a token (a header name).
bool is_tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// How long a browser may keep a preflight's yes (Chromium keeps at most 2 h, Firefox 24 h).
constexpr std::string_view kMaxAge = "600";
// What a page may read of an answer beyond the CORS-safelisted headers.
constexpr std::string_view kExposed =
    "Location, ETag, Retry-After, Content-Range, Accept-Ranges, Idempotent-Replayed, Allow, "
    "WWW-Authenticate";
// A preflight's list of request headers is echoed back only while it stays this short.
constexpr size_t kMaxRequestHeaders = 1024;

}  // namespace

std::optional<std::string> origin_problem(std::string_view origin) {
  const std::string o = ascii_lower(origin);
  std::string_view rest(o);
  if (rest.starts_with("https://"))
    rest.remove_prefix(8);
  else if (rest.starts_with("http://"))
    rest.remove_prefix(7);
  else
    return "an origin starts with http:// or https://";
  std::string_view host = rest, port;
  bool has_port = false;
  if (rest.starts_with('[')) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos || close == 1) return "an IPv6 host is [address]";
    if (rest.substr(1, close - 1).find_first_not_of("0123456789abcdef:.") != std::string::npos)
      return "an IPv6 host is [address]";
    host = rest.substr(0, close + 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return "nothing may follow the host but :port";
    has_port = !rest.empty();
    if (has_port) port = rest.substr(1);
  } else {
    const auto colon = rest.find(':');
    if (colon != std::string_view::npos) {
      has_port = true;
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
    }
    if (host.empty() ||
        host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string_view::npos)
      return "a host is a name or an IP address, with no path, query or user after it";
  }
  if (has_port && !parse_port(port)) return "a port is a number from 1 to 65535";
  return std::nullopt;
}

Cors::Cors(const std::vector<std::string>& origins) {
  for (const auto& o : origins) {
    if (o == "*")
      any_ = true;
    else
      origins_.push_back(ascii_lower(o));
  }
}

std::optional<std::string> Cors::allowed(std::string_view origin) const {
  if (origin.empty()) return std::nullopt;
  if (any_) return std::string("*");
  const std::string o = ascii_lower(origin);
  if (std::find(origins_.begin(), origins_.end(), o) == origins_.end()) return std::nullopt;
  return std::string(origin);
}

HeaderList Cors::for_answer(std::string_view origin) const {
  HeaderList out;
  if (origin.empty()) return out;
  // With a list of origins the answer names the one that asked: a cache must keep one per
  // origin. (With "*" it is the same for all.)
  if (!any_) out.emplace_back("Vary", "Origin");
  if (auto allow = allowed(origin)) {
    out.emplace_back("Access-Control-Allow-Origin", *allow);
    out.emplace_back("Access-Control-Expose-Headers", std::string(kExposed));
  }
  return out;
}

std::optional<HeaderList> Cors::for_preflight(std::string_view origin, std::string_view methods,
                                              std::string_view request_headers) const {
  auto allow = allowed(origin);
  if (!allow) return std::nullopt;
  HeaderList out;
  out.emplace_back("Access-Control-Allow-Origin", *allow);
  out.emplace_back("Access-Control-Allow-Methods", std::string(methods));
  // The headers asked for are allowed (the API key's among them): which headers a request may
  // carry is no matter of the origin's, and a list kept here would refuse a client's tracing
  // or request-id headers. Echoed only when each is a header name.
  std::string asked;
  bool fine = request_headers.size() <= kMaxRequestHeaders;
  if (fine)
    for (auto name : comma_items(request_headers)) {
      fine = fine && std::all_of(name.begin(), name.end(), is_tchar);
      asked += (asked.empty() ? "" : ", ") + ascii_lower(name);
    }
  if (fine && !asked.empty()) out.emplace_back("Access-Control-Allow-Headers", asked);
  out.emplace_back("Access-Control-Max-Age", std::string(kMaxAge));
  if (!any_)
    out.emplace_back("Vary",
                     "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
  else
    out.emplace_back("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers");
  return out;
}

}  // namespace relay::gateway
