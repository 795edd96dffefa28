#include "gateway/api_keys.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace relay::gateway {
namespace {

namespace fs = std::filesystem;

const std::string kA(64, 'a'), kB(64, 'b'), kC(64, 'c');

std::string problem_of(std::string_view text) {
  auto parsed = parse_api_keys_file(text);
  auto* problem = std::get_if<std::string>(&parsed);
  return problem ? *problem : "";
}

TEST(ApiKeysFile, LinesCommentsAndBlanks) {
  auto parsed = parse_api_keys_file("# tenants\n\n" + kA + "=acme\r\n  " + kB + " = beta  \n" + kC +
                                    "=acme");  // (no newline at the end)
  ASSERT_TRUE(std::holds_alternative<ApiKeyTable>(parsed)) << std::get<std::string>(parsed);
  const auto& keys = std::get<ApiKeyTable>(parsed);
  EXPECT_EQ(keys, (ApiKeyTable{{kA, "acme"}, {kB, "beta"}, {kC, "acme"}}));
  EXPECT_TRUE(std::get<ApiKeyTable>(parse_api_keys_file("")).empty());
  // The environment form (RELAY_AUTH_API_KEYS) reads the same: one Secret serves both.
  EXPECT_EQ(std::get<ApiKeyTable>(parse_api_keys_file(kA + "=acme," + kB + "=beta,\n")),
            (ApiKeyTable{{kA, "acme"}, {kB, "beta"}}));
}

TEST(ApiKeysFile, WhatIsWrongNamesTheLineNotItsContent) {
  EXPECT_EQ(problem_of("# x\n" + kA + " acme\n"), "line 2: expected <sha256 hex>=<tenant>");
  EXPECT_EQ(problem_of("secret-key-in-clear=acme\n"),
            "line 1: keys are the lowercase hex SHA-256 of the API key");
  EXPECT_EQ(problem_of(std::string(64, 'A') + "=acme"),
            "line 1: keys are the lowercase hex SHA-256 of the API key");
  EXPECT_EQ(problem_of(kA + "=acme\n" + kA + "=beta\n"), "line 2: a key listed twice");
  EXPECT_EQ(problem_of(kA + "=acme,oops\n"), "line 1: expected <sha256 hex>=<tenant>");
  EXPECT_EQ(problem_of("secret-key-in-clear").find("secret"), std::string::npos);
}

TEST(ApiKeysFile, TenantNamesAndOperatorKeys) {
  EXPECT_EQ(api_keys_problem({{kA, "acme"}}, {}), std::nullopt);
  EXPECT_NE(api_keys_problem({{kA, "a b"}}, {}), std::nullopt);
  EXPECT_NE(api_keys_problem({{kA, ""}}, {}), std::nullopt);
  EXPECT_NE(api_keys_problem({{kA, "acme"}}, {kA}), std::nullopt) << "an operator's key";
}

class ApiKeysReload : public ::testing::Test {
 protected:
  ApiKeysReload() {
    std::string tmpl = (fs::temp_directory_path() / "relay-api-keys-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
  }
  ~ApiKeysReload() override { fs::remove_all(dir_); }
  // Written the way the kubelet updates a Secret: a new file renamed over the old.
  void write(const std::string& text) {
    const fs::path tmp = dir_ / "keys.tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, file());
  }
  std::string file() const { return (dir_ / "keys").string(); }
  fs::path dir_;
};

TEST_F(ApiKeysReload, AChangedFileIsReadAgainBesideTheConfiguredKeys) {
  write(kA + "=acme\n");
  ApiKeys keys({{kC, "fixed"}}, file(), {}, ApiKeys::Watch::no);
  EXPECT_EQ(keys.tenant(kA), "acme");
  EXPECT_EQ(keys.tenant(kC), "fixed");
  EXPECT_EQ(keys.tenant(kB), std::nullopt);
  EXPECT_FALSE(keys.reload()) << "unchanged";
  write(kB + "=beta\n");  // a is revoked, b added
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.tenant(kA), std::nullopt);
  EXPECT_EQ(keys.tenant(kB), "beta");
  EXPECT_EQ(keys.tenant(kC), "fixed") << "the configuration's keys stay";
}

TEST_F(ApiKeysReload, AVersionThatIsNotValidLeavesTheKeysInUse) {
  write(kA + "=acme\n");
  ApiKeys keys({{kC, "fixed"}}, file(), {kB}, ApiKeys::Watch::no);
  for (const std::string& bad : {std::string("half a line\n"), kC + "=another\n", kB + "=acme\n"}) {
    write(bad);  // malformed; a configured key given to another tenant; an operator's key
    EXPECT_FALSE(keys.reload()) << bad;
    EXPECT_EQ(keys.tenant(kA), "acme") << bad;
  }
  fs::remove(file());
  EXPECT_FALSE(keys.reload()) << "gone";
  EXPECT_EQ(keys.tenant(kA), "acme");
  write(kB.substr(1) + "d=beta\n");
  EXPECT_TRUE(keys.reload()) << "valid again";
  EXPECT_EQ(keys.tenant(kA), std::nullopt);
}

// The watcher thread swaps the table while requests read it (ThreadSanitizer runs this in CI).
TEST_F(ApiKeysReload, TheWatcherSwapsTheKeysUnderReaders) {
  write(kA + "=acme\n");
  ApiKeys keys({}, file(), {});
  std::atomic<bool> stop = false;
  std::atomic<long> reads = 0;
  std::vector<std::jthread> readers;
  for (int i = 0; i < 2; ++i)
    readers.emplace_back([&] {
      while (!stop) {
        // Each lookup reads one version whole (two lookups may straddle a swap).
        const auto a = keys.tenant(kA), b = keys.tenant(kB);
        EXPECT_TRUE(!a || *a == "acme");
        EXPECT_TRUE(!b || *b == "beta");
        ++reads;
      }
    });
  write(kB + "=beta\n");
  const auto deadline = std::chrono::steady_clock::now() + 4 * ApiKeys::kCheckEvery;
  while (keys.tenant(kB) != "beta" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  readers.clear();
  EXPECT_EQ(keys.tenant(kB), "beta");
  EXPECT_EQ(keys.tenant(kA), std::nullopt);
  EXPECT_GT(reads.load(), 0);
  // (The versions never mix within a lookup; ThreadSanitizer, in CI, checks the swap itself.)
}

TEST_F(ApiKeysReload, AFileNotValidAtStartIsAnError) {
  write("nonsense\n");
  EXPECT_THROW(ApiKeys({}, file(), {}, ApiKeys::Watch::no), std::runtime_error);
  EXPECT_THROW(ApiKeys({}, (dir_ / "missing").string(), {}, ApiKeys::Watch::no),
               std::runtime_error);
}

}  // namespace
}  // namespace relay::gateway
