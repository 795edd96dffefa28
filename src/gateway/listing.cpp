// GET /jobs and GET /jobs/{service_type}: the tenant's jobs, newest first, a page at a time.
//
// The index is one sorted set per tenant ("<service_type>/<id>" by creation time), written when
// a job is created and trimmed to gc.job_retention. A page walks it from a cursor (the last
// entry returned) towards older jobs, so jobs submitted meanwhile never shift it: pages are
// complete and free of duplicates. Filters by status need each job's record: a request reads at
// most kMaxScan entries, and says where to go on (next_cursor) when it stopped early.
#include <boost/algorithm/string/join.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <charconv>
#include <limits>
#include <set>

#include "common/hex.hpp"
#include "common/sha256.hpp"
#include "common/time.hpp"
#include "gateway/api_steps.hpp"

namespace relay::gateway {

namespace {

constexpr int kMaxScan = 1000;
constexpr int kDefaultLimit = 20, kMaxLimit = 100;

struct Cursor {
  std::int64_t ms = std::numeric_limits<std::int64_t>::max();
  std::string member;  // empty: from the newest
};

std::string encode(const Cursor& c) {
  return std::to_string(c.ms) + "-" + to_hex(c.member);
}

std::optional<Cursor> decode(std::string_view text) {
  const auto dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  Cursor c;
  auto [p, ec] = std::from_chars(text.data(), text.data() + dash, c.ms);
  if (ec != std::errc() || p != text.data() + dash) return std::nullopt;
  const auto hex = text.substr(dash + 1);
  if (hex.size() % 2 != 0 || hex.empty()) return std::nullopt;
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    auto [q, e] = std::from_chars(hex.data() + i, hex.data() + i + 2, v, 16);
    if (e != std::errc() || q != hex.data() + i + 2) return std::nullopt;
    c.member.push_back(static_cast<char>(v));
  }
  return c;
}

// Index scores: creation time in microseconds (exact in a double until the year 2255).
std::int64_t to_us(WallTime t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

Response Api::list_jobs(const Request& req, Context& ctx, const std::string& only_svc) {
  auto target = boost::urls::parse_origin_form(req.target);
  std::set<JobStatus> statuses;
  int limit = kDefaultLimit;
  std::int64_t oldest = std::numeric_limits<std::int64_t>::min();
  Cursor from;
  std::string idempotency_key;
  for (auto p : target->params()) {
    const std::string v(p.value);
    if (p.key == "status") {
      for (size_t start = 0; start <= v.size();) {
        const size_t comma = std::min(v.find(',', start), v.size());
        auto st = parse_status(std::string_view(v).substr(start, comma - start));
        if (!st)
          return error_response(400, "invalid_status",
                                "status is a comma-separated list of pending, processing, "
                                "completed, failed, cancelled");
        statuses.insert(*st);
        start = comma + 1;
      }
    } else if (p.key == "limit") {
      auto [q, ec] = std::from_chars(v.data(), v.data() + v.size(), limit);
      if (ec != std::errc() || q != v.data() + v.size() || limit < 1 || limit > kMaxLimit)
        return error_response(400, "invalid_limit", "limit is a whole number from 1 to 100");
    } else if (p.key == "since" || p.key == "until") {
      auto t = parse_rfc3339(v);
      if (!t)
        return error_response(400, "invalid_" + std::string(p.key),
                              std::string(p.key) + " is an RFC 3339 time (2026-11-30T12:00:00Z)");
      if (p.key == "since")
        oldest = to_us(*t);
      else if (from.member.empty())
        from.ms = to_us(*t) + 999;  // the whole millisecond: times are written to the ms
    } else if (p.key == "cursor") {
      auto c = decode(v);
      if (!c) return error_response(400, "invalid_cursor", "cursor is a next_cursor as given");
      from = *c;
    } else if (p.key == "idempotency_key") {
      idempotency_key = v;
    }
  }
  auto model_of = [&](const std::string& svc) -> const std::string* {
    auto it = cfg_.service_types.find(svc);
    return it == cfg_.service_types.end() ? nullptr : &it->second.model;
  };
  auto wanted = [&](const JobRecord& r) {
    return r.tenant == ctx.tenant && (statuses.empty() || statuses.count(r.status));
  };
  std::vector<std::string> jobs;

  if (!idempotency_key.empty()) {
    // The job an Idempotency-Key names, in each service type asked for: zero or one a type.
    for (const auto& [svc, st] : cfg_.service_types) {
      if (!only_svc.empty() && svc != only_svc) continue;
      auto rec = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
        auto id = store.idempotent_job(
            keys_.idempotency(st.model, ctx.tenant, sha256_hex(idempotency_key)));
        return id ? store.get(st.model, *id) : std::nullopt;
      });
      if (rec && rec->service_type == svc && wanted(*rec)) jobs.push_back(job_json(*rec));
    }
    Response r;
    r.body = "{\"jobs\":[" + boost::algorithm::join(jobs, ",") + "],\"next_cursor\":null}";
    return r;
  }

  // Walks the index from the cursor, oldest-ward, until a page is full, kMaxScan entries were
  // read, or the index ends. Entries at the cursor's own time, up to the cursor, were in the
  // previous page (the window grows if ever more than a window share one microsecond).
  int scanned = 0, window = 64;
  bool exhausted = false, stopped = false;
  Cursor last = from;
  while (!stopped && !exhausted) {
    auto page = step(ctx, [&](redis::JobStore& store, redis::Connection&) {
      return store.index_page(ctx.tenant, last.ms, oldest, window);
    });
    exhausted = static_cast<int>(page.size()) < window;
    int fresh = 0;
    for (const auto& [member, at] : page) {
      if (!last.member.empty() && at == last.ms && member >= last.member) continue;
      ++fresh;
      ++scanned;
      last = Cursor{at, member};
      const auto slash = member.find('/');
      const std::string svc = member.substr(0, slash);
      const std::string* model = model_of(svc);
      if (slash != std::string::npos && model && (only_svc.empty() || svc == only_svc)) {
        const std::string id = member.substr(slash + 1);
        auto rec = step(
            ctx, [&](redis::JobStore& store, redis::Connection&) { return store.get(*model, id); });
        if (rec && wanted(*rec)) jobs.push_back(job_json(*rec));  // expired records drop out
      }
      if (static_cast<int>(jobs.size()) == limit || scanned >= kMaxScan) {
        stopped = true;
        break;
      }
    }
    if (fresh == 0 && !exhausted) window *= 4;
    if (window > 4 * kMaxScan) stopped = true;
  }
  const bool more = stopped || !exhausted;
  Response r;
  r.body = "{\"jobs\":[" + boost::algorithm::join(jobs, ",") +
           "],\"next_cursor\":" + (more ? "\"" + encode(last) + "\"" : std::string("null")) + "}";
  return r;
}

}  // namespace relay::gateway
