#!/usr/bin/env python3
"""Relay beside a bare queue library (issue 14), in one run on one fresh redis-server
(persistence off): N jobs with 1 KiB inputs end to end.

  Relay:  wrk POSTs 1 KiB raw bodies (64 connections) to the gateway (tmpfs storage); 4 relays
          (--max-jobs 0) and the no-op model run them; done when the events stream holds N.
  BullMQ: producer.js adds N jobs of 1 KiB (64 adds in flight), worker.js runs them with a no-op
          processor (concurrency 64); done when the worker has completed N.

For each: jobs/s end to end; CPU-µs per job of the system (everything but the load generator,
Redis included) and of Redis alone, and of the load generator apart; Redis commands and reads
(round trips) per job from INFO commandstats and total_reads_processed.

usage: queue_bench.py BIN_DIR [--jobs=20000]   (BullMQ is installed from npm into bench/bullmq)"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ports import free_port, wait_port  # noqa: E402

BIN = sys.argv[1]
JOBS = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--jobs=")), "20000"))
# --only=relay or --only=bullmq: one side (for profiling); the comparison needs both.
ONLY = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
procs = []


def start(argv, env=None, **kw):
    p = subprocess.Popen(argv, env={**os.environ, **(env or {})}, **kw)
    procs.append(p)
    return p


def cpu_seconds(pid):
    """utime + stime of a process (and its waited-for children), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          check=True).stdout


class RedisSocket:
    """One connection for polling while the load runs (a redis-cli process per poll would take
    a measurable share of the 2 cores from the systems measured)."""

    def __init__(self, port):
        import socket
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def integer(self, *args):
        cmd = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
        self.sock.sendall(cmd.encode())
        line = self._line()
        if not line.startswith(b":"):
            raise RuntimeError(f"redis: {line!r}")
        return int(line[1:])


def redis_counters(port):
    stats = redis_cli(port, "INFO", "commandstats")
    calls = sum(int(m) for m in re.findall(r"calls=(\d+)", stats))
    reads = int(re.search(r"total_reads_processed:(\d+)", redis_cli(port, "INFO", "stats")).group(1))
    return calls, reads


class Measure:
    """CPU of each named process and Redis's counters, from start() to stop()."""

    def __init__(self, redis_port, redis_pid, system, load):
        self.port, self.redis_pid, self.system, self.load = redis_port, redis_pid, system, load

    def start(self):
        self.t0 = time.monotonic()
        self.cpu0 = {p.pid: cpu_seconds(p.pid) for p in self.system + self.load}
        self.redis0 = cpu_seconds(self.redis_pid)
        self.calls0, self.reads0 = redis_counters(self.port)

    def stop(self, jobs):
        elapsed = time.monotonic() - self.t0
        def spent(ps):
            total = 0.0
            for p in ps:
                try:
                    total += cpu_seconds(p.pid) - self.cpu0[p.pid]
                except FileNotFoundError:  # exited: its last reading stands
                    total += self.last.get(p.pid, 0.0)
            return total
        redis_cpu = cpu_seconds(self.redis_pid) - self.redis0
        parts = {}
        for p in self.system:
            name = os.path.basename(p.args[0] if p.args[0] != "node" else p.args[1])
            parts[name] = parts.get(name, 0.0) + spent([p]) / jobs * 1e6
        parts["redis-server"] = redis_cpu / jobs * 1e6
        calls, reads = redis_counters(self.port)
        return {
            "jobs_per_s": jobs / elapsed,
            "cpu_us_per_job": (spent(self.system) + redis_cpu) / jobs * 1e6,
            "redis_cpu_us_per_job": redis_cpu / jobs * 1e6,
            "load_cpu_us_per_job": spent(self.load) / jobs * 1e6,
            "commands_per_job": (calls - self.calls0) / jobs,
            "reads_per_job": (reads - self.reads0) / jobs,
            "seconds": elapsed,
            "parts": parts,
        }

    last = {}


def watch_cpu(measure, ps, stop):
    """Keeps the last CPU reading of processes that may exit before the end (the producer)."""
    while not stop():
        for p in ps:
            try:
                measure.last[p.pid] = cpu_seconds(p.pid) - measure.cpu0[p.pid]
            except (FileNotFoundError, KeyError):
                pass
        time.sleep(0.05)


