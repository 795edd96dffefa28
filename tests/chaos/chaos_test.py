#!/usr/bin/python3
"""The whole system under faults at random: two gateway replicas, four relays (two taking jobs
two at a time until stopped, two running one job each and started again after it, as KEDA's
ScaledJob does), Redis with AOF (appendfsync always), the no-op model with jobs of 5 ms to 0.8 s, a webhook receiver
that fails its first answers. While clients submit (spread over the faults' window, with an
Idempotency-Key, priority now and then, each retried on another replica while refused),
long-poll and cancel, this kills relays
(SIGKILL, or SIGTERM), gateways (SIGKILL, or SIGTERM) and Redis (SIGKILL, or SIGSTOP for up to
6 s) and the model server (SIGKILL, started again 0.5–5 s later: relays wait for it, and the
jobs it had under way are tried again — submitted with max_attempts 3), one at a time, each
started again at once. With --redis=sentinel, Redis is a master, a
replica and three sentinels; with --redis=cluster, a cluster of three masters with a replica each;
either way its faults hit a master (a pause of up to 8 s: past 2 s the sentinels, or the cluster,
fail it over), only one with a replica in step (else it would be two faults at once), and writes
wait for a replica (redis.wait_replicas 1). With --storage=s3, inputs and
results are on the S3 test server (tests/s3/server.js), and storage has its outages too, longer
than the blips the relay's retries ride out: the server killed and started again after 2–12 s, or
stopped (SIGSTOP) for 1–15 s — submissions refused meanwhile are retried, relays wait for storage
with their jobs in hand.

Then every promise is checked: every submission accepted once (one id per key); every job ends,
completed with its own input's digest in its result, or cancelled when a cancel was sent (or
failed only after three attempts each cut short by the model's death: inference_unreachable);
one terminal event per job; every job's webhook delivered, signed, under one webhook id;
nothing left in processing; no relay or gateway exited on its own (a one-shot relay only with
exit code 0, after its job); a SIGTERM ends a gateway
with exit code 0 within seconds (its requests answered; a connection kept alive and left idle,
as an ingress's pool holds one to each replica, does not hold it to server.shutdown_timeout),
and a relay with exit code 0 (unless the signal came while it was still being loaded, before
any code of its own ran: then it is killed by it, as any program would be, having said nothing).

RELAY_BIN_DIR: the binaries. RELAY_CHAOS_SEED replays a run's faults (the seed is printed).
--jobs N, --seconds S (of faults), --redis=standalone|sentinel|cluster, --storage=file|s3
(RELAY_TEST_NODE, RELAY_TEST_S3_SERVER: node and tests/s3/server.js, found by default)."""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

BIN = os.environ.get("RELAY_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
RECEIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../webhooks/receiver.py")
NODE = os.environ.get("RELAY_TEST_NODE") or shutil.which("node") or "node"
S3_SERVER = os.environ.get("RELAY_TEST_S3_SERVER") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "../s3/server.js")
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("--jobs", type=int, default=400)
ARGS.add_argument("--seconds", type=float, default=40, help="of faults")
ARGS.add_argument("--redis", choices=["standalone", "sentinel", "cluster"], default="standalone",
                  help="sentinel: two nodes, three sentinels; cluster: three masters, a replica "
                       "each. Faults hit a master; a pause past 2 s is a failover")
ARGS.add_argument("--storage", choices=["file", "s3"], default="file",
                  help="s3: the S3 test server, killed and stopped among the faults")
SHUTDOWN_TIMEOUT = 15  # the gateways' server.shutdown_timeout, seconds
RETRY_TIMEOUT = 4  # their redis.retry_timeout: a request waits for Redis that long at most
# A SIGTERMed gateway is gone within: 2 s for a kept-alive connection to bring a request, the
# longest a request in flight may wait for Redis, and a margin. (Well within SHUTDOWN_TIMEOUT:
# nothing here may hold a shutdown to its deadline.)
STOPS_WITHIN = 2 + RETRY_TIMEOUT + 2
RELAYS = 4
# The first relays run one job each and exit 0, each started again by a supervisor, as KEDA starts
# a pod per waiting job (a ScaledJob); the others take jobs until stopped, two at a time.
ONE_SHOT = 2
TERMINAL = ("completed", "failed", "cancelled")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def until(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.2)


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


