"""What the sync and async clients share: building requests, reading answers, parsing events.

No network I/O here: client.py and aio.py send what these functions build, each with its own httpx
client, so the two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
import time
from typing import (Any, BinaryIO, Callable, Dict, Generator, Iterable, Iterator, List, Optional,
                    Tuple, Union)

from .errors import JobCancelled, JobFailed, RelayError, TransportError, error_for

# An input: a path, a binary file object, or the bytes themselves.
Input = Union[str, "os.PathLike[str]", bytes, bytearray, BinaryIO]
FilePath = Union[str, "os.PathLike[str]"]

TERMINAL = ("completed", "failed", "cancelled")

# Every route and job field the clients use, checked against the gateway's /openapi.json by the
# tests: the client cannot call what the API does not document.
ROUTES_USED = [
    ("post", "/jobs/{service_type}"),
    ("get", "/jobs/{service_type}"),
    ("get", "/jobs"),
    ("get", "/jobs/{service_type}/{id}"),
    ("delete", "/jobs/{service_type}/{id}"),
    ("get", "/jobs/{service_type}/{id}/result"),
    ("get", "/jobs/{service_type}/{id}/events"),
]
SUBMIT_FIELDS_USED = [
    "file", "operation", "params", "callback_url", "webhook_events", "ttl", "timeout",
    "max_attempts", "input_url",
]
JOB_FIELDS_USED = ["id", "service_type", "status", "error", "progress", "result_url"]
LIST_PARAMS_USED = ["status", "since", "until", "idempotency_key", "limit", "cursor"]


@dataclass
class Request:
    method: str
    path: str
    params: Dict[str, str] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)
    data: Dict[str, str] = field(default_factory=dict)
    files: Optional[Dict[str, Tuple[str, BinaryIO, str]]] = None
    content: Optional[bytes] = None
    timeout: Optional[float] = None  # this request's, when not the client's


@dataclass
class Event:
    """One Server-Sent Event of a job: its name (pending, processing, progress, completed,
    failed, cancelled), id, and the job's JSON at that moment."""

    id: str
    name: str
    job: Dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.name in TERMINAL


def api_key_or_env(api_key: Optional[str]) -> Optional[str]:
    return api_key if api_key is not None else os.environ.get("RELAY_API_KEY") or None


def auth_headers(api_key: Optional[str]) -> Dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _duration(value: Union[None, int, float, str]) -> Optional[str]:
    """ttl and timeout: seconds as numbers, or the API's duration strings ("15m")."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError("durations must be positive")
        return f"{int(value * 1000)}ms" if value != int(value) else str(int(value))
    return str(value)


class Opened:
    """The input opened for one attempt of a submission; close() releases a file we opened."""

    def __init__(self, source: Input, filename: Optional[str]):
        self._own = None
        if isinstance(source, (bytes, bytearray)):
            import io

            self.file: BinaryIO = io.BytesIO(bytes(source))
            self.filename = filename or "input"
        elif isinstance(source, (str, os.PathLike)):
            self._own = open(source, "rb")  # streamed by httpx, never read whole
            self.file = self._own
            self.filename = filename or os.path.basename(os.fspath(source))
        else:
            self.file = source
            try:
                self._start = source.tell()
            except (AttributeError, OSError):
                self._start = None
            self.filename = filename or os.path.basename(getattr(source, "name", "") or "input")

    def rewind(self) -> bool:
        """Back to the start for a retry; False when the source cannot go back."""
        if self._own is not None:
            self._own.seek(0)
            return True
        try:
            self.file.seek(getattr(self, "_start", 0) or 0)
            return True
        except (AttributeError, OSError):
            return False

    def close(self) -> None:
        if self._own is not None:
            self._own.close()


def submit_request(
    service_type: str,
    opened: Optional[Opened],
    *,
    content_type: Optional[str],
    input_url: Optional[str],
    operation: Optional[str],
    params: Optional[Dict[str, Any]],
    callback_url: Optional[str],
    webhook_events: Optional[Iterable[str]],
    priority: bool,
    priority_header: str,
    idempotency_key: str,
    ttl: Union[None, int, float, str],
    timeout: Union[None, int, float, str],
    max_attempts: Optional[int],
    wait: int = 0,
) -> Request:
    if (opened is None) == (input_url is None):
        raise ValueError("give an input (path, file or bytes) or input_url, not both")
    data: Dict[str, str] = {}
    for name, value in (
        ("operation", operation),
        ("params", json.dumps(params, separators=(",", ":")) if params is not None else None),
        ("callback_url", callback_url),
        ("webhook_events", ",".join(webhook_events) if webhook_events else None),
        ("ttl", _duration(ttl)),
        ("timeout", _duration(timeout)),
        ("max_attempts", str(max_attempts) if max_attempts is not None else None),
        ("input_url", input_url),
    ):
        if value is not None:
            data[name] = value
    headers = {"Idempotency-Key": idempotency_key}
    if priority:
        headers[priority_header] = "1"
    # Prefer: wait (RFC 7240): the gateway holds its answer until the job ends, up to `wait`
    # seconds (and its server.max_wait): 200 and the ended job, or 202 and the job as it is.
    request_timeout = None
    if wait > 0:
        headers["Prefer"] = f"wait={wait}"
        request_timeout = wait + 30.0
    if opened is None:
        # By reference: no body, the options in the query (the API's raw-body form).
        return Request("POST", f"/jobs/{service_type}", params=data, headers=headers, content=b"",
                       timeout=request_timeout)
    req = Request("POST", f"/jobs/{service_type}", headers=headers, data=data,
                  timeout=request_timeout)
    req.files = {"file": (opened.filename, opened.file, content_type or "application/octet-stream")}
    return req


def first_wait(timeout: Optional[float]) -> int:
    """How long run()'s submission asks the gateway to wait (Prefer: wait): a minute at most,
    the rest by long-poll. A job that ends within it costs run() no request but its result's."""
    return 60 if timeout is None else max(0, min(60, int(timeout)))