def relay_side(redis_port, redis_pid, work):
    storage = tempfile.mkdtemp(prefix="relay-queue-bench-", dir="/dev/shm")
    model_port, gw_port = free_port(), free_port()
    model = start([f"{BIN}/relay-inference-noop", "--listen", f"127.0.0.1:{model_port}"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(model_port)
    common = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{redis_port}",
              "RELAY_STORAGE_URL": f"file://{storage}"}
    log = open(os.path.join(work, "relay-side.log"), "ab")
    gateway = start([f"{BIN}/relay-gateway"], {**common,
                    "RELAY_SERVER_LISTEN": f"127.0.0.1:{gw_port}", "RELAY_SERVICE_TYPES": "echo=m1",
                    "RELAY_AUTH_ENABLED": "false"}, stdout=log, stderr=log)
    wait_port(gw_port)
    relays = [start([f"{BIN}/relay", "--max-jobs", "0"], {**common, "RELAY_MODEL": "m1",
                    "RELAY_INFERENCE_URL": f"http://127.0.0.1:{model_port}",
                    "RELAY_QUEUE_POP_TIMEOUT": "1h"}, stdout=log, stderr=log) for _ in range(4)]
    time.sleep(0.5)  # (relays waiting in BLMOVE; nothing to measure yet)
    script = os.path.join(work, "post.lua")
    with open(script, "w") as f:
        f.write(f"""
wrk.method = "POST"
wrk.path = "/jobs/echo?filename=in.bin"
wrk.body = string.rep("x", 1024)
wrk.headers["Content-Type"] = "application/octet-stream"
-- Each of the 2 threads submits its half; the connections' requests in flight when it stops
-- (at most 64 in all) make a few jobs more, which only count against Relay.
local answered, limit = 0, {JOBS // 2}
function response(status, headers, body)
  answered = answered + 1
  if answered >= limit then wrk.thread:stop() end
end
""")
    measure = Measure(redis_port, redis_pid, [gateway, model, *relays], [])
    if os.environ.get("RELAY_BENCH_SLOWLOG"):
        redis_cli(redis_port, "CONFIG", "SET", "slowlog-log-slower-than", "0")
        redis_cli(redis_port, "CONFIG", "SET", "slowlog-max-len", "5000")
    measure.start()
    load = start(["wrk", "-t2", "-c64", "-d600s", "-s", script, f"http://127.0.0.1:{gw_port}"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    measure.load = [load]
    measure.cpu0[load.pid] = 0.0
    import threading
    done = [False]
    t = threading.Thread(target=watch_cpu, args=(measure, [load], lambda: done[0]))
    t.start()
    poll = RedisSocket(redis_port)
    while poll.integer("XLEN", "jobs:m1:events") < JOBS:
        time.sleep(0.02)
    result = measure.stop(JOBS)
    if os.environ.get("RELAY_BENCH_SLOWLOG"):
        print(redis_cli(redis_port, "SLOWLOG", "GET", "5000"), file=open("/tmp/slowlog.txt", "w"))
    if os.environ.get("RELAY_BENCH_COMMANDSTATS"):
        print(redis_cli(redis_port, "INFO", "commandstats"), file=sys.stderr)
    done[0] = True
    t.join()
    # Its threads stopped at their share; wrk itself would sleep out -d.
    load.terminate()
    load.wait()
    for p in [gateway, model, *relays]:
        p.terminate()
        p.wait()
    shutil.rmtree(storage, ignore_errors=True)
    return result


def bullmq_side(redis_port, redis_pid, work):
    d = os.path.join(ROOT, "bench", "bullmq")
    if not os.path.isdir(os.path.join(d, "node_modules", "bullmq")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=d, check=True)
    worker = start(["node", "worker.js", str(JOBS), "64", str(redis_port)], cwd=d,
                   stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    measure = Measure(redis_port, redis_pid, [worker], [])
    measure.start()
    producer = start(["node", "producer.js", str(JOBS), "64", str(redis_port)], cwd=d,
                     stdout=subprocess.DEVNULL)
    measure.load = [producer]
    measure.cpu0[producer.pid] = 0.0
    import threading
    done = [False]
    t = threading.Thread(target=watch_cpu, args=(measure, [producer, worker], lambda: done[0]))
    t.start()
    assert worker.stdout.readline().startswith("done")
    result = measure.stop(JOBS)
    done[0] = True
    t.join()
    producer.wait()
    worker.wait()
    return result


def main():
    work = tempfile.mkdtemp(prefix="queue-bench-")
    port = free_port()
    redis = start(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                   "--dir", work], stdout=subprocess.DEVNULL)
    wait_port(port)
    results = {}
    try:
        for name, side in (("BullMQ 5.81.5 (c=64, worker c=64)", bullmq_side),
                           ("Relay (4 relays, tmpfs)", relay_side)):
            if ONLY and ONLY.lower() not in name.lower():
                continue
            redis_cli(port, "FLUSHALL")
            redis_cli(port, "CONFIG", "RESETSTAT")
            results[name] = side(port, redis.pid, work)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{JOBS} jobs, 1 KiB inputs, one redis-server (persistence off), {os.cpu_count()} cores\n")
    print(f"| | jobs/s end to end | CPU-µs/job, system | Redis CPU-µs/job | Redis commands/job "
          f"| Redis reads/job | load generator CPU-µs/job |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['jobs_per_s']:,.0f} | {r['cpu_us_per_job']:.0f} | "
              f"{r['redis_cpu_us_per_job']:.0f} | {r['commands_per_job']:.2f} | "
              f"{r['reads_per_job']:.2f} | {r['load_cpu_us_per_job']:.0f} |")
    print("\nCPU-µs per job by process:")
    for name, r in results.items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["parts"].items()))
    if len(results) < 2:
        return
    relay = results["Relay (4 relays, tmpfs)"]
    bull = results["BullMQ 5.81.5 (c=64, worker c=64)"]
    print(f"\nRelay / BullMQ: throughput {relay['jobs_per_s'] / bull['jobs_per_s']:.2f}x "
          f"(goal >= 1.0), CPU per job {relay['cpu_us_per_job'] / bull['cpu_us_per_job']:.2f}x "
          f"(goal <= 1.0)")


if __name__ == "__main__":
    main()