class Stack:
    """The processes, each started again by name after a fault."""

    def __init__(self, root, rng, topology, storage="file"):
        self.root, self.rng = root, rng
        self.procs = {}
        self.logged_at_start = {}  # name -> its log's size when it was started last
        self.unready = 0  # processes a SIGTERM killed before they could take it (stop())
        self.problems = []  # found while running: a process that exited on its own, a slow stop
        self.idle = []  # kept-alive connections left idle
        self.relays = threading.Lock()  # (the faults and the supervisor both start relays)
        self.one_shot_runs = 0
        self.model_port, self.hook_port = free_port(), free_port()
        # Redis: one server; or (sentinel) two nodes — the second first the first's replica —
        # and three sentinels watching them; or (cluster) six nodes, the last three first the
        # first three's replicas.
        self.topology = topology
        self.node_ports = [free_port() for _ in range({"sentinel": 2, "cluster": 6}.get(topology, 1))]
        self.bus_ports = [free_port() for _ in self.node_ports]
        self.sentinel_ports = [free_port() for _ in range(3)] if topology == "sentinel" else []
        self.gateway_ports = {1: free_port(), 2: free_port()}
        self.storage = storage
        self.s3_port = free_port()
        os.makedirs(f"{root}/files")
        os.makedirs(f"{root}/logs")
        common = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{self.node_ports[0]}",
                  "RELAY_STORAGE_URL": f"file://{root}/files"}
        if storage == "s3":
            common.update({"RELAY_STORAGE_URL": "s3://relay-test/jobs",
                           "RELAY_STORAGE_S3_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
                           "RELAY_STORAGE_S3_PATH_STYLE": "true",
                           "RELAY_STORAGE_S3_REGION": "us-east-1",
                           "RELAY_STORAGE_S3_TIMEOUT": "2s",
                           "AWS_ACCESS_KEY_ID": "relaytestkey",
                           "AWS_SECRET_ACCESS_KEY": "relaytestsecret"})
        # Writes a client is told of wait for a replica: a failover keeps them.
        if topology == "sentinel":
            common.update({"RELAY_REDIS_MODE": "sentinel", "RELAY_REDIS_SENTINEL_MASTER": "chaos",
                           "RELAY_REDIS_WAIT_REPLICAS": "1",
                           "RELAY_REDIS_URL": "redis://" + ",".join(
                               f"127.0.0.1:{p}" for p in self.sentinel_ports)})
        elif topology == "cluster":
            common.update({"RELAY_REDIS_MODE": "cluster", "RELAY_REDIS_WAIT_REPLICAS": "1",
                           "RELAY_REDIS_URL": "redis://" + ",".join(
                               f"127.0.0.1:{p}" for p in self.node_ports)})
        self.gateway_env = {
            **common, "RELAY_SERVICE_TYPES": "echo=m1", "RELAY_AUTH_ENABLED": "false",
            "RELAY_WEBHOOKS_SECRET": SECRET, "RELAY_WEBHOOKS_ALLOW_PRIVATE": "true",
            "RELAY_WEBHOOKS_INITIAL_BACKOFF": "200ms", "RELAY_GC_REAP_INTERVAL": "500ms",
            "RELAY_GC_REAP_GRACE": "1s", "RELAY_GC_MAX_REAP_ATTEMPTS": "1000",
            "RELAY_EVENTS_CLAIM_IDLE": "2s", "RELAY_SERVER_SHUTDOWN_TIMEOUT": f"{SHUTDOWN_TIMEOUT}s",
            "RELAY_REDIS_RETRY_TIMEOUT": f"{RETRY_TIMEOUT}s"}
        self.relay_env = {
            **common, "RELAY_MODEL": "m1", "RELAY_INFERENCE_URL": f"http://127.0.0.1:{self.model_port}",
            "RELAY_LEASE_TTL": "2s", "RELAY_RELAY_CONCURRENCY": "2", "RELAY_QUEUE_POP_TIMEOUT": "10m"}

    def start(self, name, argv, env=None):
        with open(f"{self.root}/logs/{name}.log", "ab") as log:
            self.logged_at_start[name] = log.tell()
            self.procs[name] = subprocess.Popen(argv, env={**os.environ, **(env or {})},
                                                stdout=log, stderr=log)

    def redis(self, i=0):
        os.makedirs(f"{self.root}/redis{i}", exist_ok=True)
        argv = ["redis-server", "--port", str(self.node_ports[i]), "--bind", "127.0.0.1",
                "--dir", f"{self.root}/redis{i}", "--appendonly", "yes", "--appendfsync", "always",
                "--save", "", "--repl-diskless-sync-delay", "0"]
        # (A node started again finds its role from the sentinels, or its cluster.)
        if self.topology == "sentinel" and i == 1 and "redis1" not in self.procs:
            argv += ["--replicaof", "127.0.0.1", str(self.node_ports[0])]
        if self.topology == "cluster":
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-port", str(self.bus_ports[i]), "--cluster-node-timeout", "2000"]
        self.start(f"redis{i}", argv)

    def s3(self):
        self.start("s3", [NODE, S3_SERVER, "--port", str(self.s3_port), "--dir", f"{self.root}/s3"])
        assert wait_port(self.s3_port), "the S3 test server did not start"

    def model(self):
        self.start("model", [f"{BIN}/relay-inference-noop", "--listen",
                             f"127.0.0.1:{self.model_port}", "--delays-ms", *self.delays])

    def cluster(self):
        ports = self.node_ports
        for m, (first, last) in enumerate([(0, 5460), (5461, 10922), (10923, 16383)]):
            cli(ports[m], "CLUSTER", "ADDSLOTSRANGE", str(first), str(last))
        for i in range(1, 6):
            cli(ports[0], "CLUSTER", "MEET", "127.0.0.1", str(ports[i]), str(self.bus_ports[i]))
        until(lambda: all(cli(p, "CLUSTER", "NODES").count("connected") == 6 for p in ports),
              "the cluster's nodes did not meet")
        for r in range(3, 6):
            cli(ports[r], "CLUSTER", "REPLICATE", cli(ports[r - 3], "CLUSTER", "MYID"))
        until(lambda: all("cluster_state:ok" in cli(p, "CLUSTER", "INFO") for p in ports) and
              all("master_link_status:up" in cli(ports[r], "INFO", "replication")
                  for r in range(3, 6)), "the cluster did not form")

    def sentinels(self):
        for i, port in enumerate(self.sentinel_ports):
            conf = f"{self.root}/sentinel{i}.conf"  # (rewritten by the sentinel)
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                        f"sentinel monitor chaos 127.0.0.1 {self.node_ports[0]} 2\n"
                        "sentinel down-after-milliseconds chaos 2000\n"
                        "sentinel failover-timeout chaos 10000\n")
            self.start(f"sentinel{i}", ["redis-server", conf, "--sentinel"])
        # Ready once the replica is in sync and every sentinel sees it and its two peers.
        until(lambda: "master_link_status:up" in cli(self.node_ports[1], "INFO", "replication") and
              all(cli(p, "SENTINEL", "replicas", "chaos").count("name") == 1 and
                  cli(p, "SENTINEL", "sentinels", "chaos").count("name") == 2
                  for p in self.sentinel_ports),
              "the sentinels did not see the replica and each other")

    def master(self):
        """A master node now (its index): the sentinels', or one of the cluster's at random."""
        if self.topology == "sentinel":
            for port in self.sentinel_ports:
                addr = cli(port, "SENTINEL", "get-master-addr-by-name", "chaos").split()
                if len(addr) == 2 and int(addr[1]) in self.node_ports:
                    return self.node_ports.index(int(addr[1]))
        if self.topology == "cluster":
            masters = [i for i, p in enumerate(self.node_ports)
                       if cli(p, "ROLE").split("\n")[0] == "master"]
            if masters:
                return self.rng.choice(masters)
        return 0

    def replicated(self, i):
        """Whether master i has a replica in step (always, standalone: there is none)."""
        if self.topology == "standalone":
            return True
        info = cli(self.node_ports[i], "INFO", "replication")
        return any(line.startswith("slave") and "state=online" in line
                   for line in info.splitlines())

    def gateway(self, i):
        self.start(f"gateway{i}", [f"{BIN}/relay-gateway"],
                   {**self.gateway_env, "RELAY_SERVER_LISTEN": f"127.0.0.1:{self.gateway_ports[i]}",
                    "RELAY_EVENTS_CONSUMER": f"gateway{i}"})
        wait_port(self.gateway_ports[i])
        # A connection kept alive after one answer and then left idle, as an ingress's upstream
        # pool holds one: it must not keep the gateway from stopping.
        try:
            idle = socket.create_connection(("127.0.0.1", self.gateway_ports[i]), 5)
            idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: chaos\r\n\r\n")
            if b" 200 " not in idle.recv(4096):
                self.problems.append(f"gateway{i}: /healthz not 200 after a start")
            self.idle.append(idle)
        except OSError as e:
            self.problems.append(f"gateway{i}: no answer after a start ({e})")

    def relay(self, i):
        if i < ONE_SHOT:
            self.start(f"relay{i}", [f"{BIN}/relay", "--max-jobs", "1"],
                       {**self.relay_env, "RELAY_RELAY_CONCURRENCY": "1"})
        else:
            self.start(f"relay{i}", [f"{BIN}/relay", "--max-jobs", "0"], self.relay_env)

    def supervise(self, done):
        """Starts a one-shot relay again once it exited; one that exited non-zero is a problem."""
        while not done.is_set():
            for i in range(ONE_SHOT):
                with self.relays:
                    code = self.procs[f"relay{i}"].poll()
                    if code is not None:
                        if code != 0:
                            self.problems.append(f"one-shot relay{i} exited {code}")
                        self.one_shot_runs += 1
                        self.relay(i)
            time.sleep(0.05)

    def up(self):
        for i in range(len(self.node_ports)):
            self.redis(i)
            assert wait_port(self.node_ports[i]), "redis-server did not start"
        if self.topology == "sentinel":
            self.sentinels()
        if self.topology == "cluster":
            self.cluster()
        if self.storage == "s3":
            self.s3()
        self.delays = [str(self.rng.choice([5, 20, 50, 200, 800])) for _ in range(50)]
        self.model()
        self.start("receiver", ["/usr/bin/python3", RECEIVER, "--port", str(self.hook_port),
                                "--secret", SECRET, "--log", f"{self.root}/hooks.jsonl",
                                "--fail-first", "40"])
        for i in self.gateway_ports:
            self.gateway(i)
        for i in range(RELAYS):
            self.relay(i)
        assert all(wait_port(p) for p in [self.model_port, self.hook_port,
                                          *self.gateway_ports.values()]), "the stack did not start"

    def still_running(self, name):
        code = self.procs[name].poll()
        if code is not None:
            self.problems.append(f"{name} exited on its own with {code}")
        return code is None

    def stop(self, name, sig, within):
        p = self.procs[name]
        started = time.monotonic()
        p.send_signal(sig)
        try:
            code = p.wait(within)
        except subprocess.TimeoutExpired:
            self.problems.append(f"{name} still running {within} s after {sig.name}")
            p.kill()
            code = p.wait()
        if sig == signal.SIGTERM and code == -signal.SIGTERM and not self.logged_since_start(name):
            # Killed by the signal having said nothing: it came while the process was still being
            # loaded, before its first constructor blocks it (src/common/signals.hpp) — no program
            # can take a signal then. (A one-shot relay is started anew after every job, and lives
            # ~50-800 ms here: a few of a run's SIGTERMs land in its first ms.) Once it runs,
            # before its first line, the signal is blocked, so a relay that said something and
            # still died by it is a problem.
            self.unready += 1
        elif sig == signal.SIGTERM and code != 0:
            self.problems.append(f"{name} exited {code} on SIGTERM")
        return time.monotonic() - started

    def logged_since_start(self, name):
        return os.path.getsize(f"{self.root}/logs/{name}.log") > self.logged_at_start[name]

    def down(self):
        for s in self.idle:
            s.close()
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def url(self, i=None):
        return f"http://127.0.0.1:{self.gateway_ports[i or self.rng.choice([1, 2])]}"


