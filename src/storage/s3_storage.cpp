// S3 over libcurl: requests signed with SigV4 (libcurl's), reads as streams, and the three ways
// an object is written (one PUT from memory, one streamed PUT, a multipart upload), each with
// its abandonment path. One file, a little over 400 lines, because all of them share the
// request set-up and error mapping below.
#include "storage/s3_storage.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <cstring>
#include <future>

#include "common/backoff.hpp"
#include "common/errors.hpp"
#include "http/curl.hpp"
#include "http/pull_source.hpp"

namespace relay::storage {
namespace {

using http::append_to_string;
using http::Headers;
using http::Transfer;
using http::uri_encode;
using http::xml_tag;

ErrorKind kind_for(long status, const std::string& code) {
  if (status == 404 || code == "NoSuchKey" || code == "NoSuchBucket") return ErrorKind::not_found;
  if (status == 401 || status == 403) return ErrorKind::access_denied;
  if (status >= 500 || status == 429) return ErrorKind::unavailable;
  return ErrorKind::other;
}

[[noreturn]] void fail_http(const std::string& what, long status, const std::string& body) {
  auto [code, message] = parse_s3_error(body);
  std::string text = what + ": HTTP " + std::to_string(status);
  if (!code.empty()) text += " " + code;
  if (!message.empty()) text += ": " + message;
  throw StorageError(kind_for(status, code), text, code, status);
}

[[noreturn]] void fail_transfer(const std::string& what, CURLcode code) {
  throw StorageError(ErrorKind::unavailable, what + ": " + http::describe(code));
}

// Feeds a ByteSource into a curl upload; exceptions are parked in the Transfer and rethrown.
struct UploadFeed {
  ByteSource* source;
  Transfer* transfer = nullptr;
  static size_t read(char* buf, size_t size, size_t n, void* user) {
    auto* self = static_cast<UploadFeed*>(user);
    try {
      return self->source->read(std::span<char>(buf, size * n));
    } catch (...) {
      self->transfer->fail(std::current_exception());
      return CURL_READFUNC_ABORT;
    }
  }
};

// A request body already in memory, read in place.
class ViewSource final : public ByteSource {
 public:
  explicit ViewSource(std::string_view data) : data_(data) {}
  size_t read(std::span<char> buf) override {
    size_t n = std::min(buf.size(), data_.size());
    std::copy_n(data_.data(), n, buf.data());
    data_.remove_prefix(n);
    return n;
  }

 private:
  std::string_view data_;
};

}  // namespace

std::pair<std::string, std::string> parse_s3_error(const std::string& xml) {
  return {xml_tag(xml, "Code"), xml_tag(xml, "Message")};
}

S3Storage::S3Storage(const Config& config, std::string bucket, std::string prefix,
                     std::shared_ptr<CredentialsProvider> creds)
    : config_(config),
      bucket_(std::move(bucket)),
      prefix_(std::move(prefix)),
      creds_(std::move(creds)) {
  std::string endpoint = config_.s3_endpoint;
  if (endpoint.empty()) endpoint = "https://s3." + config_.s3_region + ".amazonaws.com";
  auto url = boost::urls::parse_uri(endpoint);
  if (!url || (url->scheme() != "http" && url->scheme() != "https") || url->host().empty())
    throw std::invalid_argument("storage.s3_endpoint must be http(s)://host[:port]");
  std::string hostport(url->encoded_host_and_port());
  if (config_.s3_path_style) {
    base_ = std::string(url->scheme()) + "://" + hostport + "/" + uri_encode(bucket_, false);
  } else {
    base_ = std::string(url->scheme()) + "://" + bucket_ + "." + hostport;
  }
  sigv4_ = "aws:amz:" + config_.s3_region + ":s3";
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

std::string S3Storage::object_url(const std::string& key, const std::string& query) const {
  std::string full = prefix_.empty() ? key : prefix_ + "/" + key;
  std::string url = base_ + "/" + uri_encode(full, true);
  if (!query.empty()) url += "?" + query;
  return url;
}

void S3Storage::configure(void* easy, const std::string& method, const std::string& url,
                          void* h) const {
  auto* headers = static_cast<Headers*>(h);
  // libcurl 7.88 does not add x-amz-content-sha256 itself; S3 rejects a SigV4 request without
  // it. UNSIGNED-PAYLOAD lets bodies stream (TLS protects their integrity on the wire).
  headers->add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  AwsCredentials creds = creds_->get();  // curl copies the strings it is given
  if (!creds.session_token.empty()) headers->add("x-amz-security-token: " + creds.session_token);
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "HEAD") curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers->get());
  curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4_.c_str());
  curl_easy_setopt(easy, CURLOPT_USERNAME, creds.access_key_id.c_str());
  curl_easy_setopt(easy, CURLOPT_PASSWORD, creds.secret_access_key.c_str());
  long timeout_ms = static_cast<long>(config_.s3_timeout.count());
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  // A stalled transfer (under 1 byte/s for the timeout) fails; a slow but moving one does not.
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, std::max(1L, timeout_ms / 1000));
}

