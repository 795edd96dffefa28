#!/usr/bin/env python3
"""Relay beside a bare queue library (issue 14), in one run on one fresh redis-server
(persistence off, flushed between runs).

Throughput: N jobs with 1 KiB inputs end to end.
  Relay:  wrk POSTs 1 KiB raw bodies (64 connections) to the gateway (tmpfs storage); one relay
          of concurrency 4 (--max-jobs 0) and the no-op model run them; done when the events
          stream holds N. (Relay's best here: four relays of concurrency 1 — --relays=4
          --concurrency=1 — cost ~6% more CPU per job and do ~5% fewer jobs/s, measured
          2026-12-02 in three interleaved pairs: four processes wake and switch more than four
          threads of one.) By default (relay.take_ahead 100ms) each slot takes its next job
          while the model runs one and reads the finish's reply while the model works; then the
          same with relay.take_ahead 0s (off: each job taken once the model answered the last).
  BullMQ: producer.js adds N jobs of 1 KiB (64 adds in flight), worker.js runs them with a no-op
          processor (concurrency 64); done when the worker has completed N.
  Two more references, for information (not the goal's): BullMQ's worker POSTing each job to the
  no-op model (a queue library bolted onto a model server), and BullMQ doing Relay's work
  (bench/bullmq/api.js: an HTTP API storing each input as a file on tmpfs and queuing its job,
  under the same wrk load; the worker reads the input, POSTs it to the model and stores the
  answer as a file) — as lean as such a service gets: no auth, no folder per job, no rename.
  For each: jobs/s end to end; CPU-µs per job of the system (everything but the load generator,
  Redis included), by process, and of Redis alone, and of the load generator apart; Redis
  commands and reads (round trips) per job from INFO commandstats and total_reads_processed.
The 20 ms case: 2,000 jobs, 4 relays / a worker of concurrency 4, each job taking 20 ms (the
  no-op model's --delay-ms; a processor that sleeps): jobs/s beside the ideal 4 / 20 ms, and
  beside the model's own pace, measured alone by wrk with W connections (its timer fires late:
  20.3-20.5 ms here); Relay
  as configured by default (the next job taken while the model runs one), then with
  relay.take_ahead 0s (off). --delay-ms=D --workers=W run it with jobs of D ms on W workers
  (as many jobs as fill ~10 s at the ideal rate W / D).
Latency: 1,000 jobs at 100 jobs/s (bench/bullmq/latency.js), submit to completion as the client
  sees it: p50 and p99; Relay twice, the client long-polling after its submission, and its
  submission waiting for the job (Prefer: wait, as the clients' run() does).
One-shot: a relay process per job (as under a KEDA ScaledJob), start to exit: median, p99.

By input size: Relay beside BullMQ (the goal's reference) again with inputs of 4 KiB to 1 MiB
  (fewer jobs each): how each side's cost grows with what a job carries — BullMQ keeps the
  input in Redis, in the job; Relay in storage, Redis holding its key.
Inputs are 1 KiB unless --input-bytes=N says otherwise (the main throughput runs).
--encryption: every Relay run with encryption at rest on (inputs and results sealed with a random
  AES-256 key; BullMQ has no counterpart).
--webhooks: every Relay job of the throughput runs with a callback_url, all to one receiver (a
  no-op HTTP server on loopback, the clients' backend: its CPU not counted); the run, its rate
  and its CPU, lasts until the last webhook was attempted; how long that came after the last
  job, and how many deliveries were put back for a receiver with its share in hand.
  --webhook-delay-ms=N: the receiver answers each webhook N ms late (a backend far away).
--idempotency-keys: every Relay submission of the throughput runs with an Idempotency-Key of its
  own, as the Python and JavaScript clients send one with every submission.
--auth: the gateway checks an API key on every request (auth.enabled, as in production; the
  bench runs without by default), and wrk sends one.
--quotas: the tenant has quotas (quotas.max_pending and quotas.submits_per_minute), too high to
  refuse anything: what admitting each submission and freeing its slot when it ends costs.

usage: queue_bench.py BIN_DIR [--jobs=20000] [--input-bytes=1024] [--results=DIR] [--storage=DIR|s3 [--s3-core]] [--only=relay|relay_off|bullmq|bullmq_model|bullmq_work|delay|latency|oneshot|sizes] [--relays=1] [--concurrency=4] [--delay-ms=20] [--workers=4] [--encryption] [--webhooks [--webhook-delay-ms=N]] [--idempotency-keys] [--auth] [--quotas]
(BullMQ is installed from npm into bench/bullmq; the chart needs gnuplot.)"""
import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ports import free_port, wait_port  # noqa: E402

# The options this script reads: anything else is a typo, refused rather than silently ignored
# (a run of minutes measuring the wrong thing).
OPTIONS = ("--jobs=", "--input-bytes=", "--results=", "--storage=", "--s3-core", "--only=",
           "--relays=", "--concurrency=", "--delay-ms=", "--workers=", "--encryption",
           "--webhooks", "--webhook-delay-ms=", "--idempotency-keys", "--auth", "--quotas")
USAGE = "usage: " + __doc__.split("usage: ", 1)[1]


def usage_error(message):
    print(f"{message}\n{USAGE}", file=sys.stderr)
    sys.exit(2)


