#include "relayctl/http.hpp"

#include <curl/curl.h>

#include <cctype>
#include <cstdio>
#include <memory>

namespace relay::ctl {

HttpAnswer http_call(const std::string& method, const std::string& url,
                     const std::vector<std::string>& headers, const Upload* upload,
                     const std::string& save_to, long timeout_ms) {
  HttpAnswer a;
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
  CURL* c = easy.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  list = curl_slist_append(list, "Expect:");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_mime* mime = nullptr;
  if (upload) {
    mime = curl_mime_init(c);
    auto* part = curl_mime_addpart(mime);
    curl_mime_name(part, "file");
    curl_mime_filedata(part, upload->file.c_str());  // streamed, not read into memory
    for (const auto& [k, v] : upload->fields) {
      auto* f = curl_mime_addpart(mime);
      curl_mime_name(f, k.c_str());
      curl_mime_data(f, v.data(), v.size());
    }
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
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
  FILE* out = nullptr;
  if (!save_to.empty()) {
    out = std::fopen(save_to.c_str(), "wb");
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  } else {
    curl_write_callback to_string = [](char* d, size_t s, size_t n, void* u) {
      static_cast<std::string*>(u)->append(d, s * n);
      return s * n;
    };
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_string);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a.body);
  }
  curl_write_callback on_header = [](char* d, size_t s, size_t n, void* u) {
    std::string line(d, s * n);
    auto colon = line.find(':');
    if (colon != std::string::npos) {
      std::string k = line.substr(0, colon), v = line.substr(colon + 1);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n')) v.pop_back();
      (*static_cast<std::map<std::string, std::string>*>(u))[k] = v;
    }
    return s * n;
  };
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a.headers);
  CURLcode rc = curl_easy_perform(c);
  if (upload && upload->progress) std::fputc('\n', stderr);
  if (rc == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  else
    a.error = curl_easy_strerror(rc);
  if (out) std::fclose(out);
  curl_slist_free_all(list);
  if (mime) curl_mime_free(mime);
  return a;
}

}  // namespace relay::ctl
