#include "storage/aws_credentials.hpp"

#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "http/curl.hpp"
#include "storage/storage.hpp"

namespace relay::storage {
namespace {

using Clock = std::chrono::system_clock;
using namespace std::chrono_literals;

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// Token files are re-read on every fetch: the kubelet rewrites projected tokens before expiry.
std::string read_token_file(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f)
    throw StorageError(ErrorKind::unavailable, std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string token = trimmed(ss.str());
  if (token.empty()) throw StorageError(ErrorKind::unavailable, std::string(what) + " is empty");
  return token;
}

struct HttpAnswer {
  long status;
  std::string body;
};

// One small request to a credentials service. Failures below HTTP are `unavailable`.
HttpAnswer request(const std::string& url, const std::string& post_body,
                   const std::vector<std::string>& headers, std::chrono::milliseconds timeout,
                   const std::string& what) {
  auto easy = http::make_easy();
  http::Headers h;
  for (const auto& line : headers) h.add(line);
  HttpAnswer answer{0, {}};
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, h.get());
  if (!post_body.empty()) {
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDS, post_body.c_str());
    curl_easy_setopt(easy.get(), CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(post_body.size()));
  }
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &http::append_to_string);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(easy.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()) * 2);
  http::Transfer t(easy.get());
  CURLcode rc = t.run();
  if (rc != CURLE_OK) throw StorageError(ErrorKind::unavailable, what + ": " + http::describe(rc));
  answer.status = http::response_code(easy.get());
  return answer;
}

class StaticProvider final : public CredentialsProvider {
 public:
  explicit StaticProvider(AwsCredentials c) : creds_(std::move(c)) {}
  AwsCredentials get() override { return creds_; }
  std::string describe() const override { return "environment (AWS_ACCESS_KEY_ID)"; }

 private:
  AwsCredentials creds_;
};

// The container endpoint may be plain HTTP only on loopback or the link-local addresses ECS
// and EKS Pod Identity use (as the AWS SDKs require): elsewhere the token would travel in clear.
bool allowed_container_url(const std::string& url) {
  auto u = boost::urls::parse_uri(url);
  if (!u) return false;
  if (u->scheme() == "https") return !u->host().empty();
  if (u->scheme() != "http") return false;
  std::string host(u->encoded_host());
  return host == "127.0.0.1" || host == "localhost" || host == "[::1]" || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "[fd00:ec2::23]" || host.starts_with("127.");
}

}  // namespace

std::optional<Clock::time_point> parse_aws_time(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  std::string_view rest = std::string_view(text).substr(static_cast<size_t>(consumed));
  if (rest.starts_with('.')) {  // fractional seconds: ignored (expiry is coarse anyway)
    rest.remove_prefix(1);
    while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest.front())))
      rest.remove_prefix(1);
  }
  long offset = 0;
  if (rest == "Z" || rest == "+00:00") {
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int h = 0, m = 0;
    if (std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &h, &m) != 2)
      return std::nullopt;
    offset = (h * 3600L + m * 60L) * (rest[0] == '+' ? 1 : -1);
  } else {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::time_t secs = timegm(&tm);
  if (secs == -1) return std::nullopt;
  return Clock::from_time_t(secs - offset);
}

AwsCredentials parse_sts_response(const std::string& xml) {
  if (xml.find("<Error>") != std::string::npos) {
    throw std::runtime_error(http::xml_tag(xml, "Code") + ": " + http::xml_tag(xml, "Message"));
  }
  std::string block = http::xml_tag(xml, "Credentials");
  AwsCredentials c{http::xml_tag(block, "AccessKeyId"), http::xml_tag(block, "SecretAccessKey"),
                   http::xml_tag(block, "SessionToken"),
                   parse_aws_time(http::xml_tag(block, "Expiration"))};
  if (c.access_key_id.empty() || c.secret_access_key.empty() || c.session_token.empty() ||
      !c.expiration)
    throw std::runtime_error("the answer holds no complete <Credentials>");
  return c;
}

AwsCredentials parse_container_response(const std::string& json) {
  boost::system::error_code ec;
  auto v = boost::json::parse(json, ec);
  if (ec || !v.is_object()) throw std::runtime_error("the answer is not a JSON object");
  const auto& o = v.as_object();
  auto str = [&](const char* k) -> std::string {
    auto* p = o.if_contains(k);
    return p && p->is_string() ? std::string(p->as_string()) : std::string{};
  };
  AwsCredentials c{str("AccessKeyId"), str("SecretAccessKey"), str("Token"), std::nullopt};
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    std::string msg = str("message").empty() ? str("Message") : str("message");
    throw std::runtime_error("no AccessKeyId/SecretAccessKey in the answer" +
                             (msg.empty() ? std::string{} : ": " + msg));
  }
  if (auto e = str("Expiration"); !e.empty()) {
    c.expiration = parse_aws_time(e);
    if (!c.expiration) throw std::runtime_error("unreadable Expiration '" + e + "'");
  }
  return c;
}

RefreshingProvider::RefreshingProvider(std::function<AwsCredentials()> fetch,
                                       std::string description, NowFn clock)
    : fetch_(std::move(fetch)), description_(std::move(description)), clock_(std::move(clock)) {}