def crash(stack, name, down, start):
    """A dependency killed, and started again (start()) `down` seconds later."""
    print(f"{time.strftime('%X')} {name} <- SIGKILL, down {down:.1f} s", flush=True)
    stack.stop(name, signal.SIGKILL, within=10)
    time.sleep(down)
    start()


def faults(stack, rng, until):
    """One fault at a time, every 0.3–2 s; what it hit started again at once."""
    while time.monotonic() < until:
        time.sleep(rng.uniform(0.3, 2.0))
        roll = rng.random()
        if rng.random() < 0.1:
            # The model server crashes (its container OOM-killed) and comes back.
            crash(stack, "model", rng.uniform(0.5, 5), stack.model)
        elif stack.storage == "s3" and rng.random() < 0.35:
            # Storage away: restarted (connections refused meanwhile), or silent.
            if rng.random() < 0.5:
                crash(stack, "s3", rng.uniform(2, 12), stack.s3)
            else:
                pause = rng.uniform(1, 15)
                print(f"{time.strftime('%X')} s3 <- SIGSTOP for {pause:.1f} s", flush=True)
                stack.procs["s3"].send_signal(signal.SIGSTOP)
                time.sleep(pause)
                stack.procs["s3"].send_signal(signal.SIGCONT)
        elif roll < 0.5:
            i = rng.randrange(RELAYS)
            sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
            with stack.relays:
                if i < ONE_SHOT and stack.procs[f"relay{i}"].poll() == 0:
                    pass  # (its job done, between runs: the supervisor's)
                elif stack.still_running(f"relay{i}"):
                    stack.stop(f"relay{i}", sig, within=15)
                print(f"{time.strftime('%X')} relay{i} <- {sig.name}", flush=True)
                stack.relay(i)
        elif roll < 0.8:
            i = rng.choice([1, 2])
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            took = 0.0
            if stack.still_running(f"gateway{i}"):
                took = stack.stop(f"gateway{i}", sig, within=STOPS_WITHIN)
            print(f"{time.strftime('%X')} gateway{i} <- {sig.name} (gone in {took:.1f} s)", flush=True)
            time.sleep(rng.uniform(0, 1))
            stack.gateway(i)
        elif not stack.replicated(i := stack.master()):  # (Redis's faults from here on)
            # Redis's faults come one at a time too: a master whose replica is not in step yet
            # (the last fault's node still being made one: Sentinel converts a restarted old
            # master ~10 s after it is back) is spared. Hit, it would be two faults at once —
            # three master kills in 16 s left no replica to acknowledge a write for 30 s, and a
            # relay, past its retry window, exited 1 as it should (seed 132129994).
            print(f"{time.strftime('%X')} redis{i} (master) spared: no replica in step yet",
                  flush=True)
        elif roll < 0.9:
            # With sentinels, a pause past down-after-milliseconds (2 s) is a failover: the node
            # wakes a master no longer, and is made the new master's replica.
            pause = rng.uniform(0.5, 6 if stack.topology == "standalone" else 8)
            print(f"{time.strftime('%X')} redis{i} (master) <- SIGSTOP for {pause:.1f} s", flush=True)
            stack.procs[f"redis{i}"].send_signal(signal.SIGSTOP)
            time.sleep(pause)
            stack.procs[f"redis{i}"].send_signal(signal.SIGCONT)
        else:
            print(f"{time.strftime('%X')} redis{i} (master) <- SIGKILL", flush=True)
            stack.stop(f"redis{i}", signal.SIGKILL, within=10)
            # (Down for over 2 s, a master with a replica is failed over.)
            time.sleep(rng.uniform(0, 2 if stack.topology == "standalone" else 5))
            stack.redis(i)


