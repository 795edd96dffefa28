#pragma once
// The relay's client for the local inference server: the health probe and the multipart POST
// that streams the job's input (SPEC §5).

#include <boost/json/object.hpp>
#include <chrono>
#include <stdexcept>
#include <stop_token>
#include <string>

#include "relay/spool.hpp"
#include "storage/byte_stream.hpp"

namespace relay::sidecar {

// The request could not be completed (as opposed to a non-200 answer, which is a response).
class InferenceError : public std::runtime_error {
 public:
  InferenceError(std::string code, const std::string& what) : std::runtime_error(what), code_(std::move(code)) {}
  const std::string& code() const { return code_; }  // inference_unreachable, inference_timeout

 private:
  std::string code_;
};

struct InferenceRequest {
  std::string url;  // base + route
  std::string filename;
  std::string content_type;
  ByteSource* body = nullptr;
  boost::json::object params;       // each key becomes a form field beside "file"
  std::chrono::milliseconds timeout{0};
};

struct InferenceResponse {
  long status = 0;
  Spool body;
};

// POSTs multipart/form-data: a "file" part streamed from request.body (with its filename and
// content type) and one field per params key (strings as they are, other values as JSON).
// Throws InferenceError, relay::Aborted when stop is requested (the connection is closed at
// once, so the server sees it drop), or whatever request.body's read throws.
InferenceResponse post_inference(const InferenceRequest& request, std::stop_token stop);

// GET url; returns the HTTP status, or 0 when nothing answered.
long probe_health(const std::string& url, std::stop_token stop);

}  // namespace relay::sidecar
