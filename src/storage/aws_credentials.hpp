#pragma once
// AWS credentials the way pods get them, in the AWS SDKs' order (first that is configured wins):
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY [+ AWS_SESSION_TOKEN]: static keys.
//   2. AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE: STS AssumeRoleWithWebIdentity (EKS IRSA and
//      any OIDC-federated cluster). The token file is re-read at every refresh (the kubelet
//      rotates it); AWS_ROLE_SESSION_NAME optional; the STS endpoint is AWS_ENDPOINT_URL_STS,
//      else https://sts.<region>.amazonaws.com.
//   3. AWS_CONTAINER_CREDENTIALS_FULL_URI (or _RELATIVE_URI on 169.254.170.2) with the token in
//      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (re-read each time) or _TOKEN: the container
//      credentials endpoint (EKS Pod Identity, ECS).
// Temporary credentials are refreshed before they expire: at the latest 5 minutes before, and
// at half their lifetime when they live less than 10 minutes. A failed refresh keeps the old
// ones while they are still valid and tries again at the next request.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace relay::storage {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty for long-term keys
  std::optional<std::chrono::system_clock::time_point> expiration;
};

// Thread-safe: one provider serves every transfer of a process.
class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  // Valid credentials, fetched or refreshed if needed. Throws StorageError (unavailable) when
  // none can be had.
  virtual AwsCredentials get() = 0;
  // "environment", "web identity (role ...)" or "container endpoint (...)": for logs.
  virtual std::string describe() const = 0;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Picks the source as described above. region: for the default STS endpoint when AWS_REGION and
// AWS_DEFAULT_REGION are unset. timeout: connect and stall limit for credential requests.
// Throws std::invalid_argument when no source is configured or one is configured badly.
std::shared_ptr<CredentialsProvider> make_credentials_provider(const EnvLookup& env,
                                                               const std::string& region,
                                                               std::chrono::milliseconds timeout);

// Wraps a fetch function with caching and refresh (exposed for tests, with an injected clock).
class RefreshingProvider : public CredentialsProvider {
 public:
  using NowFn = std::function<std::chrono::system_clock::time_point()>;
  RefreshingProvider(std::function<AwsCredentials()> fetch, std::string description,
                     NowFn clock = std::chrono::system_clock::now);
  AwsCredentials get() override;
  std::string describe() const override { return description_; }

 private:
  bool due(std::chrono::system_clock::time_point now) const;
  std::function<AwsCredentials()> fetch_;
  std::string description_;
  NowFn clock_;
  std::mutex mu_;
  std::optional<AwsCredentials> current_;
  std::chrono::system_clock::time_point fetched_at_;
};

// Parsers, exposed for tests. Throw std::runtime_error with the service's own error text.
AwsCredentials parse_sts_response(const std::string& xml);
AwsCredentials parse_container_response(const std::string& json);
// "2026-11-30T10:00:00Z" or with fractional seconds / an offset.
std::optional<std::chrono::system_clock::time_point> parse_aws_time(const std::string& text);

}  // namespace relay::storage