bool RefreshingProvider::due(Clock::time_point now) const {
  if (!current_) return true;
  if (!current_->expiration) return false;  // the endpoint said they do not expire
  auto lifetime = *current_->expiration - fetched_at_;
  auto margin = std::min<Clock::duration>(5min, lifetime / 2);
  return now >= *current_->expiration - margin;
}

AwsCredentials RefreshingProvider::get() {
  std::lock_guard lock(mu_);  // one refresh at a time; the others wait for its result
  auto now = clock_();
  if (!due(now)) return *current_;
  // Still valid: use them and try again next time (a brief STS outage costs nothing).
  auto still_valid = [&] {
    return current_ && current_->expiration && now < *current_->expiration;
  };
  try {
    current_ = fetch_();
    fetched_at_ = now;
  } catch (const StorageError& e) {
    if (still_valid()) return *current_;
    throw StorageError(e.kind(), "AWS credentials from " + description_ + ": " + e.what());
  } catch (const std::exception& e) {
    if (still_valid()) return *current_;
    throw StorageError(ErrorKind::unavailable,
                       "AWS credentials from " + description_ + ": " + e.what());
  }
  return *current_;
}

std::shared_ptr<CredentialsProvider> make_credentials_provider(const EnvLookup& env,
                                                               const std::string& region,
                                                               std::chrono::milliseconds timeout) {
  auto get = [&](const char* name) { return env(name).value_or(""); };

  if (!get("AWS_ACCESS_KEY_ID").empty() || !get("AWS_SECRET_ACCESS_KEY").empty()) {
    AwsCredentials c{get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"),
                     get("AWS_SESSION_TOKEN"), std::nullopt};
    if (c.access_key_id.empty() || c.secret_access_key.empty())
      throw std::invalid_argument(
          "AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    return std::make_shared<StaticProvider>(std::move(c));
  }

  if (!get("AWS_ROLE_ARN").empty() || !get("AWS_WEB_IDENTITY_TOKEN_FILE").empty()) {
    std::string role = get("AWS_ROLE_ARN"), token_file = get("AWS_WEB_IDENTITY_TOKEN_FILE");
    if (role.empty() || token_file.empty())
      throw std::invalid_argument(
          "AWS credentials: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE must be set together");
    std::string session = get("AWS_ROLE_SESSION_NAME");
    if (session.empty())
      session = "relay-" + std::to_string(Clock::now().time_since_epoch().count());
    std::string sts_region = get("AWS_REGION");
    if (sts_region.empty()) sts_region = get("AWS_DEFAULT_REGION");
    if (sts_region.empty()) sts_region = region;
    std::string endpoint = get("AWS_ENDPOINT_URL_STS");
    if (endpoint.empty()) endpoint = "https://sts." + sts_region + ".amazonaws.com";
    auto u = boost::urls::parse_uri(endpoint);
    if (!u || (u->scheme() != "https" && u->scheme() != "http"))
      throw std::invalid_argument("AWS_ENDPOINT_URL_STS: expected http(s)://host[:port]");
    auto fetch = [=] {
      // AssumeRoleWithWebIdentity is not signed: the token is the proof.
      std::string body =
          "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + http::uri_encode(role) +
          "&RoleSessionName=" + http::uri_encode(session) + "&WebIdentityToken=" +
          http::uri_encode(read_token_file(token_file, "AWS_WEB_IDENTITY_TOKEN_FILE"));
      auto answer = request(endpoint, body, {"Content-Type: application/x-www-form-urlencoded"},
                            timeout, "STS " + endpoint);
      try {
        return parse_sts_response(answer.body);
      } catch (const std::exception& e) {
        throw StorageError(answer.status >= 500 ? ErrorKind::unavailable : ErrorKind::access_denied,
                           "STS AssumeRoleWithWebIdentity: HTTP " + std::to_string(answer.status) +
                               ": " + e.what());
      }
    };
    return std::make_shared<RefreshingProvider>(fetch, "web identity (" + role + ")");
  }

  std::string url = get("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (url.empty() && !get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").empty())
    url = "http://169.254.170.2" + get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!url.empty()) {
    if (!allowed_container_url(url))
      throw std::invalid_argument(
          "AWS_CONTAINER_CREDENTIALS_FULL_URI: plain http is allowed only to loopback or the "
          "ECS/EKS link-local addresses; got " +
          url);
    std::string token_file = get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    std::string token = get("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    auto fetch = [=] {
      std::vector<std::string> headers;
      std::string auth =
          token_file.empty()
              ? token
              : read_token_file(token_file, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
      if (!auth.empty()) headers.push_back("Authorization: " + auth);
      auto answer = request(url, "", headers, timeout, "container credentials " + url);
      if (answer.status != 200)
        throw StorageError(answer.status >= 500 ? ErrorKind::unavailable : ErrorKind::access_denied,
                           "container credentials " + url + ": HTTP " +
                               std::to_string(answer.status) + ": " + answer.body.substr(0, 200));
      try {
        return parse_container_response(answer.body);
      } catch (const std::exception& e) {
        throw StorageError(ErrorKind::other, "container credentials " + url + ": " + e.what());
      }
    };
    return std::make_shared<RefreshingProvider>(fetch, "container endpoint (" + url + ")");
  }

  throw std::invalid_argument(
      "S3 storage needs AWS credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
      "AWS_ROLE_ARN/AWS_WEB_IDENTITY_TOKEN_FILE, or AWS_CONTAINER_CREDENTIALS_FULL_URI");
}

}  // namespace relay::storage
