// The https:// inputs of storage/input_url.hpp, on libcurl (in relay-s3.so).
#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "http/destination.hpp"
#include "http/pull_source.hpp"
#include "storage/input_url.hpp"
#include "storage/resume.hpp"

namespace relay::storage {
namespace {

constexpr int kMaxRedirects = 5;

ErrorKind kind_for(long status) {
  if (status == 404 || status == 410) return ErrorKind::not_found;
  if (status == 401 || status == 403) return ErrorKind::access_denied;
  if (status >= 500 || status == 429) return ErrorKind::unavailable;
  return ErrorKind::other;
}

// Input hosts are looked up off the job's thread, the wait bounded by the transfer's stall
// timeout and ended by the job's stop (a cancel, SIGTERM), neither of which getaddrinfo itself
// heeds (behind a name server that does not answer it takes 10 s and more).
http::Resolver& resolver(std::chrono::milliseconds timeout) {
  static http::Resolver r({.timeout = timeout, .max_waiting = 1024});
  return r;
}

// One hop: the URL checked, its addresses pinned for the connection. `request`: extra request
// header lines, kept alive by the caller for the transfer's life.
std::unique_ptr<http::PullSource> get(const InputUrlOptions& o, const std::string& url,
                                      std::stop_token stop,
                                      const http::Headers* request = nullptr) {
  std::vector<std::string> addresses;
  if (auto why = http::check_destination(
          url, {{"https"}, o.allow_private, "input_url", "input_urls.allow_private"}, &addresses,
          &resolver(o.timeout), stop)) {
    if (stop.stop_requested()) throw Aborted();  // (the job's stop ended the lookup's wait)
    // A host that cannot be resolved now may be later: the job's retry policy decides.
    throw StorageError(why->transient ? ErrorKind::unavailable : ErrorKind::invalid, why->reason);
  }
  auto u = boost::urls::parse_absolute_uri(url);
  std::string host = u->host();
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  std::string entry = host + ":" + (u->has_port() ? std::string(u->port()) : "443") + ":";
  for (size_t i = 0; i < addresses.size(); ++i)
    entry +=
        (i ? "," : "") +
        (addresses[i].find(':') != std::string::npos ? "[" + addresses[i] + "]" : addresses[i]);
  auto easy = http::make_easy();
  auto headers = std::make_unique<http::Headers>();
  headers->add(entry);  // kept alive with the transfer: CURLOPT_RESOLVE's list
  curl_easy_setopt(easy.get(), CURLOPT_RESOLVE, headers->get());
  if (request) curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, request->get());
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(easy.get(), CURLOPT_FOLLOWLOCATION, 0L);  // each hop is checked here
  curl_easy_setopt(easy.get(), CURLOPT_USERAGENT, "relay");
  if (!o.ca_file.empty()) curl_easy_setopt(easy.get(), CURLOPT_CAINFO, o.ca_file.c_str());
  const long timeout_ms = static_cast<long>(o.timeout.count());
  curl_easy_setopt(easy.get(), CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(easy.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy.get(), CURLOPT_LOW_SPEED_TIME, std::max(1L, timeout_ms / 1000));
  const std::string shown = std::string(u->scheme()) + "://" +
                            std::string(u->encoded_host_and_port()) +
                            std::string(u->encoded_path());  // no query: it may hold a token
  return std::make_unique<http::PullSource>(
      std::move(easy), std::move(headers), std::move(stop),
      [shown](CURLcode code, long status, const std::string& body) {
        if (code != CURLE_OK)
          throw StorageError(ErrorKind::unavailable, "GET " + shown + ": " + http::describe(code));
        if (status >= 300 && status < 400) return;  // a redirect: the caller follows it
        std::string text = "GET " + shown + ": HTTP " + std::to_string(status);
        if (!body.empty()) text += ": " + body.substr(0, 200);
        throw StorageError(kind_for(status), text, {}, status);
      });
}

// The first hop's answer, redirects followed, and the URL that gave it.
struct Opened {
  std::unique_ptr<http::PullSource> source;
  std::string url;
};

Opened follow(const InputUrlOptions& o, const std::string& url, std::stop_token stop) {
  std::string at = url;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    auto source = get(o, at, stop);
    const long status = source->status();
    if (status < 300 || status >= 400) return {std::move(source), at};
    auto it = source->response_headers().find("location");
    if (it == source->response_headers().end())
      throw StorageError(ErrorKind::other, "HTTP " + std::to_string(status) + " without Location");
    boost::urls::url next;
    auto base = boost::urls::parse_absolute_uri(at);
    auto ref = boost::urls::parse_uri_reference(it->second);
    if (!base || !ref || !boost::urls::resolve(*base, *ref, next))
      throw StorageError(ErrorKind::invalid, "a redirect to an unreadable URL");
    at = std::string(next.buffer());
  }
  throw StorageError(ErrorKind::other, "more than 5 redirects");
}

// An https input read to its end across dropped connections, where its origin allows: when the
// first answer gave a length and a strong validator (an ETag, else Last-Modified), a transfer
// that fails on what a retry may fix is asked again for the rest (Range from the byte it stopped
// at, If-Range naming that version), with backoff, up to five failures in a row without
// progress. An origin that answers anything but the rest of that same version (200: no ranges,
// or the file changed) ends the attempt as a drop did before (input_fetch_failed, retried).
class ResumingHttpsSource final : public ByteSource {
 public:
  static constexpr int kAttempts = 5;

