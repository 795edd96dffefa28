#include "http/pull_source.hpp"

#include <cstring>

namespace relay::http {

PullSource::PullSource(Easy easy, std::unique_ptr<Headers> headers, std::stop_token stop,
                       OnFailure on_failure)
    : easy_(std::move(easy)), headers_(std::move(headers)), on_failure_(std::move(on_failure)) {
  curl_easy_setopt(easy_.get(), CURLOPT_WRITEFUNCTION, &PullSource::on_data);
  curl_easy_setopt(easy_.get(), CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy_.get(), CURLOPT_HEADERFUNCTION, &collect_headers);
  curl_easy_setopt(easy_.get(), CURLOPT_HEADERDATA, &response_headers_);
  transfer_ = std::make_unique<Transfer>(easy_.get(), std::move(stop));
  // (The first bytes pause the transfer here: there is no room yet. They are handed over by the
  // first read.)
  finish_if_done(transfer_->run_until([this] { return paused_ || status_ != 0; }));
}

size_t PullSource::read(std::span<char> out) {
  if (out.empty()) return 0;
  if (pos_ < buf_.size()) {  // left by the last callback
    const size_t n = std::min(out.size(), buf_.size() - pos_);
    std::copy_n(buf_.data() + pos_, n, out.data());
    pos_ += n;
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    return n;
  }
  out_ = out;
  got_ = 0;
  while (got_ == 0 && !done_) {
    if (paused_) {
      paused_ = false;
      curl_easy_pause(easy_.get(), CURLPAUSE_CONT);  // (may deliver what was held, at once)
    }
    if (got_ == 0 && !done_)
      finish_if_done(transfer_->run_until([this] { return got_ > 0 || paused_; }));
  }
  out_ = {};
  return got_;
}

std::optional<std::uint64_t> PullSource::size() const {
  curl_off_t len = -1;
  curl_easy_getinfo(easy_.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
  if (len < 0) return std::nullopt;
  return static_cast<std::uint64_t>(len);
}

long PullSource::status() const {
  return response_code(easy_.get());
}

size_t PullSource::on_data(char* data, size_t size, size_t n, void* user) {
  auto* self = static_cast<PullSource*>(user);
  size_t bytes = size * n;
  if (self->status_ == 0) self->status_ = response_code(self->easy_.get());
  if (self->status_ >= 300) {  // an error document (or a redirect's): kept for the message
    if (self->error_body_.size() < 65536) self->error_body_.append(data, bytes);
    return bytes;
  }
  const size_t room = self->out_.size() - self->got_;
  if (room == 0) {  // no room (yet): libcurl keeps these bytes until the transfer resumes
    self->paused_ = true;
    return CURL_WRITEFUNC_PAUSE;
  }
  const size_t take = std::min(room, bytes);
  std::memcpy(self->out_.data() + self->got_, data, take);
  self->got_ += take;
  if (take < bytes) self->buf_.assign(data + take, bytes - take);  // (empty: read() drained it)
  return bytes;
}

void PullSource::finish_if_done(bool done) {
  if (!done) return;
  done_ = true;
  const long st = response_code(easy_.get());
  if (transfer_->code() != CURLE_OK || st >= 300) {
    on_failure_(transfer_->code(), st, error_body_);
    buf_.clear();  // a redirect's or error's body is not the content
    pos_ = 0;
  }
}

}  // namespace relay::http
