#!/usr/bin/env python3
"""Gateway benchmarks (issue 3), figures printed side by side in one run:

1. Submit throughput: 1 KiB multipart POSTs at concurrency 64 with wrk, filesystem storage:
   requests/s and p99, beside wrk on /healthz in the same run (this server's HTTP ceiling here).
   Issue 3's target, submit >= 30% of the ceiling, stopped comparing like with like when issue 10
   answered /healthz on the I/O thread (the ceiling ~23,000 -> ~80,000 req/s): submits are
   compared with their figure before issue 10 (7,023 req/s) and their own earlier runs (README).
2. Long-poll capacity: 10,000 concurrent GET ?wait=60 held on pending jobs: gateway RSS (target
   <= 200 MiB), and the time from a job's completion to the responses of its waiters.
3. Large input: a 1 GiB upload through the gateway to the S3 test server: gateway peak RSS
   (target <= 64 MiB), and throughput beside `curl -T` of the same file straight to the same server
   (target >= 90% of it) and through socat, first with every process free to use both cores, then
   with the test server on a core of its own (as S3 is another machine in production).
4. Trickling clients (issue 10): 1,000 uploads sending 2 KiB/s each, held open while wrk measures
   /healthz and 1 KiB submits: both within 80% of their figures without them; gateway RSS.

usage: gateway_bench.py BIN_DIR [--quick] [--only=upload]"""
import asyncio
import calendar
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ports import free_port, wait_port  # noqa: E402

BIN = sys.argv[1]
QUICK = "--quick" in sys.argv
STORAGE_ROOT = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--storage-root=")), None)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
procs = []


def start(argv, env=None, log=None):
    p = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=log or subprocess.DEVNULL,
                         stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    procs.append(p)
    return p


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def wrk(url, script=None, seconds=10):
    argv = ["wrk", "-t2", "-c64", f"-d{seconds}s", "--latency", url]
    if script:
        argv[1:1] = ["-s", script]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, float(p99.group(1)) * scale, int(non2xx.group(1)) if non2xx else 0


