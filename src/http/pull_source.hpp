#pragma once
// A download as a ByteSource: the transfer runs only inside read(), its write callback copying
// straight into the caller's buffer and pausing the transfer once that is full (libcurl keeps
// what it had not handed over). What a callback brings beyond the caller's room waits here for
// the next read: at most one callback's worth (16 KiB), whatever the size of the body and however
// slowly it is read — a gateway serving many stalled downloads from S3 held up to 1 MiB each.
// S3 GETs and inputs by URL are read this way.

#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include "common/byte_stream.hpp"
#include "http/curl.hpp"

namespace relay::http {

class PullSource final : public ByteSource {
 public:
  // How the transfer ended, when it did not end well: a CURLcode other than CURLE_OK, or an HTTP
  // status of 300 or more with the start of its body (an error document). It throws what the
  // caller wants thrown, or returns to let the caller look at status() (a redirect).
  using OnFailure = std::function<void(CURLcode code, long status, const std::string& body)>;

  // The handle is configured but for its write callback. Runs until the status line and the
  // first bytes are in (or the end), so that a missing object fails here, not at the first read.
  PullSource(Easy easy, std::unique_ptr<Headers> headers, std::stop_token stop,
             OnFailure on_failure);
  size_t read(std::span<char> out) override;
  std::optional<std::uint64_t> size() const override;  // the Content-Length, when given

  long status() const;  // 0 until the status line is in
  const HeaderMap& response_headers() const { return response_headers_; }

 private:
  static size_t on_data(char* data, size_t size, size_t n, void* user);
  void finish_if_done(bool done);

  Easy easy_;
  std::unique_ptr<Headers> headers_;
  OnFailure on_failure_;
  HeaderMap response_headers_;
  std::unique_ptr<Transfer> transfer_;
  std::span<char> out_;  // the caller's room, during read()
  size_t got_ = 0;       // ... filled so far
  std::string buf_;      // a callback's bytes beyond that room
  size_t pos_ = 0;
  long status_ = 0;
  bool paused_ = false;
  bool done_ = false;
  std::string error_body_;
};

}  // namespace relay::http
