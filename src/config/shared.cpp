#include "config/shared.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <cctype>

#include "common/port.hpp"

namespace relay::config {

void bind_redis(Schema& s, RedisConfig& c) {
  s.string("redis.url", &c.url, "redis://127.0.0.1:6379",
           "Redis address, `redis://[user:password@]host:port[/db]`; `rediss://` for TLS.");
  s.string("redis.username", &c.username, "", "Redis ACL user (overrides the URL's).");
  s.string("redis.password", &c.password, "",
           "Redis password (overrides the URL's). Prefer the environment variable.");
  s.string("redis.key_prefix", &c.key_prefix, "",
           "Prefix for every key and channel, e.g. `prod:`.");
  s.boolean("redis.hash_tag", &c.hash_tag, false,
            "Wrap the model in `{}` in keys so each model's keys share a Redis Cluster slot "
            "(always on in cluster mode).");
  s.duration("redis.connect_timeout", &c.connect_timeout, "5s",
             "Timeout of one connection attempt, its handshake's replies included (AUTH, a "
             "sentinel's or cluster node's answer): a frozen Redis's kernel still accepts "
             "connections.",
             config::kPositive);
  s.string("redis.tls_ca_file", &c.tls_ca_file, "",
           "TLS (`rediss://`): CA certificates (PEM) that signed Redis's certificate; empty = the "
           "system's CAs (managed services).");
  s.string("redis.tls_cert_file", &c.tls_cert_file, "",
           "TLS: client certificate (PEM), for servers that require one; with `tls_key_file`.");
  s.string("redis.tls_key_file", &c.tls_key_file, "", "TLS: the client certificate's key (PEM).");
  s.string("redis.tls_server_name", &c.tls_server_name, "",
           "TLS: the name Redis's certificate must carry (and SNI); default: the URL's host.");
  s.boolean("redis.tls_verify", &c.tls_verify, true,
            "TLS: verify Redis's certificate and name. Turn off only for testing.");
  s.string("redis.mode", &c.mode, "standalone",
           "`standalone`; `cluster`: then `redis.url` lists one or more seed nodes "
           "(`redis://[user:password@]host:port,host:port,...`) and each command goes to the "
           "master of its slot; or `sentinel`: then `redis.url` lists the sentinels "
           "(`redis://[user:password@]host:port[/db],host:port,...`, the credentials and database "
           "being the master's) and each connection asks them for the master.");
  s.string("redis.sentinel_master", &c.sentinel_master, "",
           "Sentinel mode: the name the sentinels monitor the master by.");
  s.string("redis.sentinel_username", &c.sentinel_username, "",
           "Sentinel mode: the ACL user the sentinels themselves require (not the master's).");
  s.string("redis.sentinel_password", &c.sentinel_password, "",
           "Sentinel mode: the password the sentinels themselves require (their `requirepass` or "
           "ACL user; not the master's, which is `redis.password`). Empty: no AUTH to the "
           "sentinels. Prefer the environment variable.");
  s.integer("redis.wait_replicas", &c.wait_replicas, 0, 0, 16,
            "The writes a client is told about — a submission (202), a job's outcome — count as "
            "done only once this many replicas have them (`WAIT`, up to 1 s per try, retried "
            "like any unknown outcome). With Sentinel or Cluster replicas set it to 1: Redis "
            "replicates asynchronously, and a failover otherwise drops what the old master "
            "accepted last. `0` = off.");
}

void bind_storage(Schema& s, storage::Config& c) {
  s.string("storage.url", &c.url, "file:///var/lib/relay/storage",
           "`file:///path` or `s3://bucket/prefix`.");
  s.string("storage.s3_endpoint", &c.s3_endpoint, "",
           "S3 endpoint URL; empty for AWS (`https://s3.<region>.amazonaws.com`).");
  s.string("storage.s3_region", &c.s3_region, "us-east-1",
           "S3 region (part of the SigV4 signature).");
  s.boolean("storage.s3_path_style", &c.s3_path_style, false,
            "Path-style addressing (`endpoint/bucket/key`), for MinIO and most non-AWS stores.");
  s.integer("storage.s3_part_size", &c.s3_part_size, 8 << 20, 5 << 20, 1LL << 32,
            "Multipart part size in bytes: a larger result goes in parts of this size, each "
            "retried alone (one in memory at a time); a gateway upload of unknown length or over "
            "5 GiB too (a known length within 5 GiB is one streamed PUT).");
  s.duration("storage.s3_timeout", &c.s3_timeout, "30s",
             "Connect timeout, and how long a transfer may stall before it fails.",
             config::kPositive);
  s.boolean("storage.fsync", &c.fsync, false,
            "Filesystem backend: fsync each object before it is renamed into place.");
}

void bind_encryption(Schema& s, crypto::EncryptionConfig& c) {
  s.boolean("encryption.enabled", &c.enabled, false,
            "Encrypt inputs and results at rest (Tink AES-GCM-HKDF streaming, AES-256). Keys: "
            "`RELAY_ENCRYPTION_KEY_<ID>` "
            "(base64 of 32 bytes) or files in `encryption.keys_dir`, never this file.");
  s.string("encryption.active_key", &c.active_key, "",
           "Id of the key new objects are encrypted with; others still decrypt.");
  s.string(
      "encryption.keys_dir", &c.keys_dir, "",
      "Folder of key files (name = key id, content = base64 of 32 bytes), e.g. a mounted Secret.");
  s.integer("encryption.segment_size", &c.segment_size, 1 << 20, 1024, 1 << 26,
            "Ciphertext segment size in bytes (Tink's AES256_GCM_HKDF_1MB).");
}

void bind_log(Schema& s, LogConfig& c) {
  s.string("log.level", &c.level, "info", "`debug`, `info`, `warn` or `error`.");
  s.string("log.format", &c.format, "json", "`json` (one object per line) or `text`.");
}

redis::Endpoint RedisConfig::endpoint() const {
  redis::Endpoint ep = mode == "sentinel"  ? redis::parse_sentinel_urls(url, sentinel_master)
                       : mode == "cluster" ? redis::parse_cluster_urls(url)
                                           : redis::parse_url(url);
  if (!username.empty()) ep.username = username;
  if (!password.empty()) ep.password = password;
  ep.sentinel_username = sentinel_username;
  ep.sentinel_password = sentinel_password;
  ep.connect_timeout = connect_timeout;
  ep.tls_ca_file = tls_ca_file;
  ep.tls_cert_file = tls_cert_file;
  ep.tls_key_file = tls_key_file;
  ep.tls_server_name = tls_server_name;
  ep.tls_verify = tls_verify;
  return ep;
}

namespace {
[[noreturn]] void bad(const std::string& key, const std::string& why) {
  throw ConfigError("config key '" + key + "': " + why);
}
}  // namespace

void validate_redis(const RedisConfig& c) {
  if (c.mode != "standalone" && c.mode != "sentinel" && c.mode != "cluster")
    bad("redis.mode", "expected standalone, cluster or sentinel");
  if (c.mode == "sentinel" && c.sentinel_master.empty())
    bad("redis.sentinel_master", "required in sentinel mode (the name the sentinels monitor)");
  for (const auto& [key, value] : {std::pair{"redis.sentinel_master", &c.sentinel_master},
                                   {"redis.sentinel_username", &c.sentinel_username},
                                   {"redis.sentinel_password", &c.sentinel_password}})
    if (c.mode != "sentinel" && !value->empty()) bad(key, "set, but redis.mode is not sentinel");
  if (!c.sentinel_username.empty() && c.sentinel_password.empty())
    bad("redis.sentinel_username", "set without redis.sentinel_password");
  redis::Endpoint ep;
  try {
    ep = c.endpoint();
  } catch (const std::invalid_argument& e) {
    bad("redis.url", e.what());
  }
  const std::pair<const char*, const std::string*> files[] = {
      {"redis.tls_ca_file", &c.tls_ca_file},
      {"redis.tls_cert_file", &c.tls_cert_file},
      {"redis.tls_key_file", &c.tls_key_file}};
  for (const auto& [key, path] : files) {
    if (path->empty()) continue;
    if (!ep.tls) bad(key, "set, but redis.url is not rediss:// (TLS)");
    if (::access(path->c_str(), R_OK) != 0) bad(key, "cannot read " + *path);
  }
  if (!c.tls_server_name.empty() && !ep.tls)
    bad("redis.tls_server_name", "set, but redis.url is not rediss:// (TLS)");
  if (c.tls_cert_file.empty() != c.tls_key_file.empty())
    bad(c.tls_cert_file.empty() ? "redis.tls_cert_file" : "redis.tls_key_file",
        "a client certificate needs both tls_cert_file and tls_key_file");
}

void validate_storage(const storage::Config& c) {
  if (!c.url.starts_with("file:///") && !c.url.starts_with("s3://"))
    bad("storage.url", "expected file:///path or s3://bucket[/prefix]");
}

void validate_log(const LogConfig& c) {
  if (c.level != "debug" && c.level != "info" && c.level != "warn" && c.level != "error")
    bad("log.level", "expected debug, info, warn or error");
  if (c.format != "json" && c.format != "text") bad("log.format", "expected json or text");
}

bool is_safe_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char ch : name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      return false;
  return true;
}

std::optional<ListenAddress> parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const auto port = parse_port(std::string_view(text).substr(colon + 1), /*allow_zero=*/true);
  if (!port) return std::nullopt;
  ListenAddress out;
  out.port = *port;
  std::string host = text.substr(0, colon);
  unsigned char addr[16];
  if (host == "localhost") {
    out.ip = "127.0.0.1";
  } else if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    out.ip = host.substr(1, host.size() - 2);
    if (::inet_pton(AF_INET6, out.ip.c_str(), addr) != 1) return std::nullopt;
  } else if (::inet_pton(AF_INET, host.c_str(), addr) == 1) {
    out.ip = host;
  } else {
    return std::nullopt;
  }
  return out;
}

ListenAddress listen_address(const std::string& key, const std::string& text) {
  if (auto a = parse_listen(text)) return *a;
  throw ConfigError("config key '" + key + "': expected an IP address and port (0.0.0.0:8080, " +
                    "[::]:8080, 127.0.0.1:0; localhost is the one name taken), got '" + text + "'");
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host[0] ? host : "relay";
}

}  // namespace relay::config