def int_option(name, default):
    """--NAME=N as a whole number above 0 (default when absent); a clear error otherwise (0
    jobs, workers or bytes would wait forever for a run that never starts)."""
    text = next((a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{name}=")), default)
    if not text.isdigit() or int(text) == 0:
        usage_error(f"--{name}={text}: not a whole number above 0")
    return int(text)


if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0)
if len(sys.argv) < 2 or not os.path.isdir(sys.argv[1]):
    usage_error("BIN_DIR (the folder of Relay's binaries, e.g. build/bin) comes first" if
                len(sys.argv) < 2 or sys.argv[1].startswith("-") else
                f"{sys.argv[1]}: not a folder (BIN_DIR: Relay's binaries, e.g. build/bin)")
for a in sys.argv[2:]:
    if not any(a == o or (o.endswith("=") and a.startswith(o)) for o in OPTIONS):
        usage_error(f"{a}: unknown option")
BIN = sys.argv[1]
JOBS = int_option("jobs", "20000")
# --only=relay or --only=bullmq: one side's throughput run (for profiling); --only=delay: the
# 20 ms case alone, both sides and the model's pace.
ONLY = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
if ONLY not in ("", "relay", "relay_off", "bullmq", "bullmq_model", "bullmq_work", "delay",
                "latency", "oneshot", "sizes"):
    usage_error(f"--only={ONLY}: not one of the runs")
# --input-bytes=N: the main runs' input size (the by-size runs have their own, SIZES).
INPUT_BYTES = int_option("input-bytes", "1024")
# The by-size runs: (input bytes, jobs) — fewer jobs as they grow (a run writes them all to
# storage, and BullMQ's producer holds them in Redis).
SIZES = [(4 << 10, 5000), (16 << 10, 5000), (32 << 10, 5000), (64 << 10, 5000), (256 << 10, 2000),
         (1 << 20, 1000)]


def size_name(n):
    return (f"{n >> 20} MiB" if n % (1 << 20) == 0 else
            f"{n >> 10} KiB" if n % 1024 == 0 else f"{n} B")


INPUT_NAME = size_name(INPUT_BYTES)
RELAYS = int_option("relays", "1")
# Relay runs twice: as configured by default (relay.take_ahead 100ms: the next job taken while
# the model runs one, the Redis round trip between two jobs hidden), and with it off.
TAKE_AHEAD_OFF = "0s"
# --concurrency=C: each relay of the throughput run keeps C jobs in hand (relay.concurrency).
CONCURRENCY = int_option("concurrency", "4")
# --results=DIR: the figures also written to DIR/queue_bench.md (with the machine described)
# and DIR/queue_bench.png (gnuplot).
RESULTS = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--results=")), "")
# --storage=DIR: where Relay's objects and BullMQ-doing-Relay's-work's files go (tmpfs by
# default; a folder on a disk measures what the filesystem costs, as a node's local disk would).
# --storage=s3: Relay's objects in the S3 test server (tests/s3/server.js: s3rver behind a SigV4
# check, on loopback), as production stores them; BullMQ doing Relay's work keeps its files on
# tmpfs then. Its process is not counted in the system's CPU (S3 is another machine).
STORAGE = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--storage=")), "/dev/shm")
S3 = STORAGE == "s3"
# --s3-core: with --storage=s3, the S3 test server alone on the last core and Relay's processes
# on the others (as S3 is another machine: its one JavaScript thread does not share a core with
# what it serves). Meant for the delay case; the throughput runs then have a core less.
S3_CORE = S3 and "--s3-core" in sys.argv
STORAGE_NAME = ("tmpfs" if STORAGE == "/dev/shm" else "the S3 test server" if S3 else
                f"storage in {STORAGE}")


def run_flag(option, label):
    """Whether --OPTION was given; if so, the Relay runs' label says so (", LABEL")."""
    global STORAGE_NAME
    given = option in sys.argv
    if given:
        STORAGE_NAME += ", " + label
    return given


# --encryption: Relay's inputs and results encrypted at rest (encryption.enabled, a random
# AES-256 key per run), as a deployment that turns it on runs. BullMQ's side has no counterpart.
ENCRYPTION = run_flag("--encryption", "encrypted")
WEBHOOKS = run_flag("--webhooks", "a webhook per job")
# --webhook-delay-ms=N: the receiver answers each webhook N ms late (a backend far away).
WEBHOOK_DELAY_MS = 0
if any(a.startswith("--webhook-delay-ms=") for a in sys.argv):
    if not WEBHOOKS:
        usage_error("--webhook-delay-ms goes with --webhooks")
    WEBHOOK_DELAY_MS = int_option("webhook-delay-ms", "1")
    STORAGE_NAME += f" {WEBHOOK_DELAY_MS} ms away"
IDEMPOTENCY_KEYS = run_flag("--idempotency-keys", "Idempotency-Keys")
AUTH = run_flag("--auth", "API keys")
QUOTAS = run_flag("--quotas", "quotas")
# The API key wrk sends with --auth (the gateway knows its SHA-256).
API_KEY = "bench-" + base64.b16encode(os.urandom(16)).decode().lower()
# --delay-ms=D --workers=W: the "20 ms case" with jobs of D ms on W workers (W relays of
# concurrency 1, a BullMQ worker of concurrency W); its jobs fill ~10 s at the ideal rate W / D.
DELAY_MS = int_option("delay-ms", "20")
WORKERS = int_option("workers", "4")
if "--s3-core" in sys.argv and not S3:
    usage_error("--s3-core goes with --storage=s3")
IDEAL = WORKERS * 1000 / DELAY_MS  # jobs/s
DELAY_JOBS = max(200, min(20000, round(IDEAL * 10)))
LATENCY_RATE, LATENCY_JOBS = 100, 1000
ONESHOT_JOBS = 200
BULLMQ_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bullmq")
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


def switches(pid):
    """Context switches (voluntary and not) of every live thread of a process: each is a sleep
    and a wake-up, the kernel's share of a job that waits on a round trip."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:  # a thread that just ended
            pass
    return total


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

    def __init__(self, redis_port, redis_pid, system, load, apart=()):
        """apart: measured, not counted in the system's CPU (the S3 test server)."""
        self.port, self.redis_pid, self.system, self.load = redis_port, redis_pid, system, load
        self.apart = list(apart)

    def start(self):
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self.cpu0 = {p.pid: cpu_seconds(p.pid) for p in self.system + self.load + self.apart}
        self.redis0 = cpu_seconds(self.redis_pid)
        self.cs0 = {p.pid: switches(p.pid) for p in self.system}
        self.cs0[self.redis_pid] = switches(self.redis_pid)
        self.calls0, self.reads0 = redis_counters(self.port)

    def until(self, load, watched, finished, jobs):
        """With the load generator just started: its CPU counted from 0, the last readings of
        `watched` kept (processes that may exit before the end), until finished() returns; then
        the measure stops. finished() may return when the last job ended (time.time()'s clock):
        the rate is counted to then."""
        self.load = [load]
        self.cpu0[load.pid] = 0.0
        done = [False]
        t = threading.Thread(target=watch_cpu, args=(self, watched, lambda: done[0]))
        t.start()
        try:
            return self.stop(jobs, finished())
        finally:
            done[0] = True
            t.join()

    def stop(self, jobs, ended=None):
        elapsed = ended - self.t0_wall if ended else time.monotonic() - self.t0
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
        cs = {}
        for p in [*self.system, None]:
            pid = p.pid if p else self.redis_pid
            name = "redis-server" if p is None else os.path.basename(
                p.args[0] if p.args[0] != "node" else p.args[1])
            try:
                cs[name] = cs.get(name, 0.0) + (switches(pid) - self.cs0[pid]) / jobs
            except FileNotFoundError:
                pass
        calls, reads = redis_counters(self.port)
        return {
            "jobs_per_s": jobs / elapsed,
            "cpu_us_per_job": (spent(self.system) + redis_cpu) / jobs * 1e6,
            "redis_cpu_us_per_job": redis_cpu / jobs * 1e6,
            "load_cpu_us_per_job": spent(self.load) / jobs * 1e6,
            "commands_per_job": (calls - self.calls0) / jobs,
            "reads_per_job": (reads - self.reads0) / jobs,
            "seconds": elapsed,
            # (the share of one core it kept busy: near 1, it set the pace)
            "apart": {os.path.basename(p.args[1] if p.args[0] == "node" else p.args[0]):
                      (spent([p]) / jobs * 1e6, spent([p]) / elapsed) for p in self.apart},
            "parts": parts,
            "switches": cs,
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


def noop_model(delay_ms=0):
    """The no-op model server (answering after delay_ms), listening: (process, port). Without
    the input's SHA-256 in its answer (which the tests use): a no-op model does no work per byte,
    and hashing cost it ~0.5 ms per MiB, counted in Relay's system and BullMQ + the model's."""
    port = free_port()
    model = start([f"{BIN}/relay-inference-noop", "--listen", f"127.0.0.1:{port}",
                   "--delay-ms", str(delay_ms), "--no-digest"], stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL)
    wait_port(port)
    return model, port


class RelayStack:
    """The gateway (tmpfs storage), the no-op model (answering after delay_ms) and the relays
    (--relays, each of --concurrency) with --max-jobs 0, on the given redis-server."""

    def __init__(self, redis_port, work, delay_ms=0, relays=None, concurrency=None,
                 take_ahead=None):
        relays = RELAYS if relays is None else relays
        concurrency = CONCURRENCY if concurrency is None else concurrency
        self.storage = tempfile.mkdtemp(prefix="relay-queue-bench-",
                                        dir="/dev/shm" if S3 else STORAGE)
        self.gw_port = free_port()
        self.model, model_port = noop_model(delay_ms)
        common = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{redis_port}",
                  "RELAY_STORAGE_URL": f"file://{self.storage}"}
        if ENCRYPTION:
            common = {**common, "RELAY_ENCRYPTION_ENABLED": "true",
                      "RELAY_ENCRYPTION_ACTIVE_KEY": "bench",
                      "RELAY_ENCRYPTION_KEY_BENCH": base64.b64encode(os.urandom(32)).decode()}
        log = open(os.path.join(work, "relay-side.log"), "ab")
        self.s3 = None
        self.cores = os.sched_getaffinity(0)
        if S3_CORE:
            # (This process first: everything it starts from now on, wrk too, inherits it.)
            os.sched_setaffinity(0, set(range(os.cpu_count() - 1)))
        if S3:
            s3_port = free_port()
            self.s3 = start(["node", os.path.join(ROOT, "tests", "s3", "server.js"), "--port",
                             str(s3_port), "--dir", self.storage, "--bucket", "bench"],
                            stdout=subprocess.DEVNULL, stderr=log)
            wait_port(s3_port)
            if S3_CORE:
                for task in os.listdir(f"/proc/{self.s3.pid}/task"):
                    os.sched_setaffinity(int(task), {os.cpu_count() - 1})
            common = {**common, "RELAY_STORAGE_URL": "s3://bench/jobs",
                      "RELAY_STORAGE_S3_ENDPOINT": f"http://127.0.0.1:{s3_port}",
                      "RELAY_STORAGE_S3_PATH_STYLE": "true", "RELAY_STORAGE_S3_REGION": "us-east-1",
                      "AWS_ACCESS_KEY_ID": "relaytestkey",
                      "AWS_SECRET_ACCESS_KEY": "relaytestsecret"}
        hooks = {}
        self.receiver = None
        if WEBHOOKS:
            self.receiver, receiver_port = noop_model(WEBHOOK_DELAY_MS)
            self.hook_url = f"http://127.0.0.1:{receiver_port}/hook"
            hooks = {"RELAY_WEBHOOKS_SECRET": "whsec_" + base64.b64encode(os.urandom(24)).decode(),
                     "RELAY_WEBHOOKS_ALLOW_PRIVATE": "true"}  # (the receiver is on loopback)
        auth = {"RELAY_AUTH_ENABLED": "false"}
        if AUTH:
            import hashlib
            auth = {"RELAY_AUTH_API_KEYS": hashlib.sha256(API_KEY.encode()).hexdigest() + "=bench"}
        if QUOTAS:  # (a quota that never refuses: what it costs, not what it stops)
            auth = {**auth, "RELAY_QUOTAS_MAX_PENDING": "100000000",
                    "RELAY_QUOTAS_SUBMITS_PER_MINUTE": "1000000000"}
        self.gateway = start([f"{BIN}/relay-gateway"], {
            **common, **hooks, **auth, "RELAY_SERVER_LISTEN": f"127.0.0.1:{self.gw_port}",
            "RELAY_SERVICE_TYPES": "echo=m1"},
            stdout=log, stderr=log)
        wait_port(self.gw_port)
        self.relay_env = {**os.environ, **common, "RELAY_MODEL": "m1",
                          "RELAY_INFERENCE_URL": f"http://127.0.0.1:{model_port}"}
        if take_ahead:
            self.relay_env["RELAY_RELAY_TAKE_AHEAD"] = take_ahead
        self.log = log
        self.relays = [start([f"{BIN}/relay", "--max-jobs", "0", "--concurrency", str(concurrency)],
                             {**self.relay_env, "RELAY_QUEUE_POP_TIMEOUT": "1h"},
                             stdout=log, stderr=log) for _ in range(relays)]
        time.sleep(0.5)  # (relays waiting in BLMOVE; nothing to measure yet)

    def processes(self):
        return [self.gateway, self.model, *self.relays]

    def webhooks_after(self, jobs, last_job):
        """Once the jobs are done (the last at last_job, time.time()'s clock): waits (at most a
        minute) until the gateway attempted a webhook per job; (seconds from the last job to
        then, attempts, deliveries put back)."""
        import urllib.request
        t0 = time.monotonic()

        def total(text, name):
            return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name))
        while True:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.gw_port}/metrics").read().decode()
            attempts = total(text, "relay_webhook_attempts_total")
            if attempts >= jobs or time.monotonic() - t0 > 60:
                return (time.time() - last_job, attempts,
                        total(text, "relay_webhook_deferrals_total"))
            time.sleep(0.02)

    def stop(self):
        for p in self.processes() + [p for p in (self.s3, self.receiver) if p]:
            p.terminate()
            p.wait()
        shutil.rmtree(self.storage, ignore_errors=True)
        os.sched_setaffinity(0, self.cores)


