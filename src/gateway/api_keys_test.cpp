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

std::string problem_of(std::string_view text, KeyKind kind = KeyKind::tenant) {
  auto parsed = parse_api_keys_file(text, kind);
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
            "line 1: keys are the lowercase hex SHA-256 of the key");
  EXPECT_EQ(problem_of(std::string(64, 'A') + "=acme"),
            "line 1: keys are the lowercase hex SHA-256 of the key");
  EXPECT_EQ(problem_of(kA + "=acme\n" + kA + "=beta\n"), "line 2: a key listed twice");
  EXPECT_EQ(problem_of(kA + "=acme,oops\n"), "line 1: expected <sha256 hex>=<tenant>");
  EXPECT_EQ(problem_of("secret-key-in-clear").find("secret"), std::string::npos);
}

TEST(ApiKeysFile, TenantNamesAndRoles) {
  EXPECT_EQ(problem_of(kA + "=a b"),
            "line 1: the key aaaaaaaa...: tenant names may use letters, "
            "digits, '-', '_' and '.'");
  EXPECT_NE(problem_of(kA + "="), "");
  EXPECT_EQ(problem_of(kA + "=admin\n" + kB + "=read", KeyKind::role), "");
  EXPECT_EQ(problem_of(kA + "=root", KeyKind::role),
            "line 1: the key aaaaaaaa...: the role is admin or read");
  EXPECT_EQ(problem_of(kA + " admin", KeyKind::role), "line 1: expected <sha256 hex>=<role>");
}

KeySource tenants(ApiKeyTable fixed, std::string file = {}) {
  return {"auth.api_keys", KeyKind::tenant, std::move(fixed), std::move(file)};
}
KeySource operators(ApiKeyTable fixed, std::string file = {}) {
  return {"admin.api_keys", KeyKind::role, std::move(fixed), std::move(file)};
}

std::string load_problem(const KeySource& t, const KeySource& o) {
  auto loaded = load_keys(t, o);
  auto* problem = std::get_if<KeyProblem>(&loaded);
  return problem ? problem->config_key + ": " + problem->message : "";
}

TEST(ApiKeysFile, TheConfigurationsKeysAreCheckedAsTheFilesAre) {
  EXPECT_EQ(load_problem(tenants({{kA, "acme"}}), operators({{kB, "admin"}})), "");
  EXPECT_EQ(load_problem(tenants({{kA, "a b"}}), operators({})).find("auth.api_keys: "), 0u);
  EXPECT_EQ(load_problem(tenants({}), operators({{kA, "owner"}})),
            "admin.api_keys: the key aaaaaaaa...: the role is admin or read");
  EXPECT_EQ(load_problem(tenants({{"not-a-hash", "acme"}}), operators({})),
            "auth.api_keys: keys are the lowercase hex SHA-256 of the key");
  EXPECT_EQ(load_problem(tenants({{kA, "acme"}}), operators({{kA, "admin"}})),
            "admin.api_keys: the key aaaaaaaa...: an operator key may not be a tenant's");
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
  ApiKeys keys(tenants({{kC, "fixed"}}, file()), operators({}), ApiKeys::Watch::no);
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
  ApiKeys keys(tenants({{kC, "fixed"}}, file()), operators({{kB, "read"}}), ApiKeys::Watch::no);
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
  ApiKeys keys(tenants({}, file()), operators({}));
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
  EXPECT_THROW(ApiKeys(tenants({}, file()), operators({}), ApiKeys::Watch::no), std::runtime_error);
  EXPECT_THROW(ApiKeys(tenants({}, (dir_ / "missing").string()), operators({}), ApiKeys::Watch::no),
               std::runtime_error);
  EXPECT_THROW(ApiKeys(tenants({}), operators({}, (dir_ / "missing").string()), ApiKeys::Watch::no),
               std::runtime_error);
}

// admin.api_keys_file: operators' keys come and go as tenants' do, and the two files are checked
// together (a key moved from one to the other in two writes is refused in between).
TEST_F(ApiKeysReload, OperatorsKeysAreReadAgainAndCheckedAgainstTenants) {
  write(kA + "=acme\n");
  const std::string ops = (dir_ / "ops").string();
  std::ofstream(ops) << kB + "=read\n";
  ApiKeys keys(tenants({}, file()), operators({{kC, "admin"}}, ops), ApiKeys::Watch::no);
  EXPECT_TRUE(keys.has_operators());
  EXPECT_EQ(keys.operator_role(kB), "read");
  EXPECT_EQ(keys.operator_role(kC), "admin");
  EXPECT_EQ(keys.operator_role(kA), std::nullopt) << "a tenant's key is no operator's";
  EXPECT_EQ(keys.tenant(kB), std::nullopt) << "an operator's key is no tenant's";
  const auto replace_ops = [&](const std::string& text) {
    std::ofstream(ops + ".tmp") << text;
    fs::rename(ops + ".tmp", ops);
  };
  replace_ops(kB + "=admin\n");  // promoted
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.operator_role(kB), "admin");
  replace_ops(kA + "=admin\n");  // a tenant's key: refused, the keys before stay
  EXPECT_FALSE(keys.reload());
  EXPECT_EQ(keys.operator_role(kB), "admin");
  EXPECT_EQ(keys.operator_role(kA), std::nullopt);
  write("\n");  // the tenant's key revoked: now the operators' file is valid with it
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.operator_role(kA), "admin");
  EXPECT_EQ(keys.operator_role(kB), std::nullopt) << "revoked";
  EXPECT_EQ(keys.tenant(kA), std::nullopt);
  EXPECT_EQ(keys.operator_role(kC), "admin") << "the configuration's keys stay";
}

TEST(ApiKeys, NoOperatorsNoDashboard) {
  EXPECT_FALSE(ApiKeys(tenants({{kA, "acme"}}), operators({}), ApiKeys::Watch::no).has_operators());
  EXPECT_TRUE(ApiKeys(tenants({}), operators({{kA, "read"}}), ApiKeys::Watch::no).has_operators());
}

}  // namespace
}  // namespace relay::gateway
