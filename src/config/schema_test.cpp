#include "config/schema.hpp"

#include <gtest/gtest.h>

#include "config/shared.hpp"
#include "gateway/config.hpp"
#include "sidecar/config.hpp"

namespace relay::config {
namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

TEST(EnvName, MapsKeysMechanically) {
  EXPECT_EQ(env_name("gc.max_reap_attempts"), "RELAY_GC_MAX_REAP_ATTEMPTS");
  EXPECT_EQ(env_name("lease_ttl"), "RELAY_LEASE_TTL");
  EXPECT_EQ(env_name("storage.s3_path_style"), "RELAY_STORAGE_S3_PATH_STYLE");
}

TEST(RelayConfig, DefaultsMatchTheSeed) {
  auto c = sidecar::load("", env_of({{"RELAY_MODEL", "whisper"}}));
  EXPECT_EQ(c.lease_ttl, std::chrono::seconds(60));
  EXPECT_EQ(c.queue_pop_timeout, std::chrono::minutes(5));
  EXPECT_EQ(c.max_jobs, 1);
  EXPECT_EQ(c.inference.url, "http://127.0.0.1:9000");
  EXPECT_EQ(c.inference.health_path, "/health");
  EXPECT_EQ(c.redis.url, "redis://127.0.0.1:6379");
}

TEST(RelayConfig, YamlThenEnvironment) {
  sidecar::Config c;
  auto s = sidecar::schema(c);
  s.load_string(R"(
model: ocr
lease_ttl: 30s
inference:
  routes:
    default: /predict
    ocr: /v1/ocr
redis:
  url: redis://u:p@redis:6380/2
)",
                env_of({{"RELAY_LEASE_TTL", "10s"}}));
  EXPECT_EQ(c.model, "ocr");
  EXPECT_EQ(c.lease_ttl, std::chrono::seconds(10)) << "environment wins over the file";
  EXPECT_EQ(c.inference.routes.at("ocr"), "/v1/ocr");
  auto ep = c.redis_endpoint();
  EXPECT_EQ(ep.host, "redis");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.username, "u");
  EXPECT_EQ(ep.password, "p");
  EXPECT_EQ(ep.db, 2);
}

TEST(RelayConfig, RoutesFromTheEnvironment) {
  auto c = sidecar::load(
      "", env_of({{"RELAY_MODEL", "m"}, {"RELAY_INFERENCE_ROUTES", "default=/a,x=/b"}}));
  EXPECT_EQ(c.inference.routes.size(), 2u);
  EXPECT_EQ(c.inference.routes.at("x"), "/b");
}