def http_json(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def start_cluster(work):
    """Three masters sharing the 16384 slots, formed as the integration tests' harness does."""
    ports = [free_port() for _ in range(3)]
    for i, p in enumerate(ports):
        d = os.path.join(work, f"cluster-{i}")
        os.makedirs(d)
        start(["redis-server", "--port", str(p), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
               "--cluster-port", str(free_port()), "--save", "", "--appendonly", "no", "--dir", d])
    for p in ports:
        wait_port(p)
    cli = lambda p, *a: subprocess.run(["redis-cli", "-p", str(p), *a], check=True, capture_output=True, text=True).stdout
    for i, p in enumerate(ports):
        cli(p, "cluster", "addslotsrange", str(i * 16384 // 3), str((i + 1) * 16384 // 3 - 1))
    for p in ports[1:]:
        me = next(l for l in cli(p, "cluster", "nodes").splitlines() if "myself" in l)
        bus = re.search(r"@(\d+)", me).group(1)
        cli(ports[0], "cluster", "meet", "127.0.0.1", str(p), bus)
    deadline = time.time() + 30
    while time.time() < deadline:
        if all("cluster_state:ok" in cli(p, "cluster", "info") and cli(p, "cluster", "nodes").count("\n") >= 3 for p in ports):
            return ports
        time.sleep(0.1)
    raise RuntimeError("the cluster did not form")


def trickling_clients(genv, shm, seconds):
    """A gateway on tmpfs: /healthz and 1 KiB submits with wrk, then again while N uploads trickle
    at 2 KiB/s each (raw and multipart, 1 MiB declared: they stay open), then again once they are
    gone. Issue 10's target: both within 80% of their figures without the trickling clients — the
    mean of the runs before and after, so that the VM's drift over the minute (10-20% here) is
    not read as the trickle's cost."""
    import threading
    n = 200 if QUICK else 1000
    subprocess.run(["rm", "-rf", shm], check=True)
    os.makedirs(shm)
    port = free_port()
    gw = start([f"{BIN}/relay-gateway"], {**genv, "RELAY_SERVER_LISTEN": f"127.0.0.1:{port}",
                                          "RELAY_STORAGE_URL": f"file://{shm}"})
    wait_port(port)
    base = f"http://127.0.0.1:{port}"
    lua = os.path.join(os.path.dirname(shm), f"trickle-submit-{os.getpid()}.lua")
    body = ("--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n" + "x" * 1024 + "\r\n--BOUNDARY--\r\n")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "multipart/form-data; boundary=BOUNDARY"\n'
                f"wrk.body = {json.dumps(body)}\n")
    before = (wrk(base + "/healthz", seconds=seconds), wrk(base + "/jobs/echo", lua, seconds=seconds))

    stop = threading.Event()
    stats = {"open": 0, "cut": 0, "sent": 0}

    async def one(i):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["cut"] += 1
            return
        if i % 2:
            head = (f"POST /jobs/echo?filename=t{i}.bin HTTP/1.1\r\nHost: x\r\n"
                    "Content-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n")
        else:
            head = (f"POST /jobs/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n"
                    "Content-Type: multipart/form-data; boundary=TT\r\n\r\n"
                    f"--TT\r\nContent-Disposition: form-data; name=\"file\"; filename=\"t{i}\"\r\n\r\n")
        writer.write(head.encode())
        stats["open"] += 1
        piece = b"y" * 2048
        try:
            await asyncio.sleep(i % 100 / 100)  # spread the sends over the second
            while not stop.is_set():
                writer.write(piece)
                await writer.drain()
                stats["sent"] += len(piece)
                await asyncio.sleep(1)
            if reader.at_eof():
                raise ConnectionError
        except (ConnectionError, OSError):
            stats["cut"] += 1
        stats["open"] -= 1
        writer.close()

    async def clients():
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one(i)))
            if i % 100 == 99:
                await asyncio.sleep(0.05)
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await asyncio.gather(*tasks, return_exceptions=True)

    t = threading.Thread(target=lambda: asyncio.run(clients()))
    t.start()
    for _ in range(200):
        if stats["open"] >= n and stats["sent"] >= n * 2048:
            break
        time.sleep(0.1)
    time.sleep(1)
    held_at_start = stats["open"]
    during = (wrk(base + "/healthz", seconds=seconds), wrk(base + "/jobs/echo", lua, seconds=seconds))
    rss = status_kib(gw.pid, "VmRSS")
    held_at_end = stats["open"]
    stop.set()
    t.join()
    time.sleep(1)  # (the abandoned uploads' leftovers removed)
    after = (wrk(base + "/healthz", seconds=seconds), wrk(base + "/jobs/echo", lua, seconds=seconds))
    gw.kill()
    os.remove(lua)
    return {"n": n, "before": before, "during": during, "after": after, "rss": rss,
            "held": (held_at_start, held_at_end), "cut": stats["cut"]}