std::unique_ptr<ByteSource> S3Storage::open(const std::string& key, std::stop_token stop) {
  auto easy = http::make_easy();
  auto headers = std::make_unique<Headers>();
  configure(easy.get(), "GET", object_url(key), headers.get());
  return std::make_unique<http::PullSource>(
      std::move(easy), std::move(headers), std::move(stop),
      [key](CURLcode code, long status, const std::string& body) {
        if (code != CURLE_OK) fail_transfer("GET " + key, code);
        fail_http("GET " + key, status, body);
      });
}

std::unique_ptr<ByteSource> S3Storage::open_range(const std::string& key, std::uint64_t first,
                                                  std::uint64_t length, std::stop_token stop) {
  if (length == 0) return std::make_unique<MemorySource>("");
  auto easy = http::make_easy();
  auto headers = std::make_unique<Headers>();
  // Explicit bounds, never a suffix (bytes=-n): s3rver, for one, reads that as 0-n.
  headers->add("Range: bytes=" + std::to_string(first) + "-" + std::to_string(first + length - 1));
  configure(easy.get(), "GET", object_url(key), headers.get());
  auto body = std::make_unique<http::PullSource>(
      std::move(easy), std::move(headers), std::move(stop),
      [key](CURLcode code, long status, const std::string& body) {
        if (code != CURLE_OK) fail_transfer("GET " + key + " (a range)", code);
        fail_http("GET " + key + " (a range)", status, body);
      });
  // What came is cut to what was asked: a store that ignores Range sends the whole object
  // (200), and one may send more than asked from the right start (s3rver answers bytes=0-0
  // with all of it).
  std::uint64_t skip = first;
  if (body->status() == 206) {
    const auto& h = body->response_headers();
    const auto came = http::content_range(h);
    if (!came || came->first != first || came->last + 1 < first + length)
      throw StorageError(ErrorKind::other,
                         "GET " + key + ": the store answered another range (" +
                             (h.contains("content-range") ? h.at("content-range") : "none") + ")");
    if (came->last + 1 == first + length) return body;
    skip = 0;
  }
  auto slice = std::make_unique<SliceSource>(*body, skip, length);
  return std::make_unique<OwningChain>(std::move(body), std::move(slice));
}