TEST(RelayConfig, BadValuesNameTheirKey) {
  struct Case {
    std::string description;
    std::map<std::string, std::string> env;
    std::string yaml;
    std::string key;
  } cases[] = {
      {"missing model", {}, "", "'model'"},
      {"bad duration", {{"RELAY_MODEL", "m"}, {"RELAY_LEASE_TTL", "sixty"}}, "", "'lease_ttl'"},
      {"tiny lease", {{"RELAY_MODEL", "m"}, {"RELAY_LEASE_TTL", "10ms"}}, "", "'lease_ttl'"},
      {"negative max_jobs", {{"RELAY_MODEL", "m"}, {"RELAY_MAX_JOBS", "-1"}}, "", "'max_jobs'"},
      {"not a number", {{"RELAY_MODEL", "m"}, {"RELAY_MAX_JOBS", "two"}}, "", "'max_jobs'"},
      {"bad boolean",
       {{"RELAY_MODEL", "m"}, {"RELAY_REDIS_HASH_TAG", "maybe"}},
       "",
       "'redis.hash_tag'"},
      {"bad redis url", {{"RELAY_MODEL", "m"}, {"RELAY_REDIS_URL", "http://x"}}, "", "'redis.url'"},
      {"redis port out of range",
       {{"RELAY_MODEL", "m"}, {"RELAY_REDIS_URL", "redis://127.0.0.1:99999"}},
       "",
       "'redis.url'"},
      {"redis cluster seed port out of range",
       {{"RELAY_MODEL", "m"},
        {"RELAY_REDIS_MODE", "cluster"},
        {"RELAY_REDIS_URL", "redis://10.0.0.1:7000,10.0.0.2:70000"}},
       "",
       "'redis.url'"},
      {"bad storage url",
       {{"RELAY_MODEL", "m"}, {"RELAY_STORAGE_URL", "ftp://x"}},
       "",
       "'storage.url'"},
      {"unknown key (typo)", {{"RELAY_MODEL", "m"}}, "lease_tll: 5s\n", "'lease_tll'"},
      {"route without slash",
       {{"RELAY_MODEL", "m"}},
       "inference:\n  routes:\n    a: predict\n",
       "'inference.routes.a'"},
      {"model with a colon", {{"RELAY_MODEL", "a:b"}}, "", "'model'"},
      // inference.url: the model server itself, over plain HTTP (https and no host aborted the
      // relay at start; a path was dropped; a port out of range was waited on for minutes).
      {"inference over https",
       {{"RELAY_MODEL", "m"}, {"RELAY_INFERENCE_URL", "https://model:9000"}},
       "",
       "'inference.url'"},
      {"inference without a host",
       {{"RELAY_MODEL", "m"}, {"RELAY_INFERENCE_URL", "http://"}},
       "",
       "'inference.url'"},
      {"inference port out of range",
       {{"RELAY_MODEL", "m"}, {"RELAY_INFERENCE_URL", "http://127.0.0.1:99999"}},
       "",
       "'inference.url'"},
      {"inference with a path",
       {{"RELAY_MODEL", "m"}, {"RELAY_INFERENCE_URL", "http://127.0.0.1:9000/v1"}},
       "",
       "'inference.url'"},
      {"progress on a host name",
       {{"RELAY_MODEL", "m"}, {"RELAY_RELAY_PROGRESS_LISTEN", "relay.local:0"}},
       "",
       "'relay.progress_listen'"},
      // A section not given as a mapping would leave its keys at their defaults silently.
      {"section as a list",
       {{"RELAY_MODEL", "m"}},
       "redis:\n  - url: redis://r:6379\n",
       "'redis': expected a mapping"},
      {"section as a value",
       {{"RELAY_MODEL", "m"}},
       "inference: 127.0.0.1:9000\n",
       "'inference': expected a mapping"},
      {"value as a mapping",
       {{"RELAY_MODEL", "m"}},
       "lease_ttl:\n  seconds: 5\n",
       "'lease_ttl': expected a single value"},
  };
  for (const auto& c : cases) {
    try {
      sidecar::Config cfg;
      sidecar::schema(cfg).load_string(c.yaml, env_of(c.env));
      if (cfg.pod_name.empty()) cfg.pod_name = "x";
      sidecar::validate(cfg);
      ADD_FAILURE() << c.description << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos)
          << c.description << ": " << e.what();
    }
  }
}

