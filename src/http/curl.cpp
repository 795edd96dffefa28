#include "http/curl.hpp"

#include <cctype>
#include <cstdio>
#include <mutex>
#include <vector>

#include "common/errors.hpp"

namespace relay::http {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Easy make_easy() {
  global_init();
  Easy e(curl_easy_init());
  if (!e) throw std::runtime_error("curl_easy_init failed");
  curl_easy_setopt(e.get(), CURLOPT_NOSIGNAL, 1L);
  return e;
}

void Headers::add(const std::string& line) {
  curl_slist* next = curl_slist_append(list_, line.c_str());
  if (!next) throw std::bad_alloc();
  list_ = next;
}

namespace {

// This thread's idle multi handles. libcurl keeps its connection cache (and the DNS cache) in the
// multi handle: a transfer driven through a fresh one each time opened a new connection per
// request — with S3 over https, a TCP and TLS handshake for every input read and result stored.
// A transfer takes the handle the last one on this thread left, and so its connection to the
// same host; transfers under way at once on a thread (a gateway's uploads) each have their own.
struct IdleMultis {
  static constexpr std::size_t kKept = 16;  // (a gateway thread may serve many uploads at once)
  std::vector<CURLM*> handles;
  ~IdleMultis() {
    for (CURLM* m : handles) curl_multi_cleanup(m);
  }
};
thread_local IdleMultis idle_multis;

CURLM* take_multi() {
  auto& idle = idle_multis.handles;
  if (idle.empty()) return curl_multi_init();
  CURLM* m = idle.back();
  idle.pop_back();
  return m;
}

void keep_multi(CURLM* m) {
  auto& idle = idle_multis.handles;
  if (idle.size() < IdleMultis::kKept)
    idle.push_back(m);
  else
    curl_multi_cleanup(m);
}

}  // namespace

Transfer::Transfer(CURL* easy, std::stop_token stop)
    : easy_(easy),
      multi_(take_multi()),
      stop_(stop),
      wake_(stop, std::function<void()>([this] { wake(); })) {
  if (!multi_) throw std::runtime_error("curl_multi_init failed");
  curl_multi_add_handle(multi_, easy_);
}

// Runs in the thread that requested the stop; curl_multi_wakeup is thread-safe.
void Transfer::wake() {
  if (multi_) curl_multi_wakeup(multi_);
}

Transfer::~Transfer() {
  curl_multi_remove_handle(multi_, easy_);
  CURLM* m = multi_;
  multi_ = nullptr;  // (a stop requested from now on wakes nothing)
  keep_multi(m);
}

bool Transfer::perform_once() {
  if (done_) return true;
  if (stop_.stop_requested()) throw Aborted();
  int running = 0;
  CURLMcode mc = curl_multi_perform(multi_, &running);
  if (failure_) std::rethrow_exception(failure_);
  if (mc != CURLM_OK)
    throw std::runtime_error(std::string("curl_multi_perform: ") + curl_multi_strerror(mc));
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy_) {
      done_ = true;
      result_ = msg->data.result;
    }
  }
  if (failure_) std::rethrow_exception(failure_);
  return done_;
}

void Transfer::poll_once(int timeout_ms) {
  CURLMcode mc = curl_multi_poll(multi_, nullptr, 0, timeout_ms, nullptr);
  if (mc != CURLM_OK)
    throw std::runtime_error(std::string("curl_multi_poll: ") + curl_multi_strerror(mc));
  if (stop_.stop_requested()) throw Aborted();
}

CURLcode Transfer::run() {
  run_until([] { return false; });
  return result_;
}

std::optional<std::pair<std::string, std::string>> header_line(std::string_view line) {
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string name(line.substr(0, colon));
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() &&
         (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t'))
    v.remove_suffix(1);
  return std::pair{std::move(name), std::string(v)};
}

std::optional<ContentRange> content_range(const HeaderMap& headers) {
  const auto it = headers.find("content-range");
  unsigned long long first = 0, last = 0;
  if (it == headers.end() ||
      std::sscanf(it->second.c_str(), "bytes %llu-%llu/", &first, &last) != 2 || last < first)
    return std::nullopt;
  return ContentRange{first, last};
}

size_t collect_headers(char* data, size_t size, size_t n, void* user) {
  if (auto h = header_line(std::string_view(data, size * n)))
    (*static_cast<HeaderMap*>(user))[h->first] = std::move(h->second);
  return size * n;
}

size_t append_to_string(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<std::string*>(user);
  if (s->size() < (1 << 20)) s->append(data, size * n);
  return size * n;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string xml_tag(const std::string& xml, const std::string& tag) {
  auto open = xml.find("<" + tag + ">");
  if (open == std::string::npos) return {};
  open += tag.size() + 2;
  auto close = xml.find("</" + tag + ">", open);
  return close == std::string::npos ? std::string{} : xml.substr(open, close - open);
}

long response_code(CURL* easy) {
  long code = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

std::string describe(CURLcode code) {
  return curl_easy_strerror(code);
}

}  // namespace relay::http