std::uint64_t S3Storage::size_of(const std::string& key, std::stop_token) {
  auto easy = http::make_easy();
  Headers headers;
  configure(easy.get(), "HEAD", object_url(key), &headers);
  Transfer t(easy.get());
  CURLcode rc = t.run();
  if (rc != CURLE_OK) fail_transfer("HEAD " + key, rc);
  long status = http::response_code(easy.get());
  if (status >= 300) fail_http("HEAD " + key, status, "");
  curl_off_t length = -1;
  curl_easy_getinfo(easy.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  if (length < 0) throw StorageError(ErrorKind::other, "HEAD " + key + ": no Content-Length");
  return static_cast<std::uint64_t>(length);
}

// S3 takes up to 5 GiB in one PUT.
constexpr std::uint64_t kMaxSinglePut = 5ULL << 30;

std::string S3Storage::request(const std::string& method, const std::string& key,
                               const std::string& query, std::string_view payload,
                               std::string* etag, std::stop_token stop) const {
  // A PUT (an object or a part, from memory) is tried again when S3 is unreachable, answers 5xx
  // or throttles (429, 503 SlowDown — which S3 expects clients to retry), as AWS's SDKs do: a
  // PUT is idempotent and its payload is at hand. The multipart steps around it (create,
  // complete, abort) are not: a second create would leave an upload behind.
  Backoff backoff(std::chrono::milliseconds(100), std::chrono::seconds(1));
  for (int attempt = 1;; ++attempt) {
    try {
      return request_once(method, key, query, payload, etag, stop);
    } catch (const StorageError& e) {
      if (method != "PUT" || e.kind() != ErrorKind::unavailable || attempt >= kPutAttempts) throw;
      if (!sleep_unless_stopped(backoff.next(), stop)) throw Aborted();
    }
  }
}

std::string S3Storage::request_once(const std::string& method, const std::string& key,
                                    const std::string& query, std::string_view payload,
                                    std::string* etag, std::stop_token stop) const {
  Headers headers;
  return send(method, object_url(key, query), method + " " + key, payload, &headers, etag,
              std::move(stop));
}

std::string S3Storage::send(const std::string& method, const std::string& url,
                            const std::string& what, std::string_view payload, void* h,
                            std::string* etag, std::stop_token stop) const {
  auto easy = http::make_easy();
  auto& headers = *static_cast<Headers*>(h);
  configure(easy.get(), method, url, &headers);
  std::string response;
  ViewSource src(payload);
  UploadFeed feed{&src};
  if (method == "PUT" || method == "POST") {
    curl_easy_setopt(easy.get(), CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy.get(), CURLOPT_READFUNCTION, &UploadFeed::read);
    curl_easy_setopt(easy.get(), CURLOPT_READDATA, &feed);
    curl_easy_setopt(easy.get(), CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  }
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &append_to_string);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &response);
  http::HeaderMap answer_headers;
  if (etag) {
    curl_easy_setopt(easy.get(), CURLOPT_HEADERFUNCTION, &http::collect_headers);
    curl_easy_setopt(easy.get(), CURLOPT_HEADERDATA, &answer_headers);
  }
  Transfer t(easy.get(), std::move(stop));
  feed.transfer = &t;
  CURLcode rc = t.run();
  if (rc != CURLE_OK) fail_transfer(what, rc);
  long status = http::response_code(easy.get());
  if (status >= 300) fail_http(what, status, response);
  if (etag) *etag = answer_headers["etag"];
  return response;
}

