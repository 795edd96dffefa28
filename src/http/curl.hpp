#pragma once
// RAII over libcurl, and the one transfer loop every client in the project uses: a multi handle
// polled with curl_multi_poll, woken by curl_multi_wakeup when a stop_token fires, so that a
// cancelled transfer is dropped at once instead of at the next progress callback.

#include <curl/curl.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace relay::http {

// curl_global_init, once per process; call before starting threads.
void global_init();

struct EasyDeleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;
Easy make_easy();

class Headers {
 public:
  Headers() = default;
  Headers(const Headers&) = delete;
  Headers& operator=(const Headers&) = delete;
  Headers(Headers&& o) noexcept : list_(std::exchange(o.list_, nullptr)) {}
  ~Headers() { curl_slist_free_all(list_); }
  void add(const std::string& line);
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// A transfer failed below HTTP (connection refused, timeout, reset...).
class TransferError : public std::runtime_error {
 public:
  TransferError(CURLcode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  CURLcode code() const { return code_; }

 private:
  CURLcode code_;
};

// One easy handle driven through its own multi handle. The caller configures the handle; run()
// performs the transfer and returns its result code; it throws relay::Aborted once stop is
// requested (the connection is closed at once). Callbacks that fail store their exception with
// fail() and return their abort code; run() rethrows it.
class Transfer {
 public:
  explicit Transfer(CURL* easy, std::stop_token stop = {});
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  CURLcode run();
  // Drives the transfer until `ready()` or completion; used by pull streams. Returns true when
  // the transfer has completed (result in code()).
  template <typename Ready>
  bool run_until(Ready ready);
  CURLcode code() const { return result_; }
  void fail(std::exception_ptr e) { failure_ = std::move(e); }

 private:
  bool perform_once();  // true when the transfer is done
  void wake();
  void poll_once(int timeout_ms);

  CURL* easy_;
  CURLM* multi_;
  std::stop_token stop_;
  std::stop_callback<std::function<void()>> wake_;
  bool done_ = false;
  CURLcode result_ = CURLE_OK;
  std::exception_ptr failure_;
};

template <typename Ready>
bool Transfer::run_until(Ready ready) {
  for (;;) {
    if (perform_once()) return true;
    if (ready()) return false;
    poll_once(1000);
  }
}

long response_code(CURL* easy);

// The headers of an answer: lowercase names (a repeated header keeps its last value).
using HeaderMap = std::map<std::string, std::string>;
// One header line ("Name: value\r\n") as {lowercase name, value without surrounding blanks};
// nullopt for the status line and the blank line that ends the headers.
std::optional<std::pair<std::string, std::string>> header_line(std::string_view line);
// A CURLOPT_HEADERFUNCTION filling the HeaderMap in its user pointer: the one place response
// headers are read (S3's ETag, a webhook receiver's Retry-After, relayctl's answers).
size_t collect_headers(char* data, size_t size, size_t n, void* user);

// A 206's Content-Range, "bytes first-last/total": which bytes came (nullopt when absent or
// otherwise). S3 reads of a range and resumed https inputs check it against what they asked.
struct ContentRange {
  std::uint64_t first = 0, last = 0;
};
std::optional<ContentRange> content_range(const HeaderMap& headers);

// A CURLOPT_WRITEFUNCTION that appends to the std::string in its user pointer, up to 1 MiB:
// for error documents and small XML/JSON answers, never for payloads.
size_t append_to_string(char* data, size_t size, size_t n, void* user);

// AWS's URI encoding (SigV4): everything but unreserved characters; '/' kept when keep_slash.
// Also right for application/x-www-form-urlencoded values.
std::string uri_encode(std::string_view s, bool keep_slash = false);

// The text of the first <tag>...</tag> in xml, or "" (S3 and STS answers: flat, known tags).
std::string xml_tag(const std::string& xml, const std::string& tag);

// Error text for a CURLcode with the handle's error buffer when it has one.
std::string describe(CURLcode code);

}  // namespace relay::http