def wrk_script(work, jobs, size, callback=None, keys=False):
    """wrk's script for the throughput runs: raw bodies of `size` bytes POSTed to /jobs/echo, N
    in all (each with a callback_url, if given; with an Idempotency-Key of its own, if keys)."""
    script = os.path.join(work, "post.lua")
    query = "filename=in.bin" + (f"&callback_url={urllib.parse.quote(callback, safe='')}"
                                 if callback else "")
    with open(script, "w") as f:
        f.write(f"""
wrk.method = "POST"
wrk.path = "/jobs/echo?{query}"
wrk.body = string.rep("x", {size})
wrk.headers["Content-Type"] = "application/octet-stream"
{f'wrk.headers["Authorization"] = "Bearer {API_KEY}"' if AUTH else ""}
{KEYED if keys else ""}
-- Each of the 2 threads submits its half; the connections' requests in flight when it stops
-- (at most 64 in all) make a few jobs more, which only count against the side measured.
local answered, limit = 0, {jobs // 2}
function response(status, headers, body)
  answered = answered + 1
  if answered >= limit then wrk.thread:stop() end
end
""")
    return script


# A request function giving each submission a key of its own (a thread's Lua state: its own
# table address, so the two threads' keys differ).
KEYED = """local sent, thread_id = 0, tostring({}):sub(8)
function request()
  sent = sent + 1
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Idempotency-Key"] = "bench-" .. thread_id .. "-" .. sent
  return wrk.format(nil, nil, headers, wrk.body)
end"""