// One PUT whose body is pushed as it arrives: each write() drives the transfer until curl took
// the bytes (its read callback pauses the transfer when it has none). Nothing is buffered
// beyond curl's own upload buffer; S3 stores the object only once all `size` bytes arrived, so
// a writer dropped mid-way (the connection closes) leaves nothing.
class StreamedPut {
 public:
  StreamedPut(const S3Storage& s3, const std::string& key, std::uint64_t size, std::stop_token stop)
      : key_(key), size_(size), easy_(http::make_easy()) {
    s3.configure(easy_.get(), "PUT", s3.object_url(key), &headers_);
    curl_easy_setopt(easy_.get(), CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy_.get(), CURLOPT_READFUNCTION, &StreamedPut::on_read);
    curl_easy_setopt(easy_.get(), CURLOPT_READDATA, this);
    curl_easy_setopt(easy_.get(), CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
    curl_easy_setopt(easy_.get(), CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(easy_.get(), CURLOPT_WRITEFUNCTION, &append_to_string);
    curl_easy_setopt(easy_.get(), CURLOPT_WRITEDATA, &response_);
    transfer_ = std::make_unique<Transfer>(easy_.get(), std::move(stop));
  }

  void write(std::string_view data) {
    if (taken_ + data.size() > size_)
      throw StorageError(ErrorKind::invalid,
                         "PUT " + key_ + ": more bytes than the declared " + std::to_string(size_));
    taken_ += data.size();
    // The last byte waits for finish(): until then S3 has an incomplete body, which it drops
    // if the writer is abandoned — the object cannot appear before commit.
    if (taken_ == size_ && !data.empty()) {
      last_ = data.back();
      data.remove_suffix(1);
    }
    send(data);
  }

  void finish() {
    if (taken_ != size_)
      throw StorageError(ErrorKind::invalid, "PUT " + key_ + ": " + std::to_string(taken_) +
                                                 " bytes of the declared " + std::to_string(size_));
    if (size_ > 0) send(std::string_view(&last_, 1));
    resume();
    transfer_->run();
    check();
  }

 private:
  static size_t on_read(char* buf, size_t size, size_t n, void* user) {
    auto* self = static_cast<StreamedPut*>(user);
    if (self->pending_.empty()) {
      self->paused_ = true;
      return CURL_READFUNC_PAUSE;
    }
    const size_t take = std::min(size * n, self->pending_.size());
    std::memcpy(buf, self->pending_.data(), take);
    self->pending_.remove_prefix(take);
    self->sent_ += take;
    return take;
  }
  // Drives the transfer until curl has taken `data` (or it ended early: an error answer).
  void send(std::string_view data) {
    pending_ = data;
    resume();
    if (transfer_->run_until([this] { return pending_.empty(); })) check();
  }
  void resume() {
    if (!paused_) return;
    paused_ = false;
    curl_easy_pause(easy_.get(), CURLPAUSE_CONT);
  }
  // The transfer ended: whole and accepted, or a StorageError.
  void check() {
    if (transfer_->code() != CURLE_OK) fail_transfer("PUT " + key_, transfer_->code());
    long status = http::response_code(easy_.get());
    if (status >= 300) fail_http("PUT " + key_, status, response_);
    if (sent_ != size_)
      throw StorageError(ErrorKind::other, "PUT " + key_ + ": answered before the whole body");
  }

  std::string key_;
  std::uint64_t size_, taken_ = 0, sent_ = 0;
  char last_ = 0;
  http::Easy easy_;
  Headers headers_;
  std::unique_ptr<Transfer> transfer_;
  std::string response_;
  std::string_view pending_;
  bool paused_ = false;
};

// Bytes pushed in go to S3 in one of three ways. Of a known size beyond one part (and within
// S3's 5 GiB), one streamed PUT (StreamedPut) — as fast as a plain PUT, nothing buffered: the
// gateway's uploads, whose client sends again what fails. An object that ends within one part:
// one PUT from memory at commit. A longer one of unknown size (a multipart form's file), or any
// under Parts::one_at_a_time: a multipart upload, each part from memory and tried again on its
// own; in the background while the next fills (at most one part in flight and one filling, 2 ×
// storage.s3_part_size of memory), or one at a time (one part of memory).
class S3Writer final : public ObjectWriter {
 public:
  enum class Parts { overlapped, one_at_a_time };
  S3Writer(const S3Storage& s3, std::string key, size_t part_size,
           std::optional<std::uint64_t> size, std::stop_token stop, Parts parts = Parts::overlapped)
      : s3_(s3),
        key_(std::move(key)),
        part_size_(part_size),
        stop_(std::move(stop)),
        overlapped_(parts == Parts::overlapped) {
    if (overlapped_ && size && *size > part_size && *size <= kMaxSinglePut)
      stream_ = std::make_unique<StreamedPut>(s3, key_, *size, stop_);
  }

  ~S3Writer() override {
    if (committed_) return;
    try {
      if (inflight_.valid()) inflight_.wait();
      if (!id_query_.empty()) s3_.request("DELETE", key_, id_query_, {}, nullptr, {});
    } catch (...) {  // best effort: a lifecycle rule clears what an abort could not (README)
    }
  }

  void write(std::span<const char> data) override {
    if (stop_.stop_requested()) throw Aborted();
    std::string_view in(data.data(), data.size());
    if (stream_) return stream_->write(in);
    while (!in.empty()) {
      // A full part goes once a byte beyond it arrived: an object of exactly one part stays
      // one PUT, and the last part of a multipart upload is never empty.
      if (part_.size() == part_size_) send_part();
      const size_t take = std::min(in.size(), part_size_ - part_.size());
      // Grown geometrically (a small object stays small; a large one reaches a part in a few
      // steps): reserving exactly what each write needs would copy the part over and over.
      if (part_.size() + take > part_.capacity())
        part_.reserve(std::min(part_size_, std::max(part_.size() + take, 2 * part_.capacity())));
      part_.append(in.substr(0, take));
      in.remove_prefix(take);
    }
  }

  void commit() override {
    if (stream_) {
      stream_->finish();
      committed_ = true;
      return;
    }
    if (id_query_.empty()) {
      s3_.request("PUT", key_, {}, part_, nullptr, stop_);
      committed_ = true;
      return;
    }
    send_part();
    collect();
    std::string complete = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i)
      complete += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags_[i] +
                  "</ETag></Part>";
    complete += "</CompleteMultipartUpload>";
    std::string answer = s3_.request("POST", key_, id_query_, complete, nullptr, stop_);
    // CompleteMultipartUpload can fail with 200 and an <Error> document.
    if (answer.find("<Error>") != std::string::npos)
      fail_http("POST " + key_ + " complete", 200, answer);
    committed_ = true;
  }

 private:
  void send_part() {
    if (id_query_.empty()) {
      std::string upload_id =
          xml_tag(s3_.request("POST", key_, "uploads=", {}, nullptr, stop_), "UploadId");
      if (upload_id.empty())
        throw StorageError(ErrorKind::other,
                           "POST " + key_ + "?uploads: no UploadId in the answer");
      id_query_ = "uploadId=" + uri_encode(upload_id, false);
    }
    collect();
    // Query parameters in sorted order: libcurl 7.88 signs them as written.
    std::string query = "partNumber=" + std::to_string(etags_.size() + 1) + "&" + id_query_;
    if (!overlapped_) {
      etags_.push_back(put_part(query, part_));
      part_.clear();
      return;
    }
    sending_.swap(part_);
    part_.clear();
    inflight_ = std::async(std::launch::async, [this, query] { return put_part(query, sending_); });
  }
  // One part, tried again by request() when S3 is unavailable; its ETag.
  std::string put_part(const std::string& query, std::string_view bytes) const {
    std::string etag;
    s3_.request("PUT", key_, query, bytes, &etag, stop_);
    if (etag.empty())
      throw StorageError(ErrorKind::other, "PUT " + key_ + " part: no ETag in the answer");
    return etag;
  }
  // Waits for the part in flight; its failure is this writer's.
  void collect() {
    if (inflight_.valid()) etags_.push_back(inflight_.get());
  }

  const S3Storage& s3_;
  std::string key_;
  size_t part_size_;
  std::stop_token stop_;
  std::string part_, sending_;
  std::string id_query_;  // "uploadId=..." once the multipart upload exists
  std::vector<std::string> etags_;
  std::future<std::string> inflight_;
  std::unique_ptr<StreamedPut> stream_;
  bool overlapped_;
  bool committed_ = false;
};

std::unique_ptr<ObjectWriter> S3Storage::create(const std::string& key, std::stop_token stop,
                                                std::optional<std::uint64_t> size) {
  return std::make_unique<S3Writer>(*this, key, static_cast<size_t>(config_.s3_part_size), size,
                                    std::move(stop));
}

// S3 takes up to 10,000 parts in one upload.
constexpr std::uint64_t kMaxParts = 10'000;

void S3Storage::put(const std::string& key, ByteSource& body, std::stop_token stop) {
  // Parts grow past storage.s3_part_size only for an object that would need more than S3 allows
  // (over 78 GiB with the default 8 MiB).
  auto part_size = static_cast<std::uint64_t>(config_.s3_part_size);
  if (auto size = body.size()) part_size = std::max(part_size, (*size + kMaxParts - 1) / kMaxParts);
  S3Writer writer(*this, key, static_cast<size_t>(part_size), body.size(), std::move(stop),
                  S3Writer::Parts::one_at_a_time);
  copy(body, writer);
  writer.commit();
}

void S3Storage::remove(const std::string& key) {
  auto easy = http::make_easy();
  Headers headers;
  configure(easy.get(), "DELETE", object_url(key), &headers);
  std::string response;
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &append_to_string);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &response);
  Transfer t(easy.get());
  CURLcode rc = t.run();
  if (rc != CURLE_OK) fail_transfer("DELETE " + key, rc);
  long status = http::response_code(easy.get());
  if (status >= 300 && status != 404) fail_http("DELETE " + key, status, response);
}