class Clients:
    """Submitters: each submission retried (same Idempotency-Key, either replica) until accepted;
    a tenth long-polled, a tenth cancelled."""

    def __init__(self, stack, rng, seconds):
        self.stack, self.rng = stack, rng
        self.seconds = seconds  # submissions spread over the faults' window, so that every fault
        # lands on jobs in flight (at full speed they were all in within 10-15 s of 40)
        self.lock = threading.Lock()
        self.jobs = {}  # key -> {"id", "sha256", "cancelled": a cancel was sent}
        self.problems = []

    def run(self, count, name):
        rng = random.Random(self.rng.random())
        began = time.monotonic()
        http = httpx.Client(timeout=30)
        for n in range(count):
            key = f"{name}-{n}"
            payload = os.urandom(rng.choice([10, 1000, 50_000]))
            headers = {"Idempotency-Key": key}
            if rng.random() < 0.2:
                headers["X-Priority"] = "1"
            job_id = None
            for _ in range(300):
                try:
                    r = http.post(self.stack.url() + "/jobs/echo", headers=headers,
                                  files={"file": ("in.bin", payload, "application/octet-stream")},
                                  data={"callback_url": f"http://127.0.0.1:{self.stack.hook_port}/hook",
                                        "max_attempts": "3"})
                    if r.status_code in (200, 202):
                        job_id = r.json()["id"]
                        break
                    if r.status_code != 503:
                        self.problems.append(f"submission {key}: {r.status_code} {r.text[:200]}")
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            if job_id is None:
                self.problems.append(f"submission {key} never accepted")
                continue
            with self.lock:
                if key in self.jobs and self.jobs[key]["id"] != job_id:
                    self.problems.append(f"{key}: two jobs")
                self.jobs[key] = {"id": job_id, "sha256": hashlib.sha256(payload).hexdigest(),
                                  "cancelled": False}
            if rng.random() < 0.1:
                try:
                    r = http.get(f"{self.stack.url()}/jobs/echo/{job_id}?wait=3")
                    if r.status_code not in (200, 503):
                        self.problems.append(f"long-poll: {r.status_code} {r.text[:200]}")
                except httpx.HTTPError:
                    pass
            if rng.random() < 0.1:
                # (Sent is enough: a cancel whose answer was lost may have been done.)
                self.jobs[key]["cancelled"] = True
                for _ in range(100):
                    try:
                        r = http.delete(f"{self.stack.url()}/jobs/echo/{job_id}")
                        if r.status_code in (200, 202, 409):  # 202: asked of its relay; 409: ended
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2)
            # On pace to end with the faults: the n-th submission due at n/count of the window.
            due = began + (n + 1) * self.seconds / count
            time.sleep(max(0.0, due - time.monotonic()) * rng.uniform(0.5, 1.5))


