#include "relayctl/up.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "redis/connection.hpp"
#include "relayctl/child.hpp"
#include "relayctl/http.hpp"
#include "relayctl/scaler.hpp"

namespace relay::ctl {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool wait_http(const std::string& url, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (http_call("GET", url, {}, nullptr, {}, 1000).status == 200) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// Local defaults that the environment may override.
std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v ? v : def;
}

std::string exe_dir() {
  return fs::read_symlink("/proc/self/exe").parent_path().string();
}

boost::json::object parse(const std::string& s) {
  boost::system::error_code ec;
  auto v = boost::json::parse(s, ec);
  return !ec && v.is_object() ? v.as_object() : boost::json::object{};
}

// Submits the samples, long-polls each job, shows the results; true when every one completed and
// the OCR found the words the images hold.
bool demo(const std::string& gw, const std::string& samples, bool with_ocr) {
  struct Sample {
    std::string service, file, expect;
  };
  std::vector<Sample> jobs{{"echo", samples + "/fox.txt", "fox.txt"}};
  if (with_ocr) {
    jobs.push_back({"ocr", samples + "/relay-ocr.png", "Relay runs OCR jobs"});
    jobs.push_back({"ocr", samples + "/invoice.png", "Total due: 42 EUR"});
  }
  bool ok = true;
  std::vector<std::string> ids;
  for (const auto& j : jobs) {
    Upload up{j.file, {}, false};
    auto r = http_call("POST", gw + "/jobs/" + j.service, {}, &up);
    auto o = parse(r.body);
    if (r.status != 202) {
      print_line("[demo] submit " + j.file + " failed: HTTP " + std::to_string(r.status) + " " +
                 r.body + r.error);
      return false;
    }
    ids.emplace_back(o.at("id").as_string());
    print_line("[demo] submitted " + fs::path(j.file).filename().string() + " to " + j.service +
               " as " + ids.back());
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto r = http_call("GET", gw + "/jobs/" + jobs[i].service + "/" + ids[i] + "?wait=60");
    auto o = parse(r.body);
    std::string status = o.contains("status") ? std::string(o.at("status").as_string()) : "?";
    auto result = http_call("GET", gw + "/jobs/" + jobs[i].service + "/" + ids[i] + "/result");
    auto res = parse(result.body);
    std::string shown =
        res.contains("text") ? std::string(res.at("text").as_string()) : result.body.substr(0, 120);
    while (!shown.empty() && (shown.back() == '\n' || shown.back() == ' ')) shown.pop_back();
    for (auto& ch : shown)
      if (ch == '\n') ch = ' ';
    print_line("[demo] " + jobs[i].service + " " + fs::path(jobs[i].file).filename().string() +
               ": " + status + " -> " + shown);
    if (status != "completed" || shown.find(jobs[i].expect) == std::string::npos) {
      print_line("[demo] expected a completed job whose result holds \"" + jobs[i].expect + "\"");
      ok = false;
    }
  }
  return ok;
}

}  // namespace

