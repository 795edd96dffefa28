// relay-bench — the relay's benchmark (issue 2). Prints, in one run on this machine:
//   * one-shot mode (a new relay process per job, as under a KEDA ScaledJob): median and p99
//     wall time from process start to exit, with the stage breakdown; target median <= 5 ms;
//   * --max-jobs 0 with one relay: jobs per second; target >= 2,000 jobs/s; and the same over
//     TLS to Redis beside plain TCP (target: within 15%) and with a Redis Cluster (within 10%),
//     in rounds (the third argument, 3 by default);
//   * beside them, the floor: `redis-cli --latency` round-trip time x the Redis round trips the
//     relay makes per job.
// 1 KiB inputs, the no-op inference server (C++), filesystem storage, Redis on loopback.
// Figures are printed, never asserted.

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "common/job_id.hpp"
#include "common/time.hpp"
#include "harness.hpp"
#include "redis/job_store.hpp"
#include "storage/file_storage.hpp"
#include "storage/object_keys.hpp"

using namespace relay;
using namespace relay::testing;
using Clock = std::chrono::steady_clock;

namespace {

// Redis round trips per job, counted from the code (relay.cpp, job_store.cpp):
//   steady state, jobs waiting: EVALSHA finish + EVALSHA take of the next, pipelined  = 1
//   one-shot, per process: CLIENT ID and LRANGE (a look at pending) with the connect,
//   EVALSHA take, EVALSHA finish                                                       = 3
// (The cancel listener's connect and SUBSCRIBE run beside them, on their own thread; BLMOVE +
// begin replace take only when the queue is empty; the heartbeat makes none for jobs shorter
// than lease_ttl/3.)
constexpr int kRoundTripsSteady = 1;
constexpr int kRoundTripsOneShot = 3;

// Microseconds to create, write and rename one small file under dir: the filesystem's floor
// for storing one result.json atomically.
double create_cost_us(const std::string& dir) {
  const int n = 500;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::string p = dir + "/probe-" + std::to_string(i);
    FILE* f = std::fopen((p + ".tmp").c_str(), "w");
    std::fputs("{\"probe\":true}", f);
    std::fclose(f);
    std::rename((p + ".tmp").c_str(), p.c_str());
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
  for (int i = 0; i < n; ++i) std::remove((dir + "/probe-" + std::to_string(i)).c_str());
  return us;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

double redis_latency_ms(int port) {
  std::string cmd = "redis-cli -p " + std::to_string(port) + " --latency --raw";
  FILE* p = ::popen(cmd.c_str(), "r");
  double mn = 0, mx = 0, avg = 0;
  long samples = 0;
  if (p) {
    if (std::fscanf(p, "%lf %lf %lf %ld", &mn, &mx, &avg, &samples) != 4) avg = 0;
    ::pclose(p);
  }
  return avg;
}

std::string submit(redis::JobStore& store, storage::Storage& st, const std::string& model,
                   const std::string& input) {
  JobRecord r;
  r.id = new_job_id();
  r.service_type = "bench";
  r.model = model;
  r.input_key = input_object_key(r.service_type, r.id);
  r.input_filename = "input.bin";
  r.input_content_type = "application/octet-stream";
  r.input_size = input.size();
  r.created_at = wall_now();
  MemorySource src(input);
  st.put(r.input_key, src, {});
  store.submit(r, false);
  return r.id;
}

}  // namespace

int main(int argc, char** argv) {
  int oneshot_jobs = argc > 1 ? std::atoi(argv[1]) : 300;
  int throughput_jobs = argc > 2 ? std::atoi(argv[2]) : 20000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;  // of the tmpfs runs, see below
  const std::string model = "bench";
  RedisServer redis_server;
  InferenceServer inference({.record_events = false});
  TempDir files, logs;
  storage::FileStorage st(files.path(), false);
  auto conn = redis_server.connect();
  redis::JobStore store(conn, redis::Keys{});
  const std::string input(1024, 'x');
  Env env{{"RELAY_MODEL", model},
          {"RELAY_REDIS_URL", redis_server.url()},
          {"RELAY_STORAGE_URL", "file://" + files.path()},
          {"RELAY_INFERENCE_URL", inference.url()},
          {"RELAY_QUEUE_POP_TIMEOUT", "2s"},
          {"RELAY_LOG_LEVEL", "warn"}};

  const double rtt = redis_latency_ms(redis_server.port());

  // One-shot: a new process per job.
  std::vector<double> wall;
  std::map<std::string, std::vector<double>> stages;
  for (int i = 0; i < oneshot_jobs; ++i) {
    auto id = submit(store, st, model, input);
    auto t0 = Clock::now();
    Process relay({relay_binary()}, env, logs.path() + "/oneshot.log");
    int code = relay.wait_blocking();
    wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    auto rec = store.get(model, id);
    if (code != 0 || !rec || rec->status != JobStatus::completed) {
      std::cerr << "one-shot job " << id << " did not complete (exit " << code << ")\n"
                << relay.log();
      return 1;
    }
    boost::system::error_code jec;
    auto tv = boost::json::parse(rec->timings, jec);
    if (jec || !tv.is_object()) {
      std::cerr << "bad timings: [" << rec->timings << "]\n";
      return 1;
    }
    for (auto& kv : tv.as_object())
      stages[std::string(kv.key())].push_back(kv.value().to_number<double>());
  }

  // One relay, --max-jobs N (it exits when the last job is done): on two storage roots with
  // plain TCP, and on tmpfs again with Redis over TLS (issue 9: TLS within 15% of plain) and
  // with a 3-master Redis Cluster (issue 9: within 10% of standalone for one model). The three
  // tmpfs runs go in rounds, one of each in turn, and each ratio is the median of the rounds'
  // own: this VM's speed moves by 10-30% from one spell to the next, which a ratio of two runs
  // seconds apart would read as the difference between them (one run read 0.69 for TLS on
  // 2026-12-05, the next 0.92). Five rounds: seven on 2026-12-07 read TLS from 0.74 to 1.05
  // (median 0.87), and the median of three moved with them by ±0.05.
  struct Run {
    std::string where;
    std::vector<double> jobs_per_s;  // one per round
    double create_us = 0;
  };
  std::string shm = "/dev/shm/relay-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(shm);
  RedisServer tls_server(false, {}, true, false);
  auto tls_conn = tls_server.connect();
  redis::JobStore tls_store(tls_conn, redis::Keys{});
  RedisServer cluster_server(false, {}, false, true);
  auto cluster_conn = cluster_server.connect();
  const redis::Keys cluster_keys("", true);
  redis::JobStore cluster_store(cluster_conn, cluster_keys);
  struct Setup {
    std::string where, root;
    RedisServer* server;
    redis::Connection* conn;
    redis::JobStore* store;
  };
  const std::vector<Setup> setups{
      {"disk (" + files.path() + ")", files.path(), &redis_server, &conn, &store},
      {"tmpfs (/dev/shm)", shm, &redis_server, &conn, &store},
      {"tmpfs+TLS (Redis over TLS)", shm, &tls_server, &tls_conn, &tls_store},
      {"tmpfs+cluster (3-master Redis Cluster)", shm, &cluster_server, &cluster_conn,
       &cluster_store}};
  std::vector<Run> runs;
  for (const auto& setup : setups) runs.push_back({setup.where, {}, 0});
  // Jobs per second of one run, or 0 when it failed (said on stderr).
  auto run = [&](const Setup& setup) -> double {
    // Each tmpfs run starts from an empty folder: the previous run's jobs would make file
    // creation, not Redis, the difference between runs.
    if (setup.root == shm) {
      std::filesystem::remove_all(shm);
      std::filesystem::create_directories(shm);
    }
    storage::FileStorage rst(setup.root, false);
    Env renv = env;
    renv["RELAY_STORAGE_URL"] = "file://" + setup.root;
    for (auto& [k, v] : setup.server->env()) renv[k] = v;
    for (int i = 0; i < throughput_jobs; ++i) submit(*setup.store, rst, model, input);
    setup.conn->command({"DEL", setup.store->keys().events(model)});
    auto t0 = Clock::now();
    Process relay({relay_binary(), "--max-jobs", std::to_string(throughput_jobs)}, renv,
                  logs.path() + "/throughput.log");
    int code = relay.wait_blocking();
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    long long done =
        redis::as_integer(setup.conn->command({"XLEN", setup.store->keys().events(model)}).get());
    if (code != 0 || done != throughput_jobs) {
      std::cerr << "throughput run: exit " << code << ", " << done << " of " << throughput_jobs
                << " done\n"
                << relay.log();
      return 0;
    }
    return throughput_jobs / secs;
  };
  // The disk once, in the first round.
  for (int round = 0; round < std::max(rounds, 1); ++round)
    for (std::size_t i = round == 0 ? 0 : 1; i < setups.size(); ++i) {
      const double r = run(setups[i]);
      if (r == 0) return 1;
      runs[i].jobs_per_s.push_back(r);
      if (round == 0) runs[i].create_us = create_cost_us(setups[i].root);
    }
  std::filesystem::remove_all(shm);

  std::printf(
      "Relay benchmark: 1 KiB inputs, no-op inference server, filesystem storage, Redis on "
      "loopback\n");
  std::printf("redis-cli --latency (avg round trip): %.3f ms\n", rtt);
  std::printf("Redis round trips per job: one-shot %d, steady state %d\n\n", kRoundTripsOneShot,
              kRoundTripsSteady);
  std::printf("%-44s %12s %12s %14s\n", "figure", "measured", "target", "floor (RTT x n)");
  std::printf("%-44s %9.2f ms %9s ms %11.2f ms\n",
              ("one-shot wall time, median (n=" + std::to_string(oneshot_jobs) + ")").c_str(),
              percentile(wall, 0.5), "<= 5", rtt * kRoundTripsOneShot);
  std::printf("%-44s %9.2f ms %12s %11.2f ms\n", "one-shot wall time, p99", percentile(wall, 0.99),
              "", rtt * kRoundTripsOneShot);
  for (const auto& r : runs)
    std::printf("%-44s %7.0f jobs/s %5s jobs/s %6.0f jobs/s\n",
                ("--max-jobs 0, one relay, " + r.where.substr(0, r.where.find(' '))).c_str(),
                percentile(r.jobs_per_s, 0.5), ">= 2000",
                rtt > 0 ? 1000.0 / (rtt * kRoundTripsSteady) : 0.0);
  std::printf(
      "\n(n=%d jobs per throughput run; one atomic small-file write costs %.0f us on disk, %.0f us "
      "on tmpfs\n"
      " on this machine, measured in this run: the storage floor per job)\n",
      throughput_jobs, runs[0].create_us, runs[1].create_us);
  // Each round's ratio to the plain run of the same round; their median, and all of them.
  auto ratio = [&](const char* what, std::size_t i, const char* target) {
    std::vector<double> each;
    std::string listed;
    for (std::size_t k = 0; k < runs[i].jobs_per_s.size(); ++k) {
      each.push_back(runs[i].jobs_per_s[k] / runs[1].jobs_per_s[k]);
      char one[16];
      std::snprintf(one, sizeof one, "%s%.2f", k ? ", " : "", each.back());
      listed += one;
    }
    std::printf("%s: %.2f (target %s; rounds: %s)\n", what, percentile(each, 0.5), target,
                listed.c_str());
  };
  if (runs[1].jobs_per_s.size() > 1)
    std::printf("(tmpfs runs: the median of %zu rounds, one run of each in turn)\n",
                runs[1].jobs_per_s.size());
  ratio("Redis over TLS / plain TCP (tmpfs runs)", 2, ">= 0.85");
  ratio("Redis Cluster / standalone (tmpfs runs, one model)", 3, ">= 0.90");
  std::printf("\none-shot stage breakdown (median / p99 ms, from the job records):\n");
  for (const char* s : {"download", "inference", "upload", "total"}) {
    auto it = stages.find(s);
    if (it != stages.end())
      std::printf("  %-10s %8.3f / %8.3f\n", s, percentile(it->second, 0.5),
                  percentile(it->second, 0.99));
  }
  std::printf(
      "  (total = in-process job time; the rest of the wall time is process start, health check,\n"
      "   Redis connect and subscribe, the take and the finish)\n");
  return 0;
}
