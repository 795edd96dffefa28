#include "common/time.hpp"

#include <charconv>
#include <cmath>

namespace relay {

std::optional<Millis> parse_duration(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    double ms;
  };
  // Longest suffixes first so that "ms" is not read as "m".
  static constexpr Unit kUnits[] = {
      {"ms", 1.0}, {"s", 1000.0}, {"m", 60'000.0}, {"h", 3'600'000.0}};
  double scale = 1000.0;  // a bare number is seconds
  for (const auto& u : kUnits) {
    if (text.size() > u.suffix.size() && text.ends_with(u.suffix)) {
      text.remove_suffix(u.suffix.size());
      scale = u.ms;
      break;
    }
  }
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  double ms = value * scale;
  if (ms > 1e15) return std::nullopt;
  return Millis(static_cast<long long>(std::llround(ms)));
}

namespace {

// Exactly n decimal digits at text[at]: their value, or -1.
int digits_at(std::string_view text, std::size_t at, std::size_t n) {
  if (text.size() < at + n) return -1;
  int v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    v = v * 10 + (text[i] - '0');
  }
  return v;
}

void put_digits(char* out, int v, int n) {
  for (int i = n - 1; i >= 0; --i, v /= 10) out[i] = static_cast<char>('0' + v % 10);
}

}  // namespace

// (By hand rather than with snprintf and sscanf: every job's record carries several of these
// and both were visible in a busy relay's profile.)
std::string format_rfc3339(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(t);
  const auto day = floor<days>(ms);
  const year_month_day ymd{day};
  const hh_mm_ss hms{ms - day};
  const int year = static_cast<int>(ymd.year());
  if (year < 0 || year > 9999) return "invalid-time";  // (not a time this system meets)
  std::string out = "0000-00-00T00:00:00.000Z";
  put_digits(&out[0], year, 4);
  put_digits(&out[5], static_cast<int>(static_cast<unsigned>(ymd.month())), 2);
  put_digits(&out[8], static_cast<int>(static_cast<unsigned>(ymd.day())), 2);
  put_digits(&out[11], static_cast<int>(hms.hours().count()), 2);
  put_digits(&out[14], static_cast<int>(hms.minutes().count()), 2);
  put_digits(&out[17], static_cast<int>(hms.seconds().count()), 2);
  put_digits(&out[20], static_cast<int>(hms.subseconds().count()), 3);
  return out;
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(std::string_view text) {
  // Accepts exactly what format_rfc3339 writes, with or without the milliseconds.
  using namespace std::chrono;
  const int y = digits_at(text, 0, 4), mo = digits_at(text, 5, 2), d = digits_at(text, 8, 2),
            h = digits_at(text, 11, 2), mi = digits_at(text, 14, 2), s = digits_at(text, 17, 2);
  if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0 || text[4] != '-' || text[7] != '-' ||
      text[10] != 'T' || text[13] != ':' || text[16] != ':')
    return std::nullopt;
  int ms = 0;
  std::string_view rest = text.substr(19);
  if (rest.starts_with('.')) {
    ms = digits_at(text, 20, 3);
    if (ms < 0) return std::nullopt;
    rest.remove_prefix(4);
  }
  const year_month_day ymd{year(y), month(static_cast<unsigned>(mo)),
                           day(static_cast<unsigned>(d))};
  // (60 seconds: a leap second, as RFC 3339 allows.)
  if (rest != "Z" || !ymd.ok() || h > 23 || mi > 59 || s > 60) return std::nullopt;
  return sys_days(ymd) + hours(h) + minutes(mi) + seconds(s) + milliseconds(ms);
}

}  // namespace relay