namespace {

std::string xml_escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Content-MD5 (base64 of the body's MD5): S3 refuses a DeleteObjects request without it.
std::string content_md5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(body.data(), body.size(), digest, &n, EVP_md5(), nullptr) != 1)
    throw StorageError(ErrorKind::other, "MD5 unavailable (OpenSSL)");
  unsigned char text[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int len = EVP_EncodeBlock(text, digest, static_cast<int>(n));
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(len));
}

}  // namespace

void S3Storage::remove_many(const std::vector<std::string>& keys) {
  // DeleteObjects, quiet: the answer lists only the keys S3 could not delete (a missing key is
  // deleted as far as S3 is concerned).
  const std::string url = base_ + (config_.s3_path_style ? "" : "/") + "?delete=";
  for (size_t from = 0; from < keys.size(); from += kDeleteBatch) {
    const size_t to = std::min(keys.size(), from + kDeleteBatch);
    std::string body = "<Delete><Quiet>true</Quiet>";
    for (size_t i = from; i < to; ++i) {
      body += "<Object><Key>";
      body += xml_escaped(prefix_.empty() ? keys[i] : prefix_ + "/" + keys[i]);
      body += "</Key></Object>";
    }
    body += "</Delete>";
    Headers headers;
    headers.add("Content-MD5: " + content_md5(body));
    const std::string what = "DeleteObjects (" + std::to_string(to - from) + " keys)";
    std::string answer;
    try {
      answer = send("POST", url, what, body, &headers, nullptr, {});
    } catch (const StorageError& e) {
      // A store without DeleteObjects (some S3-compatible ones): one DELETE a key.
      if (e.http_status() != 501 && e.code() != "NotImplemented") throw;
      for (size_t i = from; i < keys.size(); ++i) remove(keys[i]);
      return;
    }
    if (answer.find("<Error>") == std::string::npos) continue;
    const auto [code, message] = parse_s3_error(answer);
    const std::string key = xml_tag(answer, "Key");
    const long as_status = code == "AccessDenied"                          ? 403
                           : code == "InternalError" || code == "SlowDown" ? 503
                                                                           : 400;
    throw StorageError(kind_for(as_status, code),
                       what + ": " + key + " not deleted: " + code + " " + message, code, 200);
  }
}

void S3Storage::check() {
  auto easy = http::make_easy();
  Headers headers;
  std::string url = base_ + (config_.s3_path_style ? "" : "/");
  configure(easy.get(), "HEAD", url, &headers);
  // A readiness probe: a store that has not answered within kCheckWait is unavailable. With
  // s3_timeout alone (30 s), a store gone silent held each /readyz that long — past the probe's
  // own timeout (1 s by Kubernetes's default) — and the gateway's two probe threads with them,
  // so that its scrapes queued behind.
  const long wait_ms = std::min<long>(kCheckWait.count(), config_.s3_timeout.count());
  curl_easy_setopt(easy.get(), CURLOPT_CONNECTTIMEOUT_MS, wait_ms);
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, wait_ms);
  Transfer t(easy.get());
  CURLcode rc = t.run();
  if (rc != CURLE_OK) fail_transfer("HEAD bucket", rc);
  long status = http::response_code(easy.get());
  if (status >= 300) fail_http("HEAD bucket", status, "");
}

}  // namespace relay::storage
