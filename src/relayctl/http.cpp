#include "relayctl/http.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "http/curl.hpp"

namespace relay::ctl {

namespace {

struct MimeDeleter {
  void operator()(curl_mime* m) const noexcept { curl_mime_free(m); }
};
// The body's destination, chosen at its first byte, when the status is known (SaveTo).
struct Sink {
  CURL* easy;
  SaveTo save;
  std::string* body;
  bool to_file = false, chosen = false;

  static size_t write(char* data, size_t size, size_t n, void* user) {
    auto* k = static_cast<Sink*>(user);
    if (!k->chosen) {
      k->chosen = true;
      const long status = http::response_code(k->easy);
      k->to_file = k->save.file && status >= 200 && status < 300;
      if (k->to_file && k->save.resuming && status != 206 &&
          (std::fflush(k->save.file) != 0 || ::ftruncate(::fileno(k->save.file), 0) != 0 ||
           std::fseek(k->save.file, 0, SEEK_SET) != 0))
        return 0;  // fails the transfer (CURLE_WRITE_ERROR)
    }
    if (!k->to_file) {
      k->body->append(data, size * n);
      return size * n;
    }
    return std::fwrite(data, 1, size * n, k->save.file);
  }
};

}  // namespace

HttpAnswer http_call(const std::string& method, const std::string& url,
                     const std::vector<std::string>& headers, const Upload* upload, SaveTo save_to,
                     long timeout_ms) {
  HttpAnswer a;
  auto easy = http::make_easy();
  CURL* c = easy.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  http::Headers list;
  for (const auto& h : headers) list.add(h);
  list.add("Expect:");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list.get());
  std::unique_ptr<curl_mime, MimeDeleter> mime;
  if (upload) {
    mime.reset(curl_mime_init(c));
    if (!upload->file.empty()) {
      auto* part = curl_mime_addpart(mime.get());
      curl_mime_name(part, "file");
      curl_mime_filedata(part, upload->file.c_str());  // streamed, not read into memory
    }
    for (const auto& [k, v] : upload->fields) {
      auto* f = curl_mime_addpart(mime.get());
      curl_mime_name(f, k.c_str());
      curl_mime_data(f, v.data(), v.size());
    }
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime.get());
    if (upload->progress) {
      curl_xferinfo_callback bar = [](void*, curl_off_t, curl_off_t, curl_off_t total,
                                      curl_off_t now) -> int {
        if (total > 0) {
          int pct = static_cast<int>(100 * now / total), width = 40, filled = pct * width / 100;
          std::fprintf(stderr, "\r[%s%s] %3d%% %lld/%lld MiB", std::string(filled, '#').c_str(),
                       std::string(width - filled, ' ').c_str(), pct,
                       static_cast<long long>(now >> 20), static_cast<long long>(total >> 20));
        }
        return 0;
      };
      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, bar);
      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
  }
  // The whole answer, or a successful one's body in save_to's file (a result printed to stdout
  // may be large: no cap here).
  Sink sink{c, save_to, &a.body};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Sink::write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &http::collect_headers);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a.headers);
  CURLcode rc = http::Transfer(c).run();
  if (upload && upload->progress) std::fputc('\n', stderr);
  if (rc == CURLE_OK)
    a.status = http::response_code(c);
  else
    a.error = http::describe(rc);
  return a;
}

HttpAnswer http_stream(const std::string& url, const std::vector<std::string>& headers,
                       const std::function<bool(std::string_view)>& on_data, long timeout_ms) {
  HttpAnswer a;
  auto easy = http::make_easy();
  CURL* c = easy.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  http::Headers list;
  for (const auto& h : headers) list.add(h);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list.get());
  struct Sink {
    const std::function<bool(std::string_view)>* on_data;
    CURL* easy;
    std::string* error_body;
  } sink{&on_data, c, &a.body};
  curl_write_callback feed = [](char* d, size_t s, size_t n, void* u) -> size_t {
    auto* sink = static_cast<Sink*>(u);
    if (http::response_code(sink->easy) >= 300) {  // an error document, for the message
      sink->error_body->append(d, s * n);
      return s * n;
    }
    return (*sink->on_data)(std::string_view(d, s * n)) ? s * n : 0;
  };
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, feed);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  CURLcode rc = http::Transfer(c).run();
  a.status = http::response_code(c);
  if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR) a.error = http::describe(rc);
  return a;
}

}  // namespace relay::ctl
