// relayctl's commands for a user's jobs, through the gateway's HTTP API: submit, status, wait,
// result, cancel, jobs (the listing).

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "common/time.hpp"
#include "http/curl.hpp"
#include "relayctl/commands.hpp"
#include "relayctl/http.hpp"

namespace relay::ctl {
namespace {

int exit_for(const std::string& status) {
  if (status == "completed") return 0;
  if (status == "failed") return 3;
  if (status == "cancelled") return 4;
  return 5;  // still pending or processing
}

void print_header() {
  std::printf("%-44s %-10s %-24s %-24s %s\n", "JOB", "STATUS", "CREATED", "FINISHED", "ERROR");
}

void print_row(const boost::json::object& j) {
  std::string err;
  if (auto it = j.find("error"); it != j.end() && it->value().is_object())
    err = field(it->value().as_object(), "code") + ": " + field(it->value().as_object(), "message");
  std::printf("%-44s %-10s %-24s %-24s %s\n",
              (field(j, "service_type") + "/" + field(j, "id")).c_str(), field(j, "status").c_str(),
              field(j, "created_at").c_str(), field(j, "finished_at").c_str(), err.c_str());
}

void print_job(const boost::json::object& j) {
  print_header();
  print_row(j);
}

std::vector<std::string> auth(const Options& o) {
  std::vector<std::string> h;
  if (!o.api_key.empty()) h.push_back("Authorization: Bearer " + o.api_key);
  return h;
}

int api_error(const Options& o, const HttpAnswer& a) {
  if (a.status == 0)
    std::cerr << "relayctl: cannot reach the gateway at " << o.gateway << ": " << a.error << "\n";
  else
    std::cerr << "relayctl: HTTP " << a.status << ": " << a.body << "\n";
  return 1;
}

// An answer worth asking again after a pause: none, or one that says to try later — 503 (Redis
// restarting or failing over), a proxy's 502 or 504 (the gateway restarting behind an ingress).
bool try_again_later(const HttpAnswer& a) {
  return a.status == 0 || a.status == 502 || a.status == 503 || a.status == 504;
}

// The pause before asking again: Retry-After, else 0.5 s doubling; at most 10 s.
std::chrono::milliseconds pause_before_asking_again(int failed, const HttpAnswer& a) {
  std::chrono::milliseconds pause(500 << std::min(failed, 5));
  if (auto h = a.headers.find("retry-after"); h != a.headers.end())
    if (auto seconds = std::atoi(h->second.c_str()); seconds > 0)
      pause = std::chrono::seconds(seconds);
  return std::min<std::chrono::milliseconds>(pause, std::chrono::seconds(10));
}

// A result saved to a file: written as <file>.part and renamed once whole (an answer that is not
// the result leaves nothing, and never touches a file already at that name); a cut download
// resumes from the bytes it has (Range, If-Range on the result's ETag), up to five cuts in a row
// without progress.
int save_result(const Options& o, const std::string& url) {
  const std::string part = o.out_file + ".part";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(part.c_str(), "wb"),
                                                       &std::fclose);
  if (!file) throw std::runtime_error("cannot write " + part + ": " + std::strerror(errno));
  auto fail = [&](int code) {
    file.reset();
    std::filesystem::remove(part);
    return code;
  };
  long got = 0;
  std::string etag;
  for (int cuts = 0;;) {
    auto headers = auth(o);
    if (got > 0 && !etag.empty()) {
      headers.push_back("Range: bytes=" + std::to_string(got) + "-");
      headers.push_back("If-Range: " + etag);
    }
    auto a = http_call("GET", url + "/result", headers, nullptr, SaveTo{file.get(), got > 0});
    const long now = std::ftell(file.get());
    if (a.status == 200 || a.status == 206) {
      if (std::fflush(file.get()) != 0)
        throw std::runtime_error("cannot write " + part + ": " + std::strerror(errno));
      file.reset();
      std::filesystem::rename(part, o.out_file);
      return 0;
    }
    if (!try_again_later(a) || now < 0) return fail(api_error(o, a));
    cuts = now > got ? 1 : cuts + 1;  // in a row without progress
    if (cuts > 5) return fail(api_error(o, a));
    if (auto t = a.headers.find("etag"); t != a.headers.end()) etag = t->second;
    got = now;
    std::cerr << "relayctl: the download was cut ("
              << (a.status == 0 ? a.error : "HTTP " + std::to_string(a.status)) << ") at " << got
              << " bytes; resuming\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << std::min(cuts, 4)));
  }
}

std::optional<std::string> job_url(const Options& o, const std::string& r) {
  auto slash = r.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == r.size()) return std::nullopt;
  return o.gateway + "/jobs/" + r;
}