def large_upload(genv, work):
    """1 GiB through the gateway to S3, beside curl -T straight to S3: MiB/s both, peak RSS."""
    size = (256 if QUICK else 1024) << 20
    big = os.path.join(work, "big.bin")
    with open(big, "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(block)
    s3_port, gw2_port = free_port(), free_port()
    # The S3 test server keeps its objects (and spools PUTs, to make them atomic) on tmpfs: the
    # comparison is of the paths to it, not of this machine's disk.
    s3_dir = f"/dev/shm/relay-gwbench-s3-{os.getpid()}"
    s3 = start(["node", os.path.join(ROOT, "tests/s3/server.js"), "--port", str(s3_port), "--dir", s3_dir])
    wait_port(s3_port)
    g2 = start([f"{BIN}/relay-gateway"], {**genv, "RELAY_SERVER_LISTEN": f"127.0.0.1:{gw2_port}",
                                          "RELAY_STORAGE_URL": "s3://relay-test/jobs", "RELAY_STORAGE_S3_ENDPOINT": f"http://127.0.0.1:{s3_port}",
                                          "RELAY_STORAGE_S3_PATH_STYLE": "true", "AWS_ACCESS_KEY_ID": "relaytestkey",
                                          "AWS_SECRET_ACCESS_KEY": "relaytestsecret", "RELAY_SERVER_MAX_BODY_SIZE": str(2 << 30)})
    wait_port(gw2_port)
    # The test server (one Node process: it spools each PUT, then hands it to s3rver, which hashes
    # and writes it) is the bottleneck and the noise: on 2 cores one run of either side varies by
    # a third. So: rounds in ABBA order, every run into a server holding no earlier upload (the
    # objects and spools are removed before each), and the median of each side besides its best.
    def clean():
        for root, _, files in os.walk(s3_dir):
            for name in files:
                path = os.path.join(root, name)
                if os.path.getsize(path) > (1 << 20):
                    os.remove(path)

    # CPU seconds per GiB of the processes on the path (the client's curl excluded: the same on
    # both): where the machine's two cores go, and so what the extra hop can cost at most.
    def cpu_now(procs_):
        return [cpu_seconds(p.pid) for p in procs_]

    def cpu_per_gib(before, procs_):
        return [(c - b) * (1 << 30) / size for c, b in zip(cpu_now(procs_), before)]

    # Where the processes run. "shared": anywhere on the two cores, so the hop's CPU competes
    # with the test server's (whose one JavaScript thread sets the pace of every upload here);
    # "apart": the test server alone on one core, the client's curl and the hop on the other, as
    # in production, where S3 is another machine. Both arms of a comparison run the same way.
    ncpu = os.cpu_count() or 1
    placements = ["shared", "apart"] if ncpu >= 2 else ["shared"]

    def place(pid, cpus):
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, capture_output=True)

    def client_cpus(placement):
        return ["taskset", "-c", "0"] if placement == "apart" else []

    def direct(placement):
        clean()
        before = cpu_now([s3])
        t0 = time.time()
        subprocess.run(client_cpus(placement) + [
            "curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", "relaytestkey:relaytestsecret",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", big,
            f"http://127.0.0.1:{s3_port}/relay-test/direct/big.bin"], check=True)
        runs[placement]["curl"].append(size / (1 << 20) / (time.time() - t0))
        runs[placement]["direct_cpu"].append(cpu_per_gib(before, [s3]))

    # A byte-for-byte TCP forwarder (socat, 1 MiB buffers) in front of the server: what any
    # extra hop costs on this machine (one more process copying every byte through the kernel
    # twice, beside a server that keeps a core busy), the floor for a gateway.
    socat_port = free_port()
    have_socat = subprocess.run(["which", "socat"], capture_output=True).returncode == 0
    if have_socat:
        socat = start(["socat", "-b", str(1 << 20), f"TCP-LISTEN:{socat_port},fork,reuseaddr,bind=127.0.0.1",
                       f"TCP:127.0.0.1:{s3_port}"])
        wait_port(socat_port)

    def via_socat(placement):
        if not have_socat:
            return
        clean()
        t0 = time.time()
        subprocess.run(client_cpus(placement) + [
            "curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", "relaytestkey:relaytestsecret",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", big,
            f"http://127.0.0.1:{socat_port}/relay-test/direct/big.bin"], check=True)
        runs[placement]["socat"].append(size / (1 << 20) / (time.time() - t0))

    def via_gateway(placement):
        clean()
        before = cpu_now([g2, s3])
        t0 = time.time()
        out = subprocess.run(client_cpus(placement) + [
            "curl", "-sf", "-H", "Content-Type: application/octet-stream", "-H", "Expect:", "-X", "POST", "-T", big,
            f"http://127.0.0.1:{gw2_port}/jobs/echo?filename=big.bin"], check=True, capture_output=True).stdout
        runs[placement]["gw"].append(size / (1 << 20) / (time.time() - t0))
        runs[placement]["gw_cpu"].append(cpu_per_gib(before, [g2, s3]))
        stored.append(json.loads(out)["input"]["size"])

    runs = {p: {"curl": [], "gw": [], "socat": [], "direct_cpu": [], "gw_cpu": []} for p in placements}
    stored = []
    for placement in placements:
        # socat forks a process per connection: the child inherits the listener's placement.
        for pid, cpus in ((s3.pid, "1"), (g2.pid, "0"), (socat.pid if have_socat else None, "0")):
            if pid:
                place(pid, cpus if placement == "apart" else "0-%d" % (ncpu - 1))
        for _ in range(1 if QUICK else 3):
            direct(placement); via_gateway(placement); via_socat(placement)
            via_socat(placement); via_gateway(placement); direct(placement)
    hwm = status_kib(g2.pid, "VmHWM")
    g2.kill()
    os.remove(big)
    subprocess.run(["rm", "-rf", s3_dir, s3_dir + ".incoming"])
    result = {"size": size, "hwm": hwm, "stored": min(stored), "placements": {}}
    for placement, r in runs.items():
        result["placements"][placement] = {
            "curl_mbs": max(r["curl"]), "gw_mbs": max(r["gw"]), "curl_med": median(r["curl"]),
            "gw_med": median(r["gw"]), "runs": len(r["gw"]),
            "cpu_gw": median([c[0] for c in r["gw_cpu"]]), "cpu_s3_gw": median([c[1] for c in r["gw_cpu"]]),
            "cpu_s3_direct": median([c[0] for c in r["direct_cpu"]]),
            "socat_med": median(r["socat"]) if r["socat"] else None, "socat_mbs": max(r["socat"], default=None)}
    return result


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = tempfile.mkdtemp(prefix="relay-gwbench-")
    redis_port, gw_port, infer_port = free_port(), free_port(), free_port()
    start(["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no", "--dir", work])
    wait_port(redis_port)
    start([f"{BIN}/relay-inference-noop", "--listen", f"127.0.0.1:{infer_port}"])
    genv = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{redis_port}", "RELAY_STORAGE_URL": f"file://{STORAGE_ROOT or work + '/storage'}",
            "RELAY_SERVICE_TYPES": "echo=m1", "RELAY_AUTH_ENABLED": "false", "RELAY_LOG_LEVEL": "warn",
            "RELAY_SERVER_LISTEN": f"127.0.0.1:{gw_port}"}
    gw = start([f"{BIN}/relay-gateway"], genv)
    wait_port(gw_port)
    base = f"http://127.0.0.1:{gw_port}"
    seconds = 3 if QUICK else 10

    # 1. Submit throughput beside the HTTP ceiling.
    lua = os.path.join(work, "submit.lua")
    body = ("--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n" + "x" * 1024 + "\r\n--BOUNDARY--\r\n")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "multipart/form-data; boundary=BOUNDARY"\n'
                f"wrk.body = {json.dumps(body)}\n")
    ceil_rps, ceil_p99, _ = wrk(base + "/healthz", seconds=seconds)
    sub_rps, sub_p99, sub_errors = wrk(base + "/jobs/echo", lua, seconds=seconds)
    # The same on tmpfs: each submission creates a folder and a file, and on a slow disk the
    # file system, not the gateway, sets the pace. Both are printed, with the cost measured here.
    shm = f"/dev/shm/relay-gwbench-{os.getpid()}"
    os.makedirs(shm, exist_ok=True)
    shm_port = free_port()
    gshm = start([f"{BIN}/relay-gateway"], {**genv, "RELAY_SERVER_LISTEN": f"127.0.0.1:{shm_port}", "RELAY_STORAGE_URL": f"file://{shm}"})
    wait_port(shm_port)
    shm_rps, shm_p99, shm_errors = wrk(f"http://127.0.0.1:{shm_port}/jobs/echo", lua, seconds=seconds)
    gshm.kill()
    # The same again with Redis over TLS (issue 9: within 15% of plain), a test CA made here.
    pki = os.path.join(work, "tls")
    os.makedirs(pki)
    subprocess.run(["bash", "-c", "set -e; cd '%s'; "
                    "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key 2>/dev/null; "
                    "openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj /CN=bench-ca; "
                    "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key 2>/dev/null; "
                    "openssl req -new -key server.key -out server.csr -subj /CN=localhost; "
                    "printf 'subjectAltName=IP:127.0.0.1\\n' > ext; "
                    "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext 2>/dev/null" % pki],
                   check=True)
    tls_redis, tls_gw = free_port(), free_port()
    start(["redis-server", "--port", "0", "--tls-port", str(tls_redis), "--tls-cert-file", f"{pki}/server.crt",
           "--tls-key-file", f"{pki}/server.key", "--tls-ca-cert-file", f"{pki}/ca.crt", "--tls-auth-clients", "no",
           "--save", "", "--appendonly", "no", "--dir", work])
    wait_port(tls_redis)
    # Each run stores into an empty folder: a folder holding the previous run's 100,000 jobs
    # makes file creation, not Redis, the difference between runs.
    subprocess.run(["rm", "-rf", shm], check=True)
    os.makedirs(shm)
    gtls = start([f"{BIN}/relay-gateway"], {**genv, "RELAY_SERVER_LISTEN": f"127.0.0.1:{tls_gw}", "RELAY_STORAGE_URL": f"file://{shm}",
                                            "RELAY_REDIS_URL": f"rediss://127.0.0.1:{tls_redis}",
                                            "RELAY_REDIS_TLS_CA_FILE": f"{pki}/ca.crt"})
    wait_port(tls_gw)
    tls_rps, tls_p99, tls_errors = wrk(f"http://127.0.0.1:{tls_gw}/jobs/echo", lua, seconds=seconds)
    gtls.kill()
    # And on a 3-master Redis Cluster (issue 9: within 10% of standalone for one model).
    seeds = start_cluster(work)
    cl_gw = free_port()
    subprocess.run(["rm", "-rf", shm], check=True)
    os.makedirs(shm)
    gcl = start([f"{BIN}/relay-gateway"], {**genv, "RELAY_SERVER_LISTEN": f"127.0.0.1:{cl_gw}", "RELAY_STORAGE_URL": f"file://{shm}",
                                           "RELAY_REDIS_URL": "redis://" + ",".join(f"127.0.0.1:{p}" for p in seeds),
                                           "RELAY_REDIS_MODE": "cluster"})
    wait_port(cl_gw)
    cl_rps, cl_p99, cl_errors = wrk(f"http://127.0.0.1:{cl_gw}/jobs/echo", lua, seconds=seconds)
    gcl.kill()
    create_us = {}
    for name, root in (("disk", work), ("tmpfs", shm)):
        t0 = time.time()
        for i in range(300):
            d = os.path.join(root, "probe", str(i))
            os.makedirs(d)
            with open(os.path.join(d, "input.tmp"), "wb") as f:
                f.write(b"x" * 1024)
            os.rename(os.path.join(d, "input.tmp"), os.path.join(d, "input"))
        create_us[name] = (time.time() - t0) / 300 * 1e6
    subprocess.run(["rm", "-rf", shm], check=True)

    # 4 (run here, on its own gateway). Trickling clients: 1,000 uploads sending 2 KiB/s each, held
    # open while wrk measures /healthz and 1 KiB submits, against the same without them.
    trickle = trickling_clients(genv, shm, seconds)
    subprocess.run(["rm", "-rf", shm], check=True)

    # 2. Long-polls: N waiters spread over 100 pending jobs, then one job completes.
    n_polls = 2000 if QUICK else 10000
    subprocess.run(["redis-cli", "-p", str(redis_port), "flushall"], check=True, capture_output=True)
    ids = [http_json("POST", base + "/jobs/echo?filename=x", b"x", {"Content-Type": "text/plain"})["id"] for _ in range(100)]
    loop_result = {}

    async def poll(job_id, done_times):
        reader, writer = await asyncio.open_connection("127.0.0.1", gw_port)
        writer.write(f"GET /jobs/echo/{job_id}?wait=60 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        done_times.append(time.time())
        writer.close()

    async def longpolls():
        done_times = []
        target = ids[0]
        tasks = []
        for i in range(n_polls):
            tasks.append(asyncio.create_task(poll(ids[i % len(ids)], done_times if i % len(ids) == 0 else [])))
            if i % 500 == 0:
                await asyncio.sleep(0)
        # Wait until the gateway holds them all (its open descriptors), then measure its memory.
        for _ in range(600):
            if len(os.listdir(f"/proc/{gw.pid}/fd")) >= n_polls:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        loop_result["held"] = len(os.listdir(f"/proc/{gw.pid}/fd"))
        loop_result["rss"] = status_kib(gw.pid, "VmRSS")
        # Complete the first job with a real relay; its waiters must answer at once.
        renv = {"RELAY_MODEL": "m1", "RELAY_REDIS_URL": genv["RELAY_REDIS_URL"], "RELAY_STORAGE_URL": genv["RELAY_STORAGE_URL"],
                "RELAY_INFERENCE_URL": f"http://127.0.0.1:{infer_port}", "RELAY_LOG_LEVEL": "warn"}
        # ids[0] was submitted first: it is at the left of the list, taken first.
        await asyncio.get_running_loop().run_in_executor(None, lambda: subprocess.run([f"{BIN}/relay"], env={**os.environ, **renv}))
        rec = http_json("GET", f"{base}/jobs/echo/{target}")
        finished = calendar.timegm(time.strptime(rec["finished_at"][:19], "%Y-%m-%dT%H:%M:%S")) + int(rec["finished_at"][20:23]) / 1000
        for _ in range(100):
            if len(done_times) >= n_polls // len(ids):
                break
            await asyncio.sleep(0.05)
        lat = sorted((t - finished) * 1000 for t in done_times)
        loop_result["status"] = rec["status"]
        loop_result["lat"] = lat
        for t in tasks:
            t.cancel()

    asyncio.run(longpolls())

    up = large_upload(genv, work)

    lat = loop_result["lat"]
    pct = lambda p: lat[min(len(lat) - 1, int(p * (len(lat) - 1) + 0.5))] if lat else float("nan")
    print("Gateway benchmark (2 cores; wrk -t2 -c64; filesystem storage unless said; Redis on loopback)\n")
    print(f"{'figure':56} {'measured':>16} {'reference / target':>30}")
    print(f"{'GET /healthz (the HTTP ceiling)':56} {ceil_rps:>10.0f} req/s {'p99 %.2f ms' % ceil_p99:>30}")
    print(f"{'POST /jobs/echo, 1 KiB multipart, c=64':56} {sub_rps:>10.0f} req/s "
          f"{'%.0f%% of ceiling; before issue 10: 7023' % (100 * sub_rps / ceil_rps):>30}")
    print(f"{'  its p99 latency; non-2xx answers':56} {sub_p99:>13.2f} ms {sub_errors:>30}")
    print(f"{'POST /jobs/echo as above, storage on tmpfs':56} {shm_rps:>10.0f} req/s "
          f"{'%.0f%% of ceiling; p99 %.1f ms' % (100 * shm_rps / ceil_rps, shm_p99):>30}")
    print(f"{'POST /jobs/echo on tmpfs, Redis over TLS':56} {tls_rps:>10.0f} req/s "
          f"{'%.2f x plain (target >= 0.85); %d non-2xx' % (tls_rps / shm_rps, tls_errors):>30}")
    print(f"{'POST /jobs/echo on tmpfs, 3-master Redis Cluster':56} {cl_rps:>10.0f} req/s "
          f"{'%.2f x standalone (target >= 0.90); %d non-2xx' % (cl_rps / shm_rps, cl_errors):>30}")
    print(f"{'  folder + file create + rename, disk / tmpfs (Python)':56} "
          f"{'%.0f / %.0f us' % (create_us['disk'], create_us['tmpfs']):>16} {'per submission, storage floor':>30}")
    tr = trickle
    (hb, _, _), (sb, _, _) = tr["before"]
    (ha, _, _), (sa, _, _) = tr["after"]
    (hd, hd99, _), (sd, sd99, sd_err) = tr["during"]
    hb, sb = (hb + ha) / 2, (sb + sa) / 2  # without them: the mean of before and after
    print(f"{'%d uploads trickling at 2 KiB/s (tmpfs): held at start / end' % tr['n']:56} "
          f"{'%d / %d' % tr['held']:>16} {'cut: %d' % tr['cut']:>30}")
    print(f"{'  GET /healthz beside them':56} {hd:>10.0f} req/s "
          f"{'%.2f x %.0f without (target >= 0.8)' % (hd / hb, hb):>30}")
    print(f"{'  POST /jobs/echo 1 KiB beside them':56} {sd:>10.0f} req/s "
          f"{'%.2f x %.0f without (target >= 0.8)' % (sd / sb, sb):>30}")
    print(f"{'    their p99 (healthz / submit); non-2xx submits':56} {'%.1f / %.1f ms' % (hd99, sd99):>16} {sd_err:>30}")
    print(f"{'    without them, before / after (healthz; submit)':56} "
          f"{'%.0f / %.0f; %.0f / %.0f' % (tr['before'][0][0], ha, tr['before'][1][0], sa):>47}")
    print(f"{'  gateway RSS while holding them':56} {tr['rss'] / 1024:>13.1f} MiB {'':>30}")
    print(f"{'long-polls held (GET ?wait=60)':56} {loop_result['held']:>16} {n_polls:>30}")
    print(f"{'  gateway RSS while holding them':56} {loop_result['rss'] / 1024:>13.1f} MiB {'target <= 200 MiB':>30}")
    print(f"{'  completion -> response, median / p99 (%d waiters)' % len(lat):56} "
          f"{'%.1f / %.1f ms' % (pct(0.5), pct(0.99)):>16} {'job ' + loop_result['status']:>30}")
    print_upload(up)


def print_upload(up):
    print(f"{'%d MiB upload via the gateway to S3 (one streamed PUT)' % (up['size'] >> 20):56} {'':>16} "
          f"{'vs curl -T straight to S3 (target >= 0.9)':>30}")
    where = {"shared": "processes anywhere on the 2 cores (the hop competes with the S3 server)",
             "apart": "the S3 server on a core of its own (as S3 is remote)"}
    for placement, p in up["placements"].items():
        print(f"  {where[placement]}")
        for label, gw, curl, socat in (("median", p["gw_med"], p["curl_med"], p["socat_med"]),
                                       ("best", p["gw_mbs"], p["curl_mbs"], p["socat_mbs"])):
            print(f"{'    %s of %d runs each' % (label, p['runs']):56} {gw:>12.1f} MiB/s "
                  f"{'%.2f x %.1f MiB/s':>30}" % (gw / curl, curl))
            if socat:
                print(f"{'      the same through socat, a bare TCP forwarder':56} {socat:>12.1f} MiB/s "
                      f"{'%.2f x; gateway %.2f x socat':>30}" % (socat / curl, gw / socat))
        print(f"{'    CPU-s per GiB, median: gateway':56} {p['cpu_gw']:>16.2f} "
              f"{'S3 test server %.2f (direct %.2f)' % (p['cpu_s3_gw'], p['cpu_s3_direct']):>30}")
    print(f"{'  gateway peak RSS (VmHWM)':56} {up['hwm'] / 1024:>13.1f} MiB {'target <= 64 MiB':>30}")
    print(f"{'  stored input size':56} {up['stored']:>16} {up['size']:>30}")


def only_upload():
    work = tempfile.mkdtemp(prefix="relay-gwbench-")
    redis_port = free_port()
    start(["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no", "--dir", work])
    wait_port(redis_port)
    genv = {"RELAY_REDIS_URL": f"redis://127.0.0.1:{redis_port}", "RELAY_SERVICE_TYPES": "echo=m1",
            "RELAY_AUTH_ENABLED": "false", "RELAY_LOG_LEVEL": "warn"}
    print_upload(large_upload(genv, work))
    subprocess.run(["rm", "-rf", work])


try:
    only_upload() if "--only=upload" in sys.argv else main()
finally:
    for p in procs:
        p.kill()
        p.wait()