  ResumingHttpsSource(const InputUrlOptions& o, const std::string& url, std::stop_token stop)
      : options_(o), stop_(std::move(stop)) {
    auto opened = follow(options_, url, stop_);
    url_ = std::move(opened.url);
    source_ = std::move(opened.source);
    length_ = source_->size();
    const auto& h = source_->response_headers();
    if (auto e = h.find("etag"); e != h.end() && !e->second.starts_with("W/"))
      validator_ = e->second;
    else if (auto m = h.find("last-modified"); m != h.end())
      validator_ = m->second;
  }

  size_t read(std::span<char> buf) override {
    return resume_after_failures(
        [&] {
          if (!source_) reopen();
          const size_t n = source_->read(buf);
          done_ += n;
          return n;
        },
        Persistence{.attempts = kAttempts}, backoff_, stop_,
        [&] { return length_ && !validator_.empty(); },
        // (No log line: this module has no logger; the attempt's outcome says what happened.)
        [&](const StorageError&, int) { source_.reset(); });
  }
  std::optional<std::uint64_t> size() const override { return length_; }

 private:
  // The rest of the same version, or a StorageError (unavailable: the attempt may be retried).
  void reopen() {
    request_ = std::make_unique<http::Headers>();
    request_->add("Range: bytes=" + std::to_string(done_) + "-");
    request_->add("If-Range: " + validator_);
    auto next = get(options_, url_, stop_, request_.get());
    const auto came = http::content_range(next->response_headers());
    if (next->status() != 206 || !came || came->first != done_) {
      validator_.clear();  // no more tries in place: the attempt ends (and may be retried)
      throw StorageError(ErrorKind::unavailable, "the input's origin cannot resume it (HTTP " +
                                                     std::to_string(next->status()) +
                                                     ") after a dropped connection");
    }
    source_ = std::move(next);
  }

  InputUrlOptions options_;
  std::stop_token stop_;
  std::string url_, validator_;
  std::optional<std::uint64_t> length_;
  std::uint64_t done_ = 0;
  std::unique_ptr<http::Headers> request_;  // before source_: it outlives the transfer
  std::unique_ptr<http::PullSource> source_;
  Backoff backoff_{std::chrono::milliseconds(200), std::chrono::seconds(3)};
};

}  // namespace

std::unique_ptr<ByteSource> open_https(const InputUrlOptions& o, const std::string& url,
                                       std::stop_token stop) {
  return std::make_unique<ResumingHttpsSource>(o, url, std::move(stop));
}

}  // namespace relay::storage
