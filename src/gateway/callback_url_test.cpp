#include "gateway/callback_url.hpp"

#include <gtest/gtest.h>

namespace relay::gateway {
namespace {

// Callback hosts must not reach the gateway's own network (SSRF), however the address is
// written.
TEST(CallbackAddresses, PrivateAddressesAreRefusedInEveryForm) {
  for (const char* ip : {"127.0.0.1",
                         "10.1.2.3",
                         "172.16.0.1",
                         "192.168.1.1",
                         "169.254.169.254",
                         "100.64.0.1",
                         "0.0.0.0",
                         "224.0.0.1",
                         "::1",
                         "::",
                         "fc00::1",
                         "fe80::1",
                         "ff02::1",
                         "::ffff:127.0.0.1",
                         "::ffff:10.0.0.1",
                         "::127.0.0.1",
                         "::10.0.0.1",
                         "::169.254.169.254",  // IPv4-compatible
                         "64:ff9b::7f00:1",
                         "64:ff9b::a9fe:a9fe",  // NAT64 of loopback, metadata
                         "2002:7f00:1::1",
                         "2002:a00:1::",         // 6to4 of 127.0.0.1, 10.0.0.1
                         "64:ff9b:1::808:808"})  // local-use NAT64
    EXPECT_FALSE(is_public_address(ip)) << ip;
  for (const char* ip : {"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                         "64:ff9b::808:808", "2002:808:808::1"})
    EXPECT_TRUE(is_public_address(ip)) << ip;
  EXPECT_FALSE(is_public_address("not an address"));
}

// A port out of range is refused at submission (each delivery would fail on it, and be
// retried); an empty port is the scheme's. (IP literals: no lookup.)
TEST(CallbackAddresses, APortOutOfRangeIsRefused) {
  for (const char* url : {"https://8.8.8.8:99999/hook", "https://8.8.8.8:0/hook",
                          "http://[2606:4700:4700::1111]:65536/hook"}) {
    auto problem = check_callback_url(url, false);
    ASSERT_TRUE(problem) << url;
    EXPECT_NE(problem->reason.find("port"), std::string::npos) << problem->reason;
  }
  for (const char* url :
       {"https://8.8.8.8:65535/hook", "https://8.8.8.8:/hook", "https://8.8.8.8/hook"})
    EXPECT_FALSE(check_callback_url(url, false)) << url;
}

}  // namespace
}  // namespace relay::gateway