def time_left(timeout: Optional[float], started: float) -> Optional[float]:
    """What is left of timeout (None: no limit) since started (time.monotonic())."""
    return None if timeout is None else max(0.0, timeout - (time.monotonic() - started))


def new_idempotency_key() -> str:
    return f"relay-py-{uuid.uuid4()}"


def check(status: int, body: bytes, headers: Any) -> None:
    if status >= 400:
        raise error_for(status, body, headers.get("retry-after"))


def job_or_raise(job: Dict[str, Any]) -> Dict[str, Any]:
    """After a wait: the job if it completed, else the typed error for how it ended."""
    if job["status"] == "failed":
        raise JobFailed(job)
    if job["status"] == "cancelled":
        raise JobCancelled(job)
    return job


def decode_result(body: bytes, content_type: str) -> Union[Any, bytes]:
    if content_type.split(";")[0].strip().lower() == "application/json":
        return json.loads(body)
    return body


@contextlib.contextmanager
def file_once_whole(path: FilePath) -> Iterator[BinaryIO]:
    """A file written as `<path>.part` and moved to `path` when the block ends; removed if the
    block raises: a file at `path` is always whole."""
    part = f"{os.fspath(path)}.part"
    try:
        with open(part, "wb") as f:
            yield f
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)
        raise


class ResultDownload:
    """A result streamed into a file and resumed where a cut left it: the next request asks for
    the bytes after those written (Range), on condition the result is still the one they came
    from (If-Range with its ETag); a whole result sent instead starts the file over. The shells
    do the I/O, this decides."""

    def __init__(self, reconnect: int):
        self.reconnect = reconnect
        self.got = 0  # bytes written
        self.total: Optional[int] = None
        self.etag: Optional[str] = None
        self.tries = 0

    def request_headers(self) -> Dict[str, str]:
        if self.got and self.etag:
            return {"Range": f"bytes={self.got}-", "If-Range": self.etag}
        return {}

    def start(self, status: int, headers: Any, f: BinaryIO) -> None:
        """Reads an answer's header: the rest of the result (206), or all of it (200), which
        starts the file over."""
        self.etag = headers.get("etag")
        if status == 206:
            m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", headers.get("content-range", ""))
            if not m or int(m.group(1)) != self.got:
                raise RelayError(status, "bad_range", "the gateway answered another range: "
                                 + headers.get("content-range", "none"))
            self.total = int(m.group(3))
            return
        length = headers.get("content-length")
        self.total = int(length) if length is not None else None
        if self.got:
            f.seek(0)
            f.truncate()
            self.got = 0

    def write(self, f: BinaryIO, chunk: bytes) -> None:
        f.write(chunk)
        self.got += len(chunk)
        if chunk:  # progress: the cuts counted are those in a row without any
            self.tries = 0

    @property
    def whole(self) -> bool:
        return self.total is None or self.got >= self.total

    def after_cut(self) -> float:
        """The pause before resuming; TransportError after `reconnect` cuts in a row."""
        self.tries += 1
        if self.tries > self.reconnect:
            raise TransportError(0, "unreachable", "the result download kept dropping")
        return min(0.2 * 2**self.tries, 5.0)


def list_params(
    status: Union[None, str, Iterable[str]],
    since: Optional[str],
    until: Optional[str],
    idempotency_key: Optional[str],
    page_size: int,
    cursor: Optional[str],
) -> Dict[str, str]:
    p: Dict[str, str] = {"limit": str(page_size)}
    if status:
        p["status"] = status if isinstance(status, str) else ",".join(status)
    for name, value in (("since", since), ("until", until), ("idempotency_key", idempotency_key), ("cursor", cursor)):
        if value:
            p[name] = value
    return p


