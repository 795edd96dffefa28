#pragma once
// Config sections every binary shares (redis.*, storage.*, log.*), bound to the schema in one
// place so that their keys, defaults and docs are the same for the relay and the gateway.

#include <chrono>
#include <optional>
#include <string>

#include "config/schema.hpp"
#include "crypto/keyring.hpp"
#include "redis/connection.hpp"
#include "redis/keys.hpp"
#include "storage/storage.hpp"

namespace relay::config {

struct RedisConfig {
  std::string url;         // redis[s]://[user:password@]host:port[/db]
  std::string username;    // ACL user; overrides the URL's
  std::string password;    // overrides the URL's; prefer RELAY_REDIS_PASSWORD
  std::string key_prefix;  // prepended to every key and channel
  bool hash_tag = false;   // relay:{model}:... for Redis Cluster
  std::chrono::milliseconds connect_timeout{};
  std::string tls_ca_file, tls_cert_file, tls_key_file, tls_server_name;  // rediss:// only
  bool tls_verify = true;
  std::string mode;                                  // standalone | cluster | sentinel
  std::string sentinel_master;                       // sentinel mode: the monitored master's name
  std::string sentinel_username, sentinel_password;  // the sentinels' AUTH, when they need it
  std::int64_t wait_replicas = 0;                    // WAIT after the writes that matter; 0 = off

  redis::Endpoint endpoint() const;  // throws std::invalid_argument
  // Cluster mode tags keys whatever hash_tag says: its Lua steps need one slot per model.
  redis::Keys keys() const { return {key_prefix, hash_tag || mode == "cluster"}; }
};

struct LogConfig {
  std::string level, format;
};

void bind_redis(Schema& s, RedisConfig& c);
void bind_storage(Schema& s, storage::Config& c);
void bind_log(Schema& s, LogConfig& c);
void bind_encryption(Schema& s, crypto::EncryptionConfig& c);

// Throw ConfigError naming the key.
void validate_redis(const RedisConfig& c);
void validate_storage(const storage::Config& c);
void validate_log(const LogConfig& c);
// Letters, digits, '-', '_', '.': safe in keys, object paths and URLs.
bool is_safe_name(const std::string& name);

std::string host_name();

// A listen address: an IP literal (IPv6 in brackets) or `localhost` (127.0.0.1), and a port
// 0-65535 (0: any free one). Names other than localhost are not resolved: which of a name's
// addresses to bind is the operator's choice, not the resolver's.
struct ListenAddress {
  std::string ip;  // as given, brackets removed; localhost as 127.0.0.1
  unsigned short port = 0;
};
std::optional<ListenAddress> parse_listen(const std::string& text);
// Throws ConfigError naming key when text is not a listen address.
ListenAddress listen_address(const std::string& key, const std::string& text);

}  // namespace relay::config