// After an answer worth asking again (try_again_later), up to five in a row: says so on stderr,
// pauses (not past `until`) and returns true. False: the answer stands.
bool ask_again(const HttpAnswer& a, int& failed, std::chrono::steady_clock::time_point until) {
  if (!try_again_later(a) || failed == 5) return false;
  const auto pause = std::min<std::chrono::steady_clock::duration>(
      pause_before_asking_again(failed++, a), until - std::chrono::steady_clock::now());
  std::cerr << "relayctl: "
            << (a.status == 0 ? "no answer from the gateway (" + a.error + ")"
                              : "HTTP " + std::to_string(a.status) + " from the gateway")
            << "; asking again in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(pause).count() << " ms\n";
  std::this_thread::sleep_for(pause);
  return true;
}

// A GET, asked again while the gateway does not answer or says to try later (ask_again).
HttpAnswer read(const Options& o, const std::string& url) {
  HttpAnswer a;
  for (int failed = 0;;) {
    a = http_call("GET", url, auth(o));
    if (!ask_again(a, failed, std::chrono::steady_clock::time_point::max())) return a;
  }
}

// Long-polls until the job ends or --timeout passes; the last answer. A poll without an answer,
// or told to try later, is asked again (ask_again): a wait rides out the gateway's restart or a
// rolling update, and a Redis failover.
HttpAnswer wait_for(const Options& o, const std::string& url) {
  auto limit = parse_duration(o.timeout).value_or(std::chrono::seconds(60));
  auto deadline = std::chrono::steady_clock::now() + limit;
  HttpAnswer a;
  int failed = 0;
  do {
    auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline -
                                                                 std::chrono::steady_clock::now())
                    .count();
    a = http_call("GET", url + "?wait=" + std::to_string(std::clamp<long long>(left, 1, 60)),
                  auth(o));
    if (a.status == 200) {
      failed = 0;
      auto st = field(boost::json::parse(a.body).as_object(), "status");
      if (exit_for(st) != 5) return a;
      continue;
    }
    if (!ask_again(a, failed, deadline)) return a;
  } while (std::chrono::steady_clock::now() < deadline);
  return a;
}

// On a terminal (and without --json): follows the job's live events, one status line kept up to
// date on stderr — status, progress, time waited — until the job ends or --timeout passes. The
// last answer, as wait_for gives it.
HttpAnswer watch_live(const Options& o, const std::string& url) {
  const auto limit = parse_duration(o.timeout).value_or(std::chrono::seconds(60));
  const auto start = std::chrono::steady_clock::now();
  std::string buffer, line;
  bool ended = false;
  auto on_data = [&](std::string_view d) {
    buffer.append(d);
    for (auto end = buffer.find("\n\n"); end != std::string::npos; end = buffer.find("\n\n")) {
      const std::string block = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      const auto at = block.find("data: ");
      if (at == std::string::npos) continue;
      boost::system::error_code ec;
      auto v = boost::json::parse(block.substr(at + 6, block.find('\n', at) - at - 6), ec);
      if (ec || !v.is_object()) continue;
      const auto& j = v.as_object();
      const std::string status = field(j, "status");
      std::string progress;
      if (auto p = j.if_contains("progress"); p && p->is_object()) {
        if (auto f = p->as_object().if_contains("fraction"); f && f->is_number())
          progress = std::to_string(static_cast<int>(f->to_number<double>() * 100)) + "%";
        const std::string message = field(p->as_object(), "message");
        if (!message.empty()) progress += (progress.empty() ? "" : " ") + message;
      }
      const auto secs =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
              .count();
      line = field(j, "service_type") + "/" + field(j, "id") + "  " + status +
             (progress.empty() ? "" : "  " + progress) + "  (" + std::to_string(secs) + "s)";
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      if (exit_for(status) != 5) ended = true;
    }
    return !ended;
  };
  auto streamed = http_stream(url + "/events", auth(o), on_data,
                              static_cast<long>(std::chrono::milliseconds(limit).count()));
  if (!line.empty()) std::fputc('\n', stderr);
  if (streamed.status >= 300 || streamed.status == 0) return wait_for(o, url);  // an old gateway
  return read(o, url);
}

// Prints the job (JSON or a table); its status's exit code.
int show(const Options& o, const HttpAnswer& a) {
  auto j = boost::json::parse(a.body).as_object();
  if (o.as_json)
    std::cout << a.body << "\n";
  else
    print_job(j);
  return exit_for(field(j, "status"));
}

}  // namespace

