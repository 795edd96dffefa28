"""The synchronous client: Client and Job."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Iterator, Optional, Union

import httpx

from . import _core
from ._core import Event, FilePath, Input, Opened
from .errors import RelayError, TransportError


class Client:
    """A Relay gateway. `api_key` defaults to $RELAY_API_KEY. Submissions and reads (a job, its
    result, a listing's pages) are retried up to `retries` times, after a backoff, when the
    gateway cannot be reached or answers 502, 503 or 504 — a submission with the same
    Idempotency-Key, so a retry never makes a second job. (A cancel is not: its second try could
    find the job it cancelled ended, and say so.)"""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        priority_header: str = "X-Priority",
        transport: Optional[httpx.BaseTransport] = None,
    ):
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_core.auth_headers(_core.api_key_or_env(api_key)),
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries
        self.priority_header = priority_header

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- requests -------------------------------------------------------------------------

    def _send(self, req: _core.Request) -> httpx.Response:
        try:
            r = self._http.request(
                req.method, req.path, params=req.params or None, headers=req.headers,
                data=req.data or None, files=req.files, content=req.content,
                timeout=req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as e:
            raise TransportError(0, "unreachable", str(e)) from e
        _core.check(r.status_code, r.content, r.headers)
        return r

    def _run(self, flow: _core.Flow) -> Iterator[Any]:
        """Drives a flow (_core): sends its requests, sleeps its sleeps, yields its items;
        returns its result."""
        try:
            step = next(flow)
            while True:
                if isinstance(step, _core.Item):
                    yield step.value
                    step = flow.send(None)
                elif isinstance(step, _core.Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                else:
                    try:
                        response = self._send(step)
                    except RelayError as e:
                        step = flow.throw(e)
                        continue
                    step = flow.send(response)
        except StopIteration as done:
            return done.value

    def _read(self, path: str) -> httpx.Response:
        return self._drive(_core.read_flow(_core.Request("GET", path), self.retries))

    def _drive(self, flow: _core.Flow) -> Any:
        run = self._run(flow)
        try:
            while True:
                next(run)
        except StopIteration as done:
            return done.value

    # --- jobs -----------------------------------------------------------------------------

    def submit(
        self,
        service_type: str,
        input: Optional[Input] = None,
        *,
        input_url: Optional[str] = None,
        filename: Optional[str] = None,
        content_type: Optional[str] = None,
        operation: Optional[str] = None,
        params: Optional[Dict[str, Any]] = None,
        callback_url: Optional[str] = None,
        webhook_events: Optional[Iterable[str]] = None,
        priority: bool = False,
        idempotency_key: Optional[str] = None,
        ttl: Union[None, int, float, str] = None,
        timeout: Union[None, int, float, str] = None,
        max_attempts: Optional[int] = None,
        wait: float = 0,
    ) -> "Job":
        """Submits a job: its input as a path, a binary file, bytes, or by reference
        (input_url). Files are streamed, never read whole. With wait (seconds), the gateway
        answers once the job ended, or that wait passed (Prefer: wait; at most its max_wait)."""
        key = idempotency_key or _core.new_idempotency_key()
        opened = Opened(input, filename) if input is not None else None

        def build() -> _core.Request:
            return _core.submit_request(
                service_type, opened, content_type=content_type, input_url=input_url,
                operation=operation, params=params, callback_url=callback_url,
                webhook_events=webhook_events, priority=priority,
                priority_header=self.priority_header, idempotency_key=key, ttl=ttl,
                timeout=timeout, max_attempts=max_attempts, wait=int(wait))

        try:
            return Job(self, self._drive(_core.submit_flow(build, opened, self.retries)))
        finally:
            if opened is not None:
                opened.close()

    def job(self, service_type: str, job_id: str) -> "Job":
        return Job(self, self._read(f"/jobs/{service_type}/{job_id}").json())

    def run(self, service_type: str, input: Optional[Input] = None, *,
            wait_timeout: Optional[float] = None, **options: Any) -> Any:
        """submit + wait + result: the model's answer (JSON, or bytes), or JobFailed/JobCancelled.
        The submission itself waits for the job (Prefer: wait) up to a minute of wait_timeout."""
        started = time.monotonic()
        job = self.submit(service_type, input, wait=_core.first_wait(wait_timeout), **options)
        job.wait(_core.time_left(wait_timeout, started))
        return job.result()

    def jobs(
        self,
        service_type: Optional[str] = None,
        *,
        status: Union[None, str, Iterable[str]] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        limit: Optional[int] = None,
        page_size: int = 100,
    ) -> Iterator["Job"]:
        """The tenant's jobs, newest first, following pages (up to `limit` jobs if given)."""
        path = f"/jobs/{service_type}" if service_type else "/jobs"

        def params(want: int, cursor: Optional[str]) -> Dict[str, str]:
            return _core.list_params(status, since, until, idempotency_key, want, cursor)

        for data in self._run(_core.list_flow(path, params, limit, page_size, self.retries)):
            yield Job(self, data)


class Job:
    """A job: `data` is its JSON as last read; refresh(), wait(), result(), download(), cancel(),
    events()."""

    def __init__(self, client: Client, data: Dict[str, Any]):
        self._client = client
        self.data = data

    def __repr__(self) -> str:
        return f"Job({self.service_type}/{self.id}, {self.status})"

    id = property(lambda self: self.data["id"])
    service_type = property(lambda self: self.data["service_type"])
    status = property(lambda self: self.data["status"])
    error = property(lambda self: self.data.get("error"))
    progress = property(lambda self: self.data.get("progress"))

    @property
    def done(self) -> bool:
        return self.status in _core.TERMINAL

    @property
    def _path(self) -> str:
        return f"/jobs/{self.service_type}/{self.id}"

    def refresh(self) -> "Job":
        self.data = self._client._read(self._path).json()
        return self

    def wait(self, timeout: Optional[float] = None, reconnect: int = 5) -> "Job":
        """Long-polls until the job ends (or `timeout` seconds pass: WaitTimeout). A failed or
        cancelled job raises JobFailed / JobCancelled; the completed job is returned. A poll
        the gateway did not answer, or answered 502/503/504 (restarting, Redis failing over),
        is sent again after a backoff, up to `reconnect` times in a row."""
        self.data = self._client._drive(
            _core.wait_flow(self.data, self._path, timeout, reconnect))
        _core.job_or_raise(self.data)
        return self

    def result(self) -> Any:
        """The completed job's result: parsed JSON when the model answered JSON, else bytes."""
        r = self._client._read(f"{self._path}/result")
        return _core.decode_result(r.content, r.headers.get("content-type", ""))

    def download(self, path: FilePath, reconnect: int = 5) -> int:
        """Streams the completed job's result into the file at `path`, never whole in memory,
        and returns its size. A download cut midway resumes where it stopped (up to `reconnect`
        cuts in a row); the file appears at `path` only once whole."""
        d = _core.ResultDownload(reconnect)
        with _core.file_once_whole(path) as f:
            while True:
                try:
                    with self._client._http.stream("GET", f"{self._path}/result",
                                                   headers=d.request_headers()) as r:
                        if r.status_code >= 400:
                            r.read()
                            _core.check(r.status_code, r.content, r.headers)
                        d.start(r.status_code, r.headers, f)
                        for chunk in r.iter_bytes():
                            d.write(f, chunk)
                    if d.whole:
                        return d.got
                except httpx.TransportError:
                    pass
                time.sleep(d.after_cut())

    def cancel(self) -> "Job":
        self.data = self._client._send(_core.Request("DELETE", self._path)).json()
        return self

    def events(self, reconnect: int = 5) -> Iterator[Event]:
        """The job's live events until its end; a dropped stream is resumed (Last-Event-ID), as is
        one refused for now (502, 503, 504), up to `reconnect` times in a row."""
        last_id = ""
        tries = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            parser = _core.SseParser()
            refused: Optional[RelayError] = None
            try:
                with self._client._http.stream("GET", f"{self._path}/events", headers=headers,
                                               timeout=httpx.Timeout(60.0, read=None)) as r:
                    if r.status_code >= 400:
                        r.read()
                        _core.check(r.status_code, r.content, r.headers)
                    for text in r.iter_text():
                        for event in parser.feed(text):
                            last_id, tries = event.id, 0
                            self.data = event.job
                            yield event
                            if event.terminal:
                                return
                # The server closes after a terminal event; a stream that ended without one was
                # cut (a gateway restarting): resume.
                if self.done:
                    return
            except httpx.TransportError:
                pass
            except RelayError as e:  # 503 (Redis failing over), a proxy's 502/504: again
                if not _core.retryable(e):
                    raise
                refused = e
            tries += 1
            if tries > reconnect:
                raise refused or TransportError(0, "unreachable", "the event stream kept dropping")
            time.sleep(_core.reconnect_after(tries, refused))