def check(stack, clients):
    problems = list(clients.problems)  # (and the stack's, which main adds once all stopped)
    http = httpx.Client(timeout=30)
    ended, left = {}, dict(clients.jobs)
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        for key, job in list(left.items()):
            try:
                r = http.get(f"{stack.url(1)}/jobs/echo/{job['id']}")
            except httpx.HTTPError:
                continue
            if r.status_code == 200 and r.json()["status"] in TERMINAL:
                ended[key] = r.json()
                del left[key]
        time.sleep(0.5)
    problems += [f"never ended: {job['id']}" for job in list(left.values())[:10]]
    counts = {}
    for key, j in ended.items():
        counts[j["status"]] = counts.get(j["status"], 0) + 1
        if j["status"] == "failed":
            # Only a job whose every attempt the model died under may fail.
            codes = [f.get("code") for f in j.get("failures") or []]
            if len(codes) < 3 or any(c != "inference_unreachable" for c in codes):
                problems.append(f"failed: {json.dumps(j)[:400]}")
        elif j["status"] == "cancelled" and not clients.jobs[key]["cancelled"]:
            problems.append(f"cancelled, never asked to be: {j['id']}")
        elif j["status"] == "completed":
            r = http.get(f"{stack.url(1)}/jobs/echo/{j['id']}/result")
            if r.status_code != 200 or r.json()["parts"][0]["sha256"] != clients.jobs[key]["sha256"]:
                problems.append(f"result of {j['id']}: {r.status_code} {r.text[:200]}")
    retried = sum(1 for j in ended.values() if j.get("failures"))
    print(f"{len(clients.jobs)} jobs accepted: {counts}; {retried} tried again; one-shot relays ran "
          f"{stack.one_shot_runs} times; {stack.unready} SIGTERMed while being loaded", flush=True)
    if stack.topology != "standalone":  # (failed over: another node than at the start)
        print("masters at the end:", [f"redis{i}" for i, p in enumerate(stack.node_ports)
                                      if cli(p, "ROLE").split("\n")[0] == "master"], flush=True)

    # Webhooks: each job's, under one webhook id (retries and redeliveries reuse it).
    ids = {j["id"] for j in ended.values()}
    webhook_ids = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        webhook_ids = {}
        with open(f"{stack.root}/hooks.jsonl") as f:
            for line in f:
                h = json.loads(line)
                if not h["valid"]:
                    problems.append(f"a webhook with a bad signature: {h['id']}")
                if h["status"] < 300:
                    webhook_ids.setdefault(h["body"]["id"], set()).add(h["id"])
        if ids <= webhook_ids.keys():
            break
        time.sleep(0.5)
    problems += [f"no webhook delivered for {i}" for i in sorted(ids - webhook_ids.keys())[:10]]
    problems += [f"{i}: webhooks under {len(w)} ids" for i, w in webhook_ids.items() if len(w) > 1]

    def redis(*args):  # (in a cluster, -c follows the key to its node)
        return cli(stack.node_ports[stack.master()], "-c", *args) if stack.topology == "cluster" \
            else cli(stack.node_ports[stack.master()], *args)
    tag = "{m1}" if stack.topology == "cluster" else "m1"  # (keys.hpp: the hash tag)
    events = int(redis("XLEN", f"jobs:{tag}:events") or -1)
    if events != len(ended):
        problems.append(f"{events} terminal events for {len(ended)} jobs")
    processing = f"relay:{tag}:processing"
    if redis("LLEN", processing) != "0":
        problems.append(f"left in processing: {redis('LRANGE', processing, '0', '-1')}")
    for name in stack.procs:
        if name.startswith("gateway") or name.startswith("relay") and int(name[5:]) >= ONE_SHOT:
            stack.still_running(name)
    return problems


def main():
    args = ARGS.parse_args()
    seed = int(os.environ.get("RELAY_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (RELAY_CHAOS_SEED={seed} replays it)", flush=True)
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="relay-chaos-")
    stack = Stack(root, rng, args.redis, args.storage)
    done, supervisor = threading.Event(), None
    try:
        stack.up()
        clients = Clients(stack, rng, args.seconds)
        submitters = [threading.Thread(target=clients.run, args=(args.jobs // 4, f"c{t}")) for t in range(4)]
        fault = threading.Thread(target=faults, args=(stack, rng, time.monotonic() + args.seconds))
        supervisor = threading.Thread(target=stack.supervise, args=(done,))
        supervisor.start()
        fault.start()
        for t in submitters:
            t.start()
        for t in submitters + [fault]:
            t.join()
        problems = check(stack, clients)
    finally:
        done.set()
        if supervisor:
            supervisor.join()
        stack.down()
    problems += stack.problems
    if problems:
        print(f"FAILED (seed {seed}); logs in {root}", *problems[:40], sep="\n")
        sys.exit(1)
    shutil.rmtree(root, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main()