int submit(const Options& o) {
  if (o.file.empty() == o.input_url.empty())
    throw std::invalid_argument("give FILE or --input-url (one of them)");
  Upload u{o.file, {}, !o.as_json && ::isatty(2) && !o.file.empty()};
  if (!o.input_url.empty()) u.fields["input_url"] = o.input_url;
  if (!o.operation.empty()) u.fields["operation"] = o.operation;
  if (!o.callback.empty()) u.fields["callback_url"] = o.callback;
  if (!o.webhook_events.empty()) u.fields["webhook_events"] = o.webhook_events;
  if (!o.ttl.empty()) u.fields["ttl"] = o.ttl;
  if (!o.job_timeout.empty()) u.fields["timeout"] = o.job_timeout;
  if (!o.params.empty()) u.fields["params"] = boost::json::serialize(parse_params(o.params));
  auto headers = auth(o);
  if (o.priority) headers.push_back(env_or("RELAY_PRIORITY_HEADER", "X-Priority") + ": 1");
  auto a = http_call("POST", o.gateway + "/jobs/" + o.service_type, headers, &u);
  if (a.status != 202) return api_error(o, a);
  auto j = boost::json::parse(a.body).as_object();
  std::string r = field(j, "service_type") + "/" + field(j, "id");
  if (!o.wait) {
    if (o.as_json)
      std::cout << a.body << "\n";
    else
      std::cout << r << "\n";
    return 0;
  }
  const bool live = !o.as_json && ::isatty(2);
  auto done =
      live ? watch_live(o, o.gateway + "/jobs/" + r) : wait_for(o, o.gateway + "/jobs/" + r);
  if (done.status != 200) return api_error(o, done);
  return show(o, done);
}

int job(const Options& o, JobVerb verb) {
  auto url = job_url(o, o.ref);
  if (!url) throw std::invalid_argument("expected SERVICE_TYPE/ID, got '" + o.ref + "'");
  if (verb == JobVerb::status || verb == JobVerb::wait) {
    const bool live = verb == JobVerb::wait && !o.as_json && ::isatty(2);
    auto a = live ? watch_live(o, *url) : verb == JobVerb::wait ? wait_for(o, *url) : read(o, *url);
    if (a.status != 200) return api_error(o, a);
    return show(o, a);
  }
  if (verb == JobVerb::result) {
    if (!o.out_file.empty()) return save_result(o, *url);
    auto a = read(o, *url + "/result");
    if (a.status != 200) return api_error(o, a);
    std::cout << a.body << (a.body.ends_with("\n") ? "" : "\n");
    return 0;
  }
  auto a = http_call("DELETE", *url, auth(o));
  if (a.status != 200 && a.status != 202) return api_error(o, a);
  // The job's exit code (4: cancelled), except that a job its relay is still stopping
  // (5, "still running") is a cancel under way: 0. Printed once.
  const int code = show(o, a);
  return code == 5 ? 0 : code;
}

int jobs(const Options& o) {
  if (o.limit < 1) throw std::invalid_argument("--limit must be at least 1");
  std::string query;
  if (!o.status_filter.empty()) query += "&status=" + http::uri_encode(o.status_filter);
  if (!o.since.empty()) {
    // A duration means that long ago; anything else goes to the gateway as written.
    std::string since = o.since;
    if (auto d = parse_duration(o.since)) since = format_rfc3339(wall_now() - *d);
    query += "&since=" + http::uri_encode(since);
  }
  const std::string base =
      o.gateway + "/jobs" + (o.service_type.empty() ? "" : "/" + o.service_type);
  boost::json::array all;
  std::string cursor;
  // Page after page (newest first) until --limit jobs or the end.
  while (static_cast<std::int64_t>(all.size()) < o.limit) {
    const auto want = std::min<std::int64_t>(100, o.limit - static_cast<std::int64_t>(all.size()));
    std::string url = base + "?limit=" + std::to_string(want) + query;
    if (!cursor.empty()) url += "&cursor=" + http::uri_encode(cursor);
    auto a = http_call("GET", url, auth(o));
    if (a.status != 200) return api_error(o, a);
    auto page = boost::json::parse(a.body).as_object();
    for (auto& j : page.at("jobs").as_array()) all.push_back(j);
    const auto& next = page.at("next_cursor");
    if (!next.is_string()) break;
    cursor = std::string(next.as_string());
  }
  if (o.as_json) {
    std::cout << boost::json::serialize(all) << "\n";
    return 0;
  }
  print_header();
  for (const auto& j : all) print_row(j.as_object());
  return 0;
}

}  // namespace relay::ctl
