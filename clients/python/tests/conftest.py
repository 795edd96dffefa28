"""A real stack for the client's tests, started once per session: redis-server, the gateway
(auth on, webhooks signed), relays and the no-op model — the project's own binaries, found in
$RELAY_BIN_DIR (default: build/bin of the repository)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package, uninstalled

REPO = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("RELAY_BIN_DIR", REPO / "build" / "bin"))
API_KEY = "py-client-key"
OTHER_KEY = "py-other-tenant"
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on {port}")


class Stack:
    def __init__(self, root: Path):
        self.root = root
        self.procs: List[subprocess.Popen] = []
        self.redis_port = free_port()
        self.gateway_port = free_port()
        self.url = f"http://127.0.0.1:{self.gateway_port}"
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}"

    def spawn(self, argv: List[str], env: Dict[str, str], name: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        p = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def start(self) -> None:
        redis = self.spawn(["redis-server", "--port", str(self.redis_port), "--save", "",
                            "--appendonly", "no", "--dir", str(self.root)], {}, "redis")
        wait_port(self.redis_port, redis, "redis-server")
        self.redis = redis
        # echo: the no-op model at once; slow: 1.5 s with three progress reports.
        for model, extra in (("m1", []), ("m2", ["--delay-ms", "1500", "--progress-steps", "3"])):
            port = free_port()
            noop = self.spawn([str(BIN / "relay-inference-noop"), "--listen",
                               f"127.0.0.1:{port}", *extra], {}, f"noop-{model}")
            wait_port(port, noop, "relay-inference-noop")
            for i in range(2):
                self.spawn([str(BIN / "relay"), "--max-jobs", "0"], {
                    "RELAY_MODEL": model, "RELAY_REDIS_URL": self.redis_url,
                    "RELAY_STORAGE_URL": f"file://{self.root}/storage",
                    "RELAY_INFERENCE_URL": f"http://127.0.0.1:{port}",
                    "RELAY_INFERENCE_ROUTES": "default=/predict,transcribe=/transcribe",
                    "RELAY_QUEUE_POP_TIMEOUT": "1h", "RELAY_RELAY_PROGRESS_INTERVAL": "50ms",
                    "RELAY_RELAY_HEALTH_INTERVAL": "50ms"}, f"relay-{model}-{i}")
        self.gateway(self.gateway_port)

    def gateway(self, port: int, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        """A gateway replica on port (the stack's own, or another sharing its Redis), listening;
        env: settings of its own."""
        keys = ",".join(f"{hashlib.sha256(k.encode()).hexdigest()}={t}"
                        for k, t in ((API_KEY, "py"), (OTHER_KEY, "other")))
        gw = self.spawn([str(BIN / "relay-gateway")], {
            "RELAY_SERVER_LISTEN": f"127.0.0.1:{port}",
            "RELAY_REDIS_URL": self.redis_url,
            "RELAY_STORAGE_URL": f"file://{self.root}/storage",
            "RELAY_SERVICE_TYPES": "echo=m1,slow=m2",
            "RELAY_AUTH_ENABLED": "true", "RELAY_AUTH_API_KEYS": keys,
            "RELAY_WEBHOOKS_SECRET": WEBHOOK_SECRET, "RELAY_WEBHOOKS_ALLOW_PRIVATE": "true",
            "RELAY_WEBHOOKS_INITIAL_BACKOFF": "100ms", "RELAY_SERVER_MAX_BODY_SIZE": str(8 << 20),
            "RELAY_EVENTS_CONSUMER": f"gateway-{port}", **(env or {}),
        }, f"gateway-{port}")
        wait_port(port, gw, "relay-gateway")
        return gw

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="session")
def stack():
    if not (BIN / "relay-gateway").exists():
        pytest.fail(f"no relay-gateway in {BIN}: build first, or set RELAY_BIN_DIR")
    with tempfile.TemporaryDirectory(prefix="relay-py-") as d:
        s = Stack(Path(d))
        try:
            s.start()
            yield s
        finally:
            s.stop()


@pytest.fixture
def client(stack):
    from relay_client import Client

    with Client(stack.url, api_key=API_KEY) as c:
        yield c


class Receiver:
    """A webhook receiver on loopback: what it got, headers and body."""

    def __init__(self) -> None:
        self.received: List[Dict] = []
        got = self.received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                got.append({"headers": dict(self.headers), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def wait_for(pred, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False