class SseParser:
    """Server-Sent Events, fed text as it arrives (lines may be split across chunks)."""

    def __init__(self) -> None:
        self._buf = ""
        self._id = ""
        self._name = ""
        self._data: List[str] = []

    def feed(self, text: str) -> List[Event]:
        self._buf += text.replace("\r\n", "\n")
        out: List[Event] = []
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line == "":
                if self._data:
                    out.append(Event(self._id, self._name or "message", json.loads("\n".join(self._data))))
                self._name, self._data = "", []
                continue
            if line.startswith(":"):
                continue  # a keep-alive comment
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                self._id = value
            elif name == "event":
                self._name = value
            elif name == "data":
                self._data.append(value)
        return out


def retryable(error: Exception) -> bool:
    """Worth sending the same request again (a submission with its Idempotency-Key): no answer,
    or one that says to try later — a 503 (Redis restarting or failing over), a proxy's 502 or
    504 (a gateway restarting behind an ingress) —, or the key's first submission in progress."""
    if isinstance(error, RelayError):
        return error.status in (0, 502, 503, 504) or error.code == "idempotency_in_progress"
    return False


def backoff(attempt: int, error: RelayError) -> float:
    """Seconds before the next try: the server's Retry-After, else 0.5 s doubling, at most 10."""
    return min(error.retry_after or 0.5 * 2**attempt, 10.0)


# --- The operations as flows ----------------------------------------------------------------
# Each operation is a generator that yields what it needs done — a Request to send (it gets the
# answer back, or the RelayError thrown in), a Sleep, an Item to hand the caller — and returns
# its result. client.py and aio.py each drive them with their own I/O: one logic, two shells.


@dataclass
class Sleep:
    seconds: float


@dataclass
class Item:
    value: Any


Flow = Generator[Union[Request, Sleep, Item], Any, Any]


def submit_flow(build: Callable[[], Request], opened: Optional[Opened], retries: int) -> Flow:
    """POST the submission; on no answer or a 503, again with the same Idempotency-Key."""
    for attempt in range(retries + 1):
        try:
            response = yield build()
            return response.json()
        except RelayError as e:
            if attempt == retries or not retryable(e):
                raise
            if opened is not None and not opened.rewind():
                raise
            yield Sleep(backoff(attempt, e))
    raise AssertionError("unreachable")


def reconnect_after(tries: int, refused: Optional[RelayError]) -> float:
    """Seconds before an event stream's next try: Retry-After when refused, else 0.4 s doubling;
    at most 5 (10 for Retry-After)."""
    if refused is not None and refused.retry_after:
        return min(refused.retry_after, 10.0)
    return min(0.2 * 2**tries, 5.0)


def read_flow(request: Request, retries: int) -> Flow:
    """A read (GET): sent again after no answer or a 502/503/504, up to `retries` times; the
    response."""
    for attempt in range(retries + 1):
        try:
            return (yield request)
        except RelayError as e:
            if attempt == retries or not retryable(e):
                raise
            yield Sleep(backoff(attempt, e))
    raise AssertionError("unreachable")


def wait_flow(job: Dict[str, Any], path: str, timeout: Optional[float],
              reconnect: int = 5) -> Flow:
    """Long-polls (60 s at a time, within timeout) until the job ends; its final JSON. A poll
    without an answer, or told to try later (retryable), is sent again after a backoff, up to
    `reconnect` times in a row: a wait rides out a gateway's restart and a Redis failover."""
    deadline = None if timeout is None else time.monotonic() + timeout
    failed = 0
    while job["status"] not in TERMINAL:
        left = 60.0 if deadline is None else deadline - time.monotonic()
        if left <= 0:
            from .errors import WaitTimeout

            raise WaitTimeout(job, timeout or 0)
        wait = max(1, min(60, int(left)))
        try:
            response = yield Request("GET", path, params={"wait": str(wait)}, timeout=wait + 30)
        except RelayError as e:
            if failed >= reconnect or not retryable(e):
                raise
            yield Sleep(min(backoff(failed, e), left))
            failed += 1
            continue
        failed = 0
        job = response.json()
    return job


def list_flow(path: str, params: Callable[[int, Optional[str]], Dict[str, str]],
              limit: Optional[int], page_size: int, retries: int) -> Flow:
    """The listing's pages, followed: yields an Item per job."""
    cursor: Optional[str] = None
    given = 0
    while True:
        want = page_size if limit is None else min(page_size, limit - given)
        if want <= 0:
            return None
        page = (yield from read_flow(Request("GET", path, params=params(want, cursor)),
                                     retries)).json()
        for j in page["jobs"]:
            given += 1
            yield Item(j)
        cursor = page.get("next_cursor")
        if not cursor:
            return None
