#include "http_client.hpp"

#include <curl/curl.h>

#include <atomic>
#include <boost/json.hpp>
#include <cctype>
#include <memory>
#include <mutex>
#include <thread>

namespace relay::testing {

HttpResult http(const std::string& method, const std::string& url,
                const std::vector<std::string>& headers, const std::string& body,
                const std::vector<FormPart>& form, long timeout_ms) {
  HttpResult out;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
  CURL* c = easy.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  // An answer to HEAD has no body whatever its Content-Length says: curl must not wait for one.
  if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  list = curl_slist_append(list, "Expect:");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_mime* mime = nullptr;
  if (!form.empty()) {
    mime = curl_mime_init(c);
    for (const auto& p : form) {
      auto* part = curl_mime_addpart(mime);
      curl_mime_name(part, p.name.c_str());
      curl_mime_data(part, p.value.data(), p.value.size());
      if (!p.filename.empty()) curl_mime_filename(part, p.filename.c_str());
      if (!p.content_type.empty()) curl_mime_type(part, p.content_type.c_str());
    }
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
  } else if (!body.empty() || method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_write_callback on_body = [](char* d, size_t s, size_t n, void* u) {
    static_cast<std::string*>(u)->append(d, s * n);
    return s * n;
  };
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
  curl_write_callback on_header = [](char* d, size_t s, size_t n, void* u) {
    std::string line(d, s * n);
    auto colon = line.find(':');
    if (colon != std::string::npos) {
      std::string k = line.substr(0, colon), v = line.substr(colon + 1);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      while (!v.empty() && (v.front() == ' ')) v.erase(0, 1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n')) v.pop_back();
      (*static_cast<std::map<std::string, std::string>*>(u))[k] = v;
    }
    return s * n;
  };
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &out.headers);
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out.status);
  curl_slist_free_all(list);
  if (mime) curl_mime_free(mime);
  return out;
}

std::string field(const HttpResult& r, const char* key) {
  boost::system::error_code ec;
  auto v = boost::json::parse(r.body, ec);
  if (ec || !v.is_object()) return "";
  auto* f = v.as_object().if_contains(key);
  return f && f->is_string() ? std::string(f->as_string()) : "";
}

struct EventStream::Impl {
  mutable std::mutex mu;
  std::string received;
  std::atomic<bool> ended{false}, stop{false};
  std::atomic<long> status{0};
  std::thread thread;
};

EventStream::EventStream(const std::string& url, std::vector<std::string> headers, long timeout_ms)
    : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([impl = impl_.get(), url, headers, timeout_ms] {
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
    CURL* c = easy.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_slist* list = nullptr;
    for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    curl_write_callback on_body = [](char* d, size_t s, size_t n, void* u) -> size_t {
      auto* impl = static_cast<Impl*>(u);
      if (impl->stop) return 0;  // ends the transfer
      std::lock_guard lock(impl->mu);
      impl->received.append(d, s * n);
      return s * n;
    };
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, impl);
    // Lets the destructor end a stream that sends nothing.
    curl_xferinfo_callback progress = [](void* u, curl_off_t, curl_off_t, curl_off_t,
                                         curl_off_t) -> int {
      return static_cast<Impl*>(u)->stop ? 1 : 0;
    };
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, impl);
    curl_write_callback on_header = [](char* d, size_t s, size_t n, void* u) -> size_t {
      auto* impl = static_cast<Impl*>(u);
      std::string line(d, s * n);
      if (line.rfind("HTTP/", 0) == 0 && line.size() > 12)
        impl->status = std::strtol(line.c_str() + 9, nullptr, 10);
      return s * n;
    };
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, impl);
    curl_easy_perform(c);
    curl_slist_free_all(list);
    impl->ended = true;
  });
}

EventStream::~EventStream() {
  impl_->stop = true;
  impl_->thread.join();
}

std::vector<SseEvent> EventStream::events() const {
  std::string text = raw();
  std::vector<SseEvent> out;
  std::size_t at = 0;
  for (;;) {
    const auto end = text.find("\n\n", at);
    if (end == std::string::npos) break;
    SseEvent e;
    bool any = false;
    std::size_t line_at = at;
    while (line_at < end) {
      auto nl = text.find('\n', line_at);
      if (nl == std::string::npos || nl > end) nl = end;
      const std::string line = text.substr(line_at, nl - line_at);
      line_at = nl + 1;
      if (line.empty() || line[0] == ':') continue;
      const auto colon = line.find(':');
      const std::string name = line.substr(0, colon);
      std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (name == "id") e.id = value, any = true;
      if (name == "event") e.name = value, any = true;
      if (name == "data") e.data += value, any = true;
    }
    if (any) out.push_back(std::move(e));
    at = end + 2;
  }
  return out;
}

std::string EventStream::raw() const {
  std::lock_guard lock(impl_->mu);
  return impl_->received;
}

bool EventStream::ended() const {
  return impl_->ended;
}

long EventStream::status() const {
  return impl_->status;
}

}  // namespace relay::testing
