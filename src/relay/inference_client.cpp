#include "relay/inference_client.hpp"

#include <boost/json/serialize.hpp>

#include "common/errors.hpp"
#include "http/curl.hpp"

namespace relay::sidecar {
namespace {

struct MimeDeleter {
  void operator()(curl_mime* m) const noexcept { curl_mime_free(m); }
};

struct Context {
  ByteSource* body;
  http::Transfer* transfer = nullptr;
  Spool* out;
};

size_t read_body(char* buf, size_t size, size_t n, void* user) {
  auto* ctx = static_cast<Context*>(user);
  try {
    return ctx->body->read(std::span<char>(buf, size * n));
  } catch (...) {
    ctx->transfer->fail(std::current_exception());
    return CURL_READFUNC_ABORT;
  }
}

size_t write_body(char* data, size_t size, size_t n, void* user) {
  auto* ctx = static_cast<Context*>(user);
  try {
    ctx->out->write(data, size * n);
    return size * n;
  } catch (...) {
    ctx->transfer->fail(std::current_exception());
    return 0;
  }
}

}  // namespace

InferenceResponse post_inference(const InferenceRequest& req, std::stop_token stop) {
  InferenceResponse resp;
  auto easy = http::make_easy();
  std::unique_ptr<curl_mime, MimeDeleter> mime(curl_mime_init(easy.get()));
  Context ctx{req.body, nullptr, &resp.body};

  curl_mimepart* file = curl_mime_addpart(mime.get());
  curl_mime_name(file, "file");
  curl_mime_filename(file, req.filename.empty() ? "input" : req.filename.c_str());
  curl_mime_type(file, req.content_type.empty() ? "application/octet-stream" : req.content_type.c_str());
  auto size = req.body->size();
  // A known size gives a Content-Length; an unknown one is sent chunked.
  curl_mime_data_cb(file, size ? static_cast<curl_off_t>(*size) : -1, &read_body, nullptr, nullptr, &ctx);
  for (const auto& kv : req.params) {
    curl_mimepart* part = curl_mime_addpart(mime.get());
    std::string name(kv.key());
    std::string value = kv.value().is_string() ? std::string(kv.value().get_string()) : boost::json::serialize(kv.value());
    curl_mime_name(part, name.c_str());
    curl_mime_data(part, value.data(), value.size());
  }

  http::Headers headers;
  headers.add("Expect:");  // no 100-continue round trip on loopback
  curl_easy_setopt(easy.get(), CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_MIMEPOST, mime.get());
  curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &write_body);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &ctx);
  curl_easy_setopt(easy.get(), CURLOPT_CONNECTTIMEOUT_MS, 10'000L);
  if (req.timeout.count() > 0) curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));

  http::Transfer transfer(easy.get(), stop);
  ctx.transfer = &transfer;
  CURLcode rc = transfer.run();
  if (rc == CURLE_OPERATION_TIMEDOUT)
    throw InferenceError("inference_timeout", "inference request timed out after " + std::to_string(req.timeout.count()) + "ms");
  if (rc != CURLE_OK) throw InferenceError("inference_unreachable", "inference request failed: " + http::describe(rc));
  resp.status = http::response_code(easy.get());
  return resp;
}

long probe_health(const std::string& url, std::stop_token stop) {
  auto easy = http::make_easy();
  curl_easy_setopt(easy.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy.get(), CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, +[](char*, size_t s, size_t n, void*) { return s * n; });
  http::Transfer transfer(easy.get(), stop);
  if (transfer.run() != CURLE_OK) return 0;
  return http::response_code(easy.get());
}

}  // namespace relay::sidecar
