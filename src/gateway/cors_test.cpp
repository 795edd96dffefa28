#include "gateway/cors.hpp"

#include <gtest/gtest.h>

#include <map>

namespace relay::gateway {
namespace {

std::map<std::string, std::string> as_map(const HeaderList& headers) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : headers) {
    EXPECT_FALSE(out.contains(k)) << k << " twice";
    out[k] = v;
  }
  return out;
}

TEST(CorsOrigins, OnlyWhatABrowserSendsIsAnOrigin) {
  for (const char* ok : {"https://app.example.com", "http://localhost:3000", "https://a-b.c.d:443",
                         "http://127.0.0.1:8080", "https://[::1]:8443", "https://[2001:db8::1]",
                         "HTTPS://App.Example.COM"})
    EXPECT_EQ(origin_problem(ok), std::nullopt) << ok;
  for (const char* bad : {"",
                          "app.example.com",
                          "ftp://example.com",
                          "https://",
                          "https://example.com/",
                          "https://example.com/app",
                          "https://example.com?x=1",
                          "https://user@example.com",
                          "https://example.com:",
                          "https://example.com:0",
                          "https://example.com:65536",
                          "https://example.com:99999",
                          "https://example.com:80x",
                          "https://[::1",
                          "https://[]",
                          "https://[::1]x",
                          "https://[::1]:",
                          "https://exa mple.com",
                          "*.example.com",
                          "https://*.example.com",
                          "null"})
    EXPECT_NE(origin_problem(bad), std::nullopt) << bad;
}

TEST(CorsAnswers, OnlyAListedOriginMayReadTheAnswer) {
  Cors cors({"https://app.example.com", "http://localhost:3000"});
  auto h = as_map(cors.for_answer("https://app.example.com"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "https://app.example.com");
  EXPECT_EQ(h["Vary"], "Origin") << "the answer depends on the origin: caches keep one per origin";
  EXPECT_NE(h["Access-Control-Expose-Headers"].find("Location"), std::string::npos);
  EXPECT_NE(h["Access-Control-Expose-Headers"].find("Retry-After"), std::string::npos);
  EXPECT_FALSE(h.contains("Access-Control-Allow-Credentials")) << "keys, never cookies";
  // Scheme and host compare without case; a port or a scheme of its own is another origin.
  EXPECT_EQ(cors.allowed("HTTPS://APP.example.com"), "HTTPS://APP.example.com");
  for (const char* other :
       {"https://app.example.com:8443", "http://app.example.com", "https://evil.example.com",
        "https://app.example.com.evil.net", "null", "http://localhost:3001"}) {
    auto refused = as_map(cors.for_answer(other));
    EXPECT_FALSE(refused.contains("Access-Control-Allow-Origin")) << other;
    EXPECT_EQ(refused["Vary"], "Origin") << other;
  }
  EXPECT_TRUE(cors.for_answer("").empty()) << "a request without Origin is not a browser's CORS";
}

TEST(CorsAnswers, NoOriginIsAllowedByDefaultAndStarAllowsEveryOne) {
  Cors none({});
  EXPECT_EQ(none.allowed("https://app.example.com"), std::nullopt);
  EXPECT_EQ(none.for_preflight("https://app.example.com", "GET", ""), std::nullopt);
  Cors any({"*"});
  EXPECT_EQ(any.allowed("https://anything.example"), "*");
  auto h = as_map(any.for_answer("https://anything.example"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "*");
  EXPECT_FALSE(h.contains("Vary")) << "the same answer for every origin";
}

TEST(CorsPreflight, SaysTheRoutesMethodsAndTheHeadersAskedFor) {
  Cors cors({"https://app.example.com"});
  auto yes = cors.for_preflight("https://app.example.com", "GET, HEAD, POST, OPTIONS",
                                "Authorization, content-type,Idempotency-Key ,X-Request-Id");
  ASSERT_TRUE(yes);
  auto h = as_map(*yes);
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "https://app.example.com");
  EXPECT_EQ(h["Access-Control-Allow-Methods"], "GET, HEAD, POST, OPTIONS");
  EXPECT_EQ(h["Access-Control-Allow-Headers"],
            "authorization, content-type, idempotency-key, x-request-id");
  EXPECT_EQ(h["Access-Control-Max-Age"], "600");
  EXPECT_NE(h["Vary"].find("Origin"), std::string::npos);
  EXPECT_EQ(cors.for_preflight("https://other.example.com", "GET", ""), std::nullopt);
  // Asked for nothing: no Allow-Headers. Asked for what is no header name, or too much: not
  // echoed (the browser then refuses the request).
  EXPECT_FALSE(as_map(*cors.for_preflight("https://app.example.com", "GET", ""))
                   .contains("Access-Control-Allow-Headers"));
  for (std::string bad : {std::string("x-ok, bad header"), std::string("x\r\ny: 1"),
                          std::string("x-a,") + std::string(2000, 'b')})
    EXPECT_FALSE(as_map(*cors.for_preflight("https://app.example.com", "GET", bad))
                     .contains("Access-Control-Allow-Headers"))
        << bad;
}

}  // namespace
}  // namespace relay::gateway
