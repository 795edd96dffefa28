#include "http/destination.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <charconv>
#include <cstdint>

#include "common/port.hpp"

namespace relay::http {

bool is_public_address(const std::string& ip) {
  unsigned char a[16];
  if (::inet_pton(AF_INET, ip.c_str(), a) == 1) {
    std::uint32_t v = (std::uint32_t(a[0]) << 24) | (std::uint32_t(a[1]) << 16) |
                      (std::uint32_t(a[2]) << 8) | a[3];
    struct Net {
      std::uint32_t base;
      int bits;
    } blocked[] = {{0x00000000, 8},  {0x0A000000, 8},  {0x64400000, 10}, {0x7F000000, 8},
                   {0xA9FE0000, 16}, {0xAC100000, 12}, {0xC0000000, 24}, {0xC0000200, 24},
                   {0xC0A80000, 16}, {0xC6120000, 15}, {0xC6336400, 24}, {0xCB007100, 24},
                   {0xE0000000, 4},  {0xF0000000, 4}};
    for (const auto& n : blocked)
      if ((v >> (32 - n.bits)) == (n.base >> (32 - n.bits))) return false;
    return true;
  }
  if (::inet_pton(AF_INET6, ip.c_str(), a) == 1) {
    static const unsigned char zero[16] = {};
    if (std::equal(a, a + 15, zero) && (a[15] == 0 || a[15] == 1)) return false;  // :: and ::1
    // Forms that carry an IPv4 address, which is what they reach: IPv4-mapped (::ffff:a.b.c.d),
    // IPv4-compatible (::a.b.c.d, deprecated but routed by some stacks), NAT64 (64:ff9b::/96)
    // and 6to4 (2002:AABB:CCDD::/48).
    auto embedded = [&](const unsigned char* v4) {
      char text[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, v4, text, sizeof text);
      return is_public_address(text);
    };
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (std::equal(a, a + 12, mapped) || std::equal(a, a + 12, zero) ||
        std::equal(a, a + 12, nat64))
      return embedded(a + 12);
    if (a[0] == 0x20 && a[1] == 0x02) return embedded(a + 2);
    // 64:ff9b:1::/48: local-use NAT64 (RFC 8215), whatever it embeds.
    if (a[0] == 0 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1)
      return false;
    if ((a[0] & 0xfe) == 0xfc) return false;                  // fc00::/7 unique local
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return false;  // fe80::/10 link-local
    if (a[0] == 0xff) return false;                           // multicast
    return true;
  }
  return false;
}

std::optional<DestinationProblem> check_destination(const std::string& url,
                                                    const Destination& rules,
                                                    std::vector<std::string>* addresses,
                                                    Resolver* resolver, std::stop_token stop) {
  auto u = boost::urls::parse_absolute_uri(url);
  const bool scheme_ok = u && std::find(rules.schemes.begin(), rules.schemes.end(), u->scheme()) !=
                                  rules.schemes.end();
  if (!scheme_ok || u->host().empty() || u->has_userinfo()) {
    std::string schemes;
    for (const auto& s : rules.schemes) schemes += (schemes.empty() ? "" : " or ") + s + "://";
    return DestinationProblem{rules.what + " must be an absolute " + schemes +
                              " URL without credentials"};
  }
  if (u->has_port() && !u->port().empty()) {
    // (An empty port is the scheme's: RFC 3986.) Past 65535 every delivery or fetch would fail
    // later, each a retry; it is refused here.
    if (!parse_port(u->port()))
      return DestinationProblem{rules.what + " has a port out of range (1-65535)"};
  }
  std::string host = u->host();
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const Resolution r = resolver ? resolver->resolve(host, stop) : Resolver::system_lookup(host);
  if (r.outcome != Resolution::Outcome::ok)
    return DestinationProblem{rules.what + " host '" + host + "' " + r.why,
                              r.outcome == Resolution::Outcome::unavailable};
  for (const auto& ip : r.addresses) {
    if (addresses) addresses->push_back(ip);
    if (!rules.allow_private && !is_public_address(ip))
      return DestinationProblem{rules.what +
                                " resolves to a private, loopback or link-local address (" + ip +
                                "); set " + rules.allow_setting + " to allow it"};
  }
  return std::nullopt;
}

}  // namespace relay::http