int run_up(const UpOptions& o) {
  const std::string bin = exe_dir();
  const bool with_ocr = fs::exists(bin + "/relay-model-ocr");
  bool temporary = o.data_dir.empty();
  std::string data = o.data_dir;
  if (temporary) {
    std::string tmpl = (fs::temp_directory_path() / "relay-up-XXXXXX").string();
    data = ::mkdtemp(tmpl.data());
  }
  fs::create_directories(data + "/redis");
  const int redis_port = free_port(), ocr_port = free_port(), echo_port = free_port();
  const int gw_port = o.port ? o.port : free_port();
  const std::string redis_url = "redis://127.0.0.1:" + std::to_string(redis_port);
  const std::string storage = "file://" + fs::absolute(data).string() + "/storage";
  const std::string gw = "http://127.0.0.1:" + std::to_string(gw_port);

  // Ctrl-C and SIGTERM are taken by sigwait below (or end the demo); children are in their own
  // process groups and are stopped in order.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::vector<std::unique_ptr<Child>> services;
  auto start = [&](std::string name, std::vector<std::string> argv,
                   std::map<std::string, std::string> env = {}) {
    services.push_back(std::make_unique<Child>(std::move(name), std::move(argv), env));
  };
  // (Job records kept compact: see "Redis for Relay" in the README.)
  start("redis", {"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind",
                  "127.0.0.1", "--dir", data + "/redis", "--appendonly", "yes", "--save", "",
                  "--hash-max-listpack-value", "256"});
  if (with_ocr)
    start("ocr-model",
          {bin + "/relay-model-ocr", "--listen", "127.0.0.1:" + std::to_string(ocr_port)});
  start("echo-model",
        {bin + "/relay-inference-noop", "--listen", "127.0.0.1:" + std::to_string(echo_port),
         "--delay-ms", std::to_string(o.echo_delay_ms)});
  for (int i = 0; i < 100 && !([&] {
                    try {
                      redis::Endpoint ep;
                      ep.port = redis_port;
                      redis::Connection::open(ep);
                      return true;
                    } catch (...) {
                      return false;
                    }
                  }());
       ++i)
    std::this_thread::sleep_for(50ms);
  start("gateway", {bin + "/relay-gateway"},
        {{"RELAY_SERVER_LISTEN", "127.0.0.1:" + std::to_string(gw_port)},
         {"RELAY_REDIS_URL", redis_url},
         {"RELAY_STORAGE_URL", storage},
         {"RELAY_SERVICE_TYPES", with_ocr ? "ocr=tesseract,echo=echo" : "echo=echo"},
         {"RELAY_AUTH_ENABLED", "false"},  // one machine, loopback only
         {"RELAY_SERVER_PRIORITY_HEADER", "X-Priority"},
         {"RELAY_GC_REAP_INTERVAL", env_or("RELAY_GC_REAP_INTERVAL", "1s")},
         {"RELAY_GC_REAP_GRACE", env_or("RELAY_GC_REAP_GRACE", "1s")},
         {"RELAY_LOG_FORMAT", "text"}});

  int code = 0;
  bool up =
      wait_http(gw + "/readyz", 30s) &&
      wait_http("http://127.0.0.1:" + std::to_string(echo_port) + "/health", 30s) &&
      (!with_ocr || wait_http("http://127.0.0.1:" + std::to_string(ocr_port) + "/health", 60s));
  std::unique_ptr<Scaler> scaler;
  std::jthread scaler_thread;
  if (!up) {
    print_line("[relayctl] the stack did not come up; see the lines above");
    code = 1;
  } else {
    auto relay_env = [&](const std::string& model, int port, const std::string& routes) {
      return std::map<std::string, std::string>{
          {"RELAY_MODEL", model},
          {"RELAY_REDIS_URL", redis_url},
          {"RELAY_STORAGE_URL", storage},
          {"RELAY_INFERENCE_URL", "http://127.0.0.1:" + std::to_string(port)},
          {"RELAY_INFERENCE_ROUTES", routes},
          {"RELAY_QUEUE_POP_TIMEOUT", "2s"},
          {"RELAY_RELAY_HEALTH_INTERVAL", "100ms"},
          // A crashed relay's job is back in the queue within seconds here.
          {"RELAY_LEASE_TTL", env_or("RELAY_LEASE_TTL", "6s")},
          {"RELAY_LOG_FORMAT", "text"}};
    };
    std::vector<ScaledModel> models{
        {"echo", o.max_relays, relay_env("echo", echo_port, "default=/predict")}};
    if (with_ocr)
      models.push_back(
          {"tesseract", o.max_relays, relay_env("tesseract", ocr_port, "default=/ocr")});
    redis::Endpoint ep;
    ep.port = redis_port;
    scaler = std::make_unique<Scaler>(ScalerParams{ep, redis::Keys{}, bin + "/relay", models});
    scaler_thread = std::jthread([&](std::stop_token st) { scaler->run(st); });
    print_line("[relayctl] Relay is up: gateway " + gw + ", service types: " +
               (with_ocr ? "ocr (Tesseract), " : "") + "echo; redis " + redis_url + "; data in " +
               data + (temporary ? " (removed at stop; --data-dir keeps it)" : ""));
    print_line("[relayctl] try: curl -F file=@examples/samples/relay-ocr.png " + gw +
               "/jobs/ocr   (Ctrl-C stops everything)");
    if (o.demo) {
      code = demo(gw, o.samples_dir, with_ocr) ? 0 : 1;
      print_line(code == 0 ? "[demo] every job behaved" : "[demo] something went wrong");
    } else {
      int sig = 0;
      sigwait(&set, &sig);
      print_line("[relayctl] stopping");
    }
  }
  // Reverse order: no new relays, running relays give their jobs back; then the gateway, the
  // models, and Redis last (everyone above uses it).
  if (scaler_thread.joinable()) {
    scaler_thread.request_stop();
    scaler_thread.join();
    scaler->stop_all(10s);
  }
  for (auto it = services.rbegin(); it != services.rend(); ++it) {
    (*it)->signal(SIGTERM);
    if (!(*it)->wait(15s)) (*it)->signal(SIGKILL);
  }
  services.clear();
  // A temporary folder is nobody's data once the stack is down (the next `up` makes another):
  // left, every run would leave a Redis AOF and its objects in /tmp. --data-dir keeps them.
  if (temporary) {
    std::error_code ignored;
    fs::remove_all(data, ignored);
  }
  return code;
}

}  // namespace relay::ctl