def wrk_load(script, port):
    """wrk running the script against the server on port (2 threads, 64 connections)."""
    return start(["wrk", "-t2", "-c64", "-d600s", "-s", script, f"http://127.0.0.1:{port}"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def relay_side(redis_port, redis_pid, work, jobs=None, delay_ms=0, size=INPUT_BYTES,
               take_ahead=None):
    jobs = jobs or JOBS
    # (The delay case compares with WORKERS workers: as many relays of one job each.)
    stack = RelayStack(redis_port, work, delay_ms, relays=WORKERS if delay_ms else None,
                       concurrency=1 if delay_ms else None, take_ahead=take_ahead)
    script = wrk_script(work, jobs, size, stack.hook_url if WEBHOOKS and not delay_ms else None,
                        IDEMPOTENCY_KEYS and not delay_ms)
    measure = Measure(redis_port, redis_pid, stack.processes(), [],
                      [stack.s3] if stack.s3 else [])
    if os.environ.get("RELAY_BENCH_SLOWLOG"):
        redis_cli(redis_port, "CONFIG", "SET", "slowlog-log-slower-than", "0")
        redis_cli(redis_port, "CONFIG", "SET", "slowlog-max-len", "5000")
    measure.start()
    load = wrk_load(script, stack.gw_port)
    poll = RedisSocket(redis_port)
    # Once as many entries were added as jobs ran (ever added, not XLEN: the stream is capped,
    # a long run outgrows it), the time of the last, in ms since the epoch (its id's); else 0.
    # Polled every 200 ms: the end's time comes from the id, not from the poll, and a poll every
    # 20 ms had been a sixth of Relay's Redis reads per job (0.4 of 2.4) in the 20 ms case
    # (BullMQ's worker counts its own jobs: nothing polls its Redis).
    ended = ("if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end "
             "local i = redis.call('XINFO', 'STREAM', KEYS[1]) local n, last = 0, '0' "
             "for k = 1, #i, 2 do if i[k] == 'entries-added' then n = i[k + 1] "
             "elseif i[k] == 'last-generated-id' then last = i[k + 1] end end "
             "if n < tonumber(ARGV[1]) then return 0 end "
             "return tonumber(string.match(last, '^%d+'))")

    hooks = []

    def finished():
        while not (end_ms := poll.integer("EVAL", ended, "1", "jobs:m1:events", str(jobs))):
            time.sleep(0.2)
        if WEBHOOKS and not delay_ms:
            # A job with a callback is done when its webhook went out: the measure (rate and
            # CPU) runs to the last webhook. (It ran to the last job, and left out the work of
            # the webhooks still to go then — most of them, with two at a time to one receiver.)
            hooks.append(stack.webhooks_after(jobs, end_ms / 1000))
            return time.time()
        return end_ms / 1000
    result = measure.until(load, [load], finished, jobs)
    if os.environ.get("RELAY_BENCH_SLOWLOG"):
        print(redis_cli(redis_port, "SLOWLOG", "GET", "5000"), file=open("/tmp/slowlog.txt", "w"))
    if os.environ.get("RELAY_BENCH_COMMANDSTATS"):
        print(redis_cli(redis_port, "INFO", "commandstats"), file=sys.stderr)
    # Its threads stopped at their share; wrk itself would sleep out -d.
    load.terminate()
    load.wait()
    if hooks:
        result["webhooks"] = hooks[0]
    stack.stop()
    return result


def relay_latency(redis_port, work, mode="relay"):
    """mode relay: submit, then long-poll; relay-wait: the submission waits (Prefer: wait)."""
    stack = RelayStack(redis_port, work)
    out = subprocess.run(["node", "latency.js", mode, f"http://127.0.0.1:{stack.gw_port}",
                          str(LATENCY_RATE), str(LATENCY_JOBS)], cwd=BULLMQ_DIR,
                         env={**os.environ, **({"RELAY_API_KEY": API_KEY} if AUTH else {})},
                         capture_output=True, text=True, check=True).stdout
    stack.stop()
    return json.loads(out)


def model_pace(delay_ms, workers):
    """The no-op model's own time per "delay_ms" request (its timer fires late by a fraction of a
    millisecond, more on a busy VM) with `workers` requests at a time, each connection kept alive
    as a relay's is: what that many workers could do at most, with nothing of Relay's in between.
    Mean ms per request per worker. Measured by wrk (-t1 -c workers, for ~3 s and at least 100
    requests a connection): a client in Python costs ~0.3 ms a request itself, which at 1 ms made
    the "most" a third too low and Relay look faster than the model alone (120% of it)."""
    model, port = noop_model(delay_ms)
    tmp = tempfile.TemporaryDirectory(prefix="relay-bench-pace-")
    script = os.path.join(tmp.name, "pace.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\nwrk.path = "/predict"\n'
                'wrk.headers["Content-Type"] = "multipart/form-data; boundary=b"\n'
                'wrk.body = "--b\\r\\nContent-Disposition: form-data; name=\\"file\\"; '
                'filename=\\"in.bin\\"\\r\\nContent-Type: application/octet-stream\\r\\n\\r\\n" '
                '.. string.rep("x", 1024) .. "\\r\\n--b--\\r\\n"\n')
    seconds = max(3, math.ceil(100 * delay_ms / 1000))
    out = subprocess.run(["wrk", "-t1", f"-c{workers}", f"-d{seconds}s", "-s", script,
                          f"http://127.0.0.1:{port}/predict"],
                         capture_output=True, text=True, check=True).stdout
    model.terminate()
    model.wait()
    tmp.cleanup()
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("the no-op model failed requests under wrk:\n" + out)
    rps = float(re.search(r"Requests/sec:\s*([0-9.]+)", out).group(1))
    return workers * 1000 / rps


def relay_oneshot(redis_port, work):
    """A relay process per job (as under a KEDA ScaledJob), timed from its start to its exit
    with the job done: the median of ONESHOT_JOBS."""
    import http.client
    stack = RelayStack(redis_port, work, relays=0)
    conn = http.client.HTTPConnection("127.0.0.1", stack.gw_port)
    walls = []
    for _ in range(ONESHOT_JOBS):
        conn.request("POST", "/jobs/echo?filename=in.bin", body=b"x" * 1024,
                     headers={"Content-Type": "application/octet-stream"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 202, resp.status
        t0 = time.monotonic()
        code = subprocess.run([f"{BIN}/relay"], env={**stack.relay_env, "RELAY_LOG_LEVEL": "warn"},
                              stdout=stack.log, stderr=stack.log).returncode
        walls.append((time.monotonic() - t0) * 1000)
        assert code == 0, code
    conn.close()
    stack.stop()
    walls.sort()
    # What launching a process this way costs by itself (this Python's fork and exec, and the
    # wait), counted in every figure above: /bin/true, started the same way as many times.
    spawns = []
    for _ in range(ONESHOT_JOBS):
        t0 = time.monotonic()
        subprocess.run(["/bin/true"], env=stack.relay_env, stdout=stack.log, stderr=stack.log)
        spawns.append((time.monotonic() - t0) * 1000)
    spawns.sort()
    return {"median_ms": walls[len(walls) // 2], "p99_ms": walls[int(len(walls) * 0.99)],
            "spawn_ms": spawns[len(spawns) // 2]}


def bullmq_install():
    if not os.path.isdir(os.path.join(BULLMQ_DIR, "node_modules", "bullmq")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=BULLMQ_DIR,
                       check=True)


def worker_done(worker):
    """Waits for the BullMQ worker's "done" line (all its jobs completed)."""
    assert worker.stdout.readline().startswith("done"), "the BullMQ worker ended early"


def bullmq_side(redis_port, redis_pid, work, jobs=None, delay_ms=0, concurrency=64, model=False,
                size=INPUT_BYTES):
    """BullMQ's producer and worker; with model, the worker POSTs each job to the no-op model
    (whose CPU then counts in the system's, as Relay's does)."""
    jobs = jobs or JOBS
    bullmq_install()
    argv = ["node", "worker.js", str(jobs), str(concurrency), str(redis_port), str(delay_ms)]
    system = []
    if model:
        model, model_port = noop_model()
        system.append(model)
        argv.append(f"http://127.0.0.1:{model_port}")
    worker = start(argv, cwd=BULLMQ_DIR, stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    system.insert(0, worker)
    measure = Measure(redis_port, redis_pid, system, [])
    measure.start()
    producer = start(["node", "producer.js", str(jobs), "64", str(redis_port), str(size)],
                     cwd=BULLMQ_DIR, stdout=subprocess.DEVNULL)
    result = measure.until(producer, [producer, worker],
                           lambda: worker_done(worker), jobs)
    producer.wait()
    worker.wait()
    for p in system[1:]:
        p.terminate()
        p.wait()
    return result


def bullmq_work_side(redis_port, redis_pid, work, jobs=None):
    """BullMQ doing Relay's work: api.js (an HTTP API storing each input as a file on tmpfs and
    queuing its job), the worker (concurrency 64) reading the input, POSTing it to the no-op
    model and storing its answer as a file; the same wrk load as Relay's. Its system: api.js,
    the worker, the model and Redis."""
    jobs = jobs or JOBS
    bullmq_install()
    folder = tempfile.mkdtemp(prefix="bullmq-queue-bench-", dir="/dev/shm" if S3 else STORAGE)
    api_port = free_port()
    model, model_port = noop_model()
    worker = start(["node", "worker.js", str(jobs), "64", str(redis_port), "0",
                    f"http://127.0.0.1:{model_port}", folder], cwd=BULLMQ_DIR,
                   stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    api = start(["node", "api.js", str(api_port), str(redis_port), folder], cwd=BULLMQ_DIR,
                stdout=subprocess.PIPE, text=True)
    assert api.stdout.readline().strip() == "ready"
    script = wrk_script(work, jobs, INPUT_BYTES)
    measure = Measure(redis_port, redis_pid, [api, worker, model], [])
    measure.start()
    load = wrk_load(script, api_port)
    result = measure.until(load, [load],
                           lambda: worker_done(worker), jobs)
    load.terminate()
    load.wait()
    worker.wait()
    for p in (api, model):
        p.terminate()
        p.wait()
    shutil.rmtree(folder, ignore_errors=True)
    return result


def bullmq_latency(redis_port, work):
    bullmq_install()
    worker = start(["node", "worker.js", str(LATENCY_JOBS), "64", str(redis_port)],
                   cwd=BULLMQ_DIR, stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "ready"
    out = subprocess.run(["node", "latency.js", "bullmq", str(redis_port), str(LATENCY_RATE),
                          str(LATENCY_JOBS)], cwd=BULLMQ_DIR, capture_output=True, text=True,
                         check=True).stdout
    worker.wait()
    return json.loads(out)


def machine():
    """What the figures were measured on."""
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    mem = next((int(l.split()[1]) // 1024 // 1024 for l in open("/proc/meminfo")
                if l.startswith("MemTotal")), 0)
    return (f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores ({cpu}), {mem} GiB, "
            f"{first(['uname', '-sr'])}; {first(['redis-server', '--version'])}; node "
            f"{first(['node', '--version'])}; every process on the same machine, loopback "
            f"only.\n")


def chart(results, sizes, path):
    """The figures as a PNG (gnuplot): throughput, CPU per job, the 20 ms case, latency, and
    Relay / BullMQ by input size."""
    data = os.path.join(os.path.dirname(path), "queue_bench.dat")
    ratios = os.path.join(os.path.dirname(path), "queue_bench_sizes.dat")
    with open(ratios, "w") as f:
        f.write("# input-KiB jobs/s-ratio cpu-ratio\n")
        for size, _, r in sizes:
            b, rl = r["bullmq"], r["relay"]
            f.write(f"{size / 1024:g} {rl['jobs_per_s'] / b['jobs_per_s']:.3f} "
                    f"{rl['cpu_us_per_job'] / b['cpu_us_per_job']:.3f}\n")
    t, d = results["throughput"], results["delay"]
    lat = results["latency"]
    # The middle series, BullMQ doing Relay's work, is measured for throughput and CPU only
    # ("?": gnuplot's missing value).
    work = t.get("bullmq_work", {})
    rows = [("throughput", t, "jobs_per_s", "{:.0f}"), ("cpu", t, "cpu_us_per_job", "{:.0f}"),
            ("delay", d, "jobs_per_s", "{:.1f}"), ("p50", lat, "p50_ms", "{:.2f}"),
            ("p99", lat, "p99_ms", "{:.2f}")]
    with open(data, "w") as f:
        f.write("# panel BullMQ BullMQ-doing-Relay's-work Relay\n")
        for name, src, key, fmt in rows:
            mid = fmt.format(work[key]) if src is t and key in work else "?"
            f.write(f"{name} {fmt.format(src['bullmq'][key])} {mid} "
                    f"{fmt.format(src['relay'][key])}\n")
    plots = [("throughput", f"{INPUT_NAME} jobs/s end to end (higher is better)"),
             ("cpu", "CPU-µs per job, all processes (lower is better)"),
             ("delay", f"jobs/s, {WORKERS} workers x {DELAY_MS} ms (ideal {IDEAL:.4g})"),
             ("p50", "p50 ms submit to completion, 100 jobs/s"),
             ("p99", "p99 ms submit to completion, 100 jobs/s")]
    script = [f'set terminal pngcairo size 1800,380 font ",10"', f'set output "{path}"',
              "set style data histograms", "set style histogram clustered gap 1",
              "set style fill solid 0.8 border -1", "set key outside bottom center horizontal",
              "set yrange [0:*]", 'set datafile missing "?"',
              "unset xtics", "set grid ytics", f"set multiplot layout 1,{len(plots) + 1}"]
    for row, title in plots:
        script += [f'set title "{title}"',
                   f'plot "< grep ^{row} {data}" using 2 title "BullMQ 5.81.5" lc rgb "#9e9e9e", '
                   f'"" using 3 title "BullMQ doing Relay\'s work" lc rgb "#e0a040", '
                   f'"" using 4 title "Relay" lc rgb "#1565c0"']
    script += ['set title "Relay / BullMQ by input size (KiB)"', "set logscale x 2",
               "set xtics 4 nomirror", "set key outside bottom center vertical",
               f'plot "{ratios}" using 1:2 with linespoints lw 2 lc rgb "#1565c0" '
               'title "jobs/s (goal >= 1)", "" using 1:3 with linespoints lw 2 dt 2 '
               'lc rgb "#c62828" title "CPU per job (goal <= 1)", 1 with lines lc rgb "#616161" '
               'notitle']
    script.append("unset multiplot")
    # (Its warnings about the middle series' missing values are expected: shown only on failure.)
    plot = subprocess.run(["gnuplot"], input="\n".join(script), text=True, capture_output=True)
    if plot.returncode != 0:
        sys.exit(f"gnuplot failed: {plot.stderr}")
    os.remove(data)
    os.remove(ratios)


def main():
    work = tempfile.mkdtemp(prefix="queue-bench-")
    port = free_port()
    redis = start(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                   "--dir", work], stdout=subprocess.DEVNULL)
    wait_port(port)
    results = {"throughput": {}, "delay": {}, "latency": {}, "sizes": {}}

    def fresh():
        redis_cli(port, "FLUSHALL")
        redis_cli(port, "CONFIG", "RESETSTAT")

    try:
        if ONLY == "delay":
            # The 20 ms case alone, both sides, and the model's own pace.
            fresh()
            results["delay"]["bullmq"] = bullmq_side(port, redis.pid, work, DELAY_JOBS, DELAY_MS, WORKERS)
            fresh()
            results["delay"]["relay"] = relay_side(port, redis.pid, work, DELAY_JOBS, DELAY_MS)
            fresh()
            results["delay"]["relay_off"] = relay_side(port, redis.pid, work, DELAY_JOBS, DELAY_MS,
                                                         take_ahead=TAKE_AHEAD_OFF)
            results["model_pace_ms"] = model_pace(DELAY_MS, WORKERS)
        if ONLY == "latency":
            # The latency runs alone: BullMQ, Relay long-polling, Relay's submission waiting.
            for side, mode in (("bullmq", None), ("relay", "relay"), ("relay_wait", "relay-wait")):
                fresh()
                results["latency"][side] = (bullmq_latency(port, work) if side == "bullmq" else
                                            relay_latency(port, work, mode=mode))
        for side in ("bullmq", "bullmq_model", "bullmq_work", "relay", "relay_off"):
            if ONLY in ("oneshot", "sizes", "delay", "latency"):
                break
            if ONLY and ONLY != side:
                continue
            fresh()
            if side == "bullmq_model":
                # Not the goal's reference: what a queue library bolted onto a model server
                # costs, beside it (the model's HTTP request is work Relay does per job too).
                results["throughput"][side] = bullmq_side(port, redis.pid, work, model=True)
                continue
            if side == "bullmq_work":
                # Nor this: BullMQ doing the work Relay does per job (an HTTP API, the input and
                # the result stored as files, the model over HTTP), as a team would bolt it on.
                results["throughput"][side] = bullmq_work_side(port, redis.pid, work)
                continue
            if side == "relay_off":
                # Relay again, its relays taking each job once the model answered the last.
                results["throughput"][side] = relay_side(port, redis.pid, work,
                                                         take_ahead=TAKE_AHEAD_OFF)
                continue
            run = bullmq_side if side == "bullmq" else relay_side
            results["throughput"][side] = run(port, redis.pid, work)
            if ONLY:
                continue  # profiling one side: the throughput run only
            fresh()
            if side == "bullmq":
                results["delay"][side] = bullmq_side(port, redis.pid, work, DELAY_JOBS, DELAY_MS, WORKERS)
            else:
                results["delay"][side] = relay_side(port, redis.pid, work, DELAY_JOBS, DELAY_MS)
                fresh()
                results["delay"]["relay_off"] = relay_side(port, redis.pid, work, DELAY_JOBS,
                                                             DELAY_MS, take_ahead=TAKE_AHEAD_OFF)
                results["model_pace_ms"] = model_pace(DELAY_MS, WORKERS)
            fresh()
            results["latency"][side] = (bullmq_latency if side == "bullmq" else relay_latency)(
                port, work)
            if side == "relay":
                fresh()
                results["latency"]["relay_wait"] = relay_latency(port, work, mode="relay-wait")
        if not ONLY or ONLY == "sizes":
            for size, jobs in SIZES:
                results["sizes"][size] = {}
                for side, run in (("bullmq", bullmq_side), ("relay", relay_side)):
                    fresh()
                    results["sizes"][size][side] = run(port, redis.pid, work, jobs, size=size)
        if not ONLY or ONLY == "oneshot":
            fresh()
            results["oneshot"] = relay_oneshot(port, work)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        shutil.rmtree(work, ignore_errors=True)
    lines = []

    def out(text=""):
        print(text)
        lines.append(text)

    def by_size():
        # The main run's inputs first (its job count), then the by-size runs.
        rows = []
        t = results["throughput"]
        if "bullmq" in t and "relay" in t:
            rows.append((INPUT_BYTES, JOBS, t))
        rows += [(size, jobs, results["sizes"][size]) for size, jobs in SIZES]
        out("\nBy input size: Relay beside BullMQ (the goal's reference), the same two "
            "configurations; CPU-µs per job of the system, Redis's part in brackets\n")
        out("| input | jobs | BullMQ jobs/s | Relay jobs/s | Relay / BullMQ | BullMQ CPU-µs/job "
            "| Relay CPU-µs/job | Relay / BullMQ |")
        out("|---|---|---|---|---|---|---|---|")
        for size, jobs, r in rows:
            b, rl = r["bullmq"], r["relay"]
            out(f"| {size_name(size)} | {jobs:,} | {b['jobs_per_s']:,.0f} | {rl['jobs_per_s']:,.0f} "
                f"| {rl['jobs_per_s'] / b['jobs_per_s']:.2f}x | {b['cpu_us_per_job']:,.0f} "
                f"({b['redis_cpu_us_per_job']:,.0f}) | {rl['cpu_us_per_job']:,.0f} "
                f"({rl['redis_cpu_us_per_job']:,.0f}) | "
                f"{rl['cpu_us_per_job'] / b['cpu_us_per_job']:.2f}x |")
        return rows

    if ONLY == "sizes":
        by_size()
        return
    def by_process(runs, short=False):
        out("\nCPU-µs per job by process (context switches per job):")
        for side, r in runs.items():
            name = names[side].split(' (')[0] if short else names[side]
            out(f"  {name}: " + ", ".join(
                f"{k} {v:.0f} ({r['switches'].get(k, 0):.2f})" for k, v in r["parts"].items()))

    def delay_table():
        d = results["delay"]
        out(f"\n{DELAY_JOBS} jobs of {DELAY_MS} ms \"inference\", {WORKERS} workers (ideal: "
            f"{WORKERS} / {DELAY_MS} ms = {IDEAL:.4g} jobs/s)\n")
        out("| | jobs/s | of ideal | CPU-µs/job, system | Redis reads/job |")
        out("|---|---|---|---|---|")
        for side, r in d.items():
            out(f"| {names[side].split(' (')[0]} | {r['jobs_per_s']:.1f} | "
                f"{r['jobs_per_s'] / IDEAL:.1%} | {r['cpu_us_per_job']:.0f} | "
                f"{r['reads_per_job']:.2f} |")
        by_process(d, short=True)
        for side, r in d.items():
            for name, (us, share) in r.get("apart", {}).items():
                out(f"\n{names[side].split(' (')[0]}: {name} (not counted) {us:.0f} CPU-µs per "
                    f"job, {share:.0%} of a core")
        pace = results["model_pace_ms"]
        most = WORKERS * 1000 / pace
        out(f"\nThe no-op model alone takes {pace:.2f} ms per \"{DELAY_MS} ms\" request here (its "
            f"timer fires late): {WORKERS} workers can do at most {most:.1f} jobs/s with it; Relay "
            f"did {d['relay']['jobs_per_s'] / most:.1%} of that, with relay.take_ahead off "
            f"{d['relay_off']['jobs_per_s'] / most:.1%}.")

    def latency_table():
        out(f"\nSubmit-to-completion latency at {LATENCY_RATE} jobs/s, {LATENCY_JOBS} jobs (client "
            f"observed: BullMQ by QueueEvents, Relay by long-poll, or by the submission's own "
            f"answer with Prefer: wait)\n")
        out("| | p50 ms | p99 ms |")
        out("|---|---|---|")
        for side, r in results["latency"].items():
            out(f"| {names[side].split(' (')[0]} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")

    if ONLY == "oneshot":
        o = results["oneshot"]
        out(f"Relay one-shot (a relay process per job), {ONESHOT_JOBS} jobs: median "
            f"{o['median_ms']:.2f} ms (target <= 5), p99 {o['p99_ms']:.2f} ms; "
            f"of which launching a process: {o['spawn_ms']:.2f} ms (/bin/true, the same way)")
        return
    names = {"bullmq": "BullMQ 5.81.5 (adds c=64, worker c=64)",
             "bullmq_model": "BullMQ 5.81.5 + the no-op model over HTTP (worker c=64)",
             "bullmq_work": f"BullMQ 5.81.5 doing Relay's work (HTTP API, input and result files, the model over HTTP; worker c=64; {'tmpfs' if S3 else STORAGE_NAME})", "relay_wait": "Relay, the submission waiting (Prefer: wait)", "relay_off": f"Relay with relay.take_ahead {TAKE_AHEAD_OFF} (the same relays, each slot taking its next job once the model answered the last)", "relay": f"Relay ({RELAYS} relay{'s' if RELAYS != 1 else ''}" + (f" of concurrency {CONCURRENCY}" if CONCURRENCY > 1 else "") + f", {STORAGE_NAME})"}
    if ONLY == "delay":
        delay_table()
        return
    if ONLY == "latency":
        latency_table()
        return
    out(f"\n{JOBS} jobs, {INPUT_NAME} inputs, one redis-server (persistence off), {os.cpu_count()} cores\n")
    out("| | jobs/s end to end | CPU-µs/job, system | Redis CPU-µs/job | Redis commands/job "
          "| Redis reads/job | load generator CPU-µs/job |")
    out("|---|---|---|---|---|---|---|")
    for side, r in results["throughput"].items():
        out(f"| {names[side]} | {r['jobs_per_s']:,.0f} | {r['cpu_us_per_job']:.0f} | "
              f"{r['redis_cpu_us_per_job']:.0f} | {r['commands_per_job']:.2f} | "
              f"{r['reads_per_job']:.2f} | {r['load_cpu_us_per_job']:.0f} |")
    by_process(results["throughput"])
    for side, r in results["throughput"].items():
        if "webhooks" in r:
            secs, attempts, deferred = r["webhooks"]
            out(f"  {names[side].split(' (')[0]}: {attempts:,.0f} webhooks attempted, the last "
                f"{secs:.2f} s after the last job; {deferred:,.0f} put back for a receiver with "
                f"its share in hand")
    if ONLY:
        return
    t = results["throughput"]
    out(f"\nRelay / BullMQ: throughput {t['relay']['jobs_per_s'] / t['bullmq']['jobs_per_s']:.2f}x "
          f"(goal >= 1.0), CPU per job "
          f"{t['relay']['cpu_us_per_job'] / t['bullmq']['cpu_us_per_job']:.2f}x (goal <= 1.0)")
    ra = t["relay_off"]
    out(f"Relay with relay.take_ahead off / BullMQ: throughput "
        f"{ra['jobs_per_s'] / t['bullmq']['jobs_per_s']:.2f}x, CPU per job "
        f"{ra['cpu_us_per_job'] / t['bullmq']['cpu_us_per_job']:.2f}x")
    out(f"Relay / BullMQ + the model over HTTP: throughput "
        f"{t['relay']['jobs_per_s'] / t['bullmq_model']['jobs_per_s']:.2f}x, CPU per job "
        f"{t['relay']['cpu_us_per_job'] / t['bullmq_model']['cpu_us_per_job']:.2f}x (for information)")
    out(f"Relay / BullMQ doing Relay's work: throughput "
        f"{t['relay']['jobs_per_s'] / t['bullmq_work']['jobs_per_s']:.2f}x, CPU per job "
        f"{t['relay']['cpu_us_per_job'] / t['bullmq_work']['cpu_us_per_job']:.2f}x (for information)")
    delay_table()
    latency_table()
    o = results["oneshot"]
    out(f"\nRelay one-shot (a relay process per job), {ONESHOT_JOBS} jobs: median "
          f"{o['median_ms']:.2f} ms (target <= 5), p99 {o['p99_ms']:.2f} ms; "
          f"of which launching a process: {o['spawn_ms']:.2f} ms (/bin/true, the same way)")
    sizes = by_size()
    if RESULTS:
        os.makedirs(RESULTS, exist_ok=True)
        chart(results, sizes, os.path.join(RESULTS, "queue_bench.png"))
        with open(os.path.join(RESULTS, "queue_bench.md"), "w") as f:
            f.write("# Relay beside BullMQ (bench/queue_bench.py)\n\n" + machine() + "\n" +
                    "\n".join(lines) + "\n\n![chart](queue_bench.png)\n")
        out(f"\nresults: {RESULTS}/queue_bench.md, {RESULTS}/queue_bench.png")


if __name__ == "__main__":
    main()