// A zero (or a few milliseconds) in most durations is no setting at all but a breakage: a
// timeout that fires at once or never (libcurl reads 0 as none), an expiry Redis refuses, a
// loop that never sleeps, events claimed from live replicas. The schema refuses them.
TEST(Durations, ThoseThatCannotBeZeroAreRefusedNamingTheirKey) {
  const std::vector<std::string> gateway_keys = {
      "server.body_idle_timeout", "gc.reap_interval",      "gc.expire_interval",
      "idempotency.reservation",  "gc.job_retention",      "gc.interval",
      "events.claim_idle",        "dns.timeout",           "webhooks.timeout",
      "webhooks.initial_backoff", "redis.connect_timeout", "storage.s3_timeout"};
  const std::vector<std::string> relay_keys = {"lease_ttl",
                                               "queue_pop_timeout",
                                               "relay.health_interval",
                                               "relay.progress_interval",
                                               "relay.progress_webhook_interval",
                                               "redis.connect_timeout",
                                               "storage.s3_timeout"};
  auto refused = [](auto schema, const std::string& key, const std::string& value) {
    try {
      schema.load_string("", env_of({{env_name(key), value}}));
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  for (const auto& key : gateway_keys) {
    gateway::Config c;
    EXPECT_NE(refused(gateway::schema(c), key, "0s"), "") << key << ": 0s accepted";
    EXPECT_NE(refused(gateway::schema(c), key, "0.4ms"), "") << key << ": 0.4ms (0) accepted";
  }
  for (const auto& key : relay_keys) {
    sidecar::Config c;
    EXPECT_NE(refused(sidecar::schema(c), key, "0s"), "") << key << ": 0s accepted";
  }
  sidecar::Config r;
  EXPECT_NE(refused(sidecar::schema(r), "lease_ttl", "299ms").find("must be at least 300ms"),
            std::string::npos);
  EXPECT_EQ(refused(sidecar::schema(r), "lease_ttl", "300ms"), "");
  gateway::Config g;
  EXPECT_NE(refused(gateway::schema(g), "dns.timeout", "0s").find("must be positive"),
            std::string::npos);
  EXPECT_EQ(refused(gateway::schema(g), "dns.timeout", "1ms"), "");
}

TEST(Durations, ZeroKeepsItsDocumentedMeaningWhereItHasOne) {
  sidecar::Config r;
  sidecar::schema(r).load_string(
      "", env_of({{"RELAY_INFERENCE_TIMEOUT", "0s"}, {"RELAY_RELAY_HEALTH_TIMEOUT", "0s"}}));
  EXPECT_EQ(r.inference.timeout.count(), 0) << "0s = no limit on one inference request";
  gateway::Config g;
  gateway::schema(g).load_string("", env_of({{"RELAY_SERVER_SHUTDOWN_TIMEOUT", "0s"},
                                             {"RELAY_SERVER_MAX_WAIT", "0s"},
                                             {"RELAY_WEBHOOKS_MAX_AGE", "0s"},
                                             {"RELAY_GC_REAP_GRACE", "0s"}}));
  EXPECT_EQ(g.shutdown_timeout.count(), 0);
  EXPECT_EQ(g.max_wait.count(), 0);
}

TEST(RelayConfig, ReferenceListsEveryKeyWithItsVariable) {
  sidecar::Config c;
  auto ref = sidecar::schema(c).reference_markdown();
  EXPECT_NE(ref.find("`lease_ttl` | `RELAY_LEASE_TTL` | `60s`"), std::string::npos) << ref;
  EXPECT_NE(ref.find("`queue_pop_timeout` | `RELAY_QUEUE_POP_TIMEOUT` | `5m`"), std::string::npos);
  EXPECT_NE(ref.find("not the job length. At least `300ms`. |"), std::string::npos)
      << "a duration's minimum is in the reference";
}

// Listen addresses (server.listen, relay.progress_listen): IP literals and localhost with a port
// in range, checked at start — a host name failed only when binding ("Invalid argument"), and a
// port past 65535 bound another port (99999 as 34463).
TEST(ListenAddress, IpLiteralsAndLocalhostWithAPortInRange) {
  struct Case {
    std::string text, ip;
    int port;  // -1: refused
  } cases[] = {
      {"0.0.0.0:8080", "0.0.0.0", 8080},
      {"127.0.0.1:0", "127.0.0.1", 0},
      {"[::]:8080", "::", 8080},
      {"[::1]:65535", "::1", 65535},
      {"localhost:9000", "127.0.0.1", 9000},
      {"example.com:80", "", -1},
      {"0.0.0.0:99999", "", -1},
      {"0.0.0.0:65536", "", -1},
      {"0.0.0.0:", "", -1},
      {":8080", "", -1},
      {"0.0.0.0:80x", "", -1},
      {"0.0.0.0:-1", "", -1},
      {"8080", "", -1},
      {"::1:8080", "", -1},
      {"[::1]", "", -1},
      {"256.0.0.1:80", "", -1},
  };
  for (const auto& c : cases) {
    auto a = parse_listen(c.text);
    if (c.port < 0) {
      EXPECT_FALSE(a) << c.text << " was taken as " << a->ip << " port " << a->port;
      continue;
    }
    ASSERT_TRUE(a) << c.text;
    EXPECT_EQ(a->ip, c.ip) << c.text;
    EXPECT_EQ(a->port, c.port) << c.text;
  }
  const std::map<std::string, std::string> env = {{"RELAY_SERVICE_TYPES", "a=m"},
                                                  {"RELAY_AUTH_ENABLED", "false"},
                                                  {"RELAY_SERVER_LISTEN", "relay.internal:80"}};
  try {
    gateway::load("", env_of(env));
    ADD_FAILURE() << "a host name was taken as a listen address";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'server.listen'"), std::string::npos) << e.what();
  }
}

// server.cors_origins: a YAML list (or one origin), or comma-separated in the environment; each
// an origin as a browser sends it, or "*" — anything else is refused at start, naming the key.
TEST(GatewayConfig, CorsOriginsAreListedAndChecked) {
  gateway::Config c;
  auto s = gateway::schema(c);
  s.load_string(
      "server:\n  cors_origins:\n    - https://app.example.com\n    - "
      "http://localhost:3000\n",
      env_of({}));
  EXPECT_EQ(c.cors_origins,
            (std::vector<std::string>{"https://app.example.com", "http://localhost:3000"}));
  s.load_string("server:\n  cors_origins: '*'\n", env_of({}));
  EXPECT_EQ(c.cors_origins, std::vector<std::string>{"*"});
  s.load_string(
      "", env_of({{"RELAY_SERVER_CORS_ORIGINS", " https://a.example, https://b.example:8443,"}}));
  EXPECT_EQ(c.cors_origins,
            (std::vector<std::string>{"https://a.example", "https://b.example:8443"}));
  s.load_string("", env_of({}));
  EXPECT_TRUE(c.cors_origins.empty()) << "none by default";

  for (const char* bad : {"https://app.example.com/", "app.example.com", "https://*.example.com",
                          "https://app.example.com:99999"}) {
    const std::map<std::string, std::string> env = {{"RELAY_SERVICE_TYPES", "a=m"},
                                                    {"RELAY_AUTH_ENABLED", "false"},
                                                    {"RELAY_SERVER_CORS_ORIGINS", bad}};
    try {
      gateway::load("", env_of(env));
      ADD_FAILURE() << bad << " was taken as an origin";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'server.cors_origins'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  try {
    gateway::Config d;
    gateway::schema(d).load_string("server:\n  cors_origins: {a: b}\n", env_of({}));
    ADD_FAILURE() << "a mapping was taken as a list of origins";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'server.cors_origins'"), std::string::npos) << e.what();
  }
}

// What loading the gateway's config says against yaml and env (with a service type and auth
// off unless they are given): "" when it is taken.
std::string gateway_refusal(const std::string& yaml, std::map<std::string, std::string> env) {
  env.emplace("RELAY_AUTH_ENABLED", "false");
  if (yaml.find("service_types") == std::string::npos)
    env.emplace("RELAY_SERVICE_TYPES", "asr=whisper");
  try {
    gateway::Config c;
    gateway::schema(c).load_string(yaml, env_of(env));
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// A service type named twice is refused: whichever came second would otherwise replace the
// first without a word (its model, limits and retries).
TEST(GatewayConfig, AServiceTypeNamedTwiceIsRefused) {
  EXPECT_NE(gateway_refusal("", {{"RELAY_SERVICE_TYPES", "asr=whisper,asr=other"}})
                .find("'service_types.asr'"),
            std::string::npos);
  EXPECT_NE(gateway_refusal("service_types:\n  asr: {model: whisper}\n  asr: {model: other}\n", {})
                .find("'service_types.asr'"),
            std::string::npos);
  EXPECT_EQ(gateway_refusal("", {{"RELAY_SERVICE_TYPES", "asr=whisper,ocr=whisper"}}), "");
}

// The same for every key and every map: a file or a variable that says one thing twice is a
// mistake to point at, not one to resolve by order.
TEST(GatewayConfig, AKeyGivenTwiceIsRefusedNamingIt) {
  EXPECT_NE(gateway_refusal("log:\n  level: debug\nlog:\n  level: info\n", {}).find("'log'"),
            std::string::npos);
  EXPECT_NE(gateway_refusal("log:\n  level: debug\n  level: info\n", {}).find("'log.level'"),
            std::string::npos);
  const std::string hash(64, 'a');
  EXPECT_NE(gateway_refusal("auth:\n  api_keys:\n    " + hash + ": t1\n    " + hash + ": t2\n", {})
                .find("given twice"),
            std::string::npos);
  EXPECT_NE(gateway_refusal("", {{"RELAY_AUTH_API_KEYS", hash + "=t1," + hash + "=t2"}})
                .find("given twice"),
            std::string::npos);
  EXPECT_EQ(gateway_refusal("log:\n  level: debug\n", {}), "");
}

}  // namespace
}  // namespace relay::config
