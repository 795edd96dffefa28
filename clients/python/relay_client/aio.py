"""The asynchronous twin: AsyncClient and AsyncJob, the same methods awaited (same _core)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Dict, Iterable, Optional, Tuple, Union

import httpx

from . import _core
from ._core import Event, FilePath, Input, Opened
from .errors import RelayError, TransportError


class AsyncClient:
    """See Client; every method that talks to the gateway is a coroutine."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        priority_header: str = "X-Priority",
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ):
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=_core.auth_headers(_core.api_key_or_env(api_key)),
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries
        self.priority_header = priority_header

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, req: _core.Request) -> httpx.Response:
        try:
            r = await self._http.request(
                req.method, req.path, params=req.params or None, headers=req.headers,
                data=req.data or None, files=req.files, content=req.content,
                timeout=req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as e:
            raise TransportError(0, "unreachable", str(e)) from e
        _core.check(r.status_code, r.content, r.headers)
        return r

    # (A StopIteration may not cross a coroutine's frame, PEP 479: a flow's end is caught here
    # and handed on as (True, result).)
    async def _step(self, flow: _core.Flow, step: Any) -> Tuple[bool, Any]:
        """One step of a flow: (False, its next step) or (True, its result)."""
        try:
            if isinstance(step, _core.Item):
                return False, flow.send(None)
            if isinstance(step, _core.Sleep):
                await asyncio.sleep(step.seconds)
                return False, flow.send(None)
            try:
                response = await self._send(step)
            except RelayError as e:
                return False, flow.throw(e)
            return False, flow.send(response)
        except StopIteration as done:
            return True, done.value

    async def _read(self, path: str) -> httpx.Response:
        return await self._drive(_core.read_flow(_core.Request("GET", path), self.retries))

    async def _drive(self, flow: _core.Flow) -> Any:
        """Drives a flow without items (_core); its result."""
        done, step = await self._step(flow, _core.Item(None))  # (an Item starts it: send(None))
        while not done:
            done, step = await self._step(flow, step)
        return step

    async def _iterate(self, flow: _core.Flow) -> AsyncIterator[Any]:
        """Drives a flow, yielding its items."""
        done, step = await self._step(flow, _core.Item(None))
        while not done:
            if isinstance(step, _core.Item):
                yield step.value
            done, step = await self._step(flow, step)

    async def submit(
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
    ) -> "AsyncJob":
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
            return AsyncJob(self, await self._drive(_core.submit_flow(build, opened, self.retries)))
        finally:
            if opened is not None:
                opened.close()

    async def job(self, service_type: str, job_id: str) -> "AsyncJob":
        r = await self._read(f"/jobs/{service_type}/{job_id}")
        return AsyncJob(self, r.json())

    async def run(self, service_type: str, input: Optional[Input] = None, *,
                  wait_timeout: Optional[float] = None, **options: Any) -> Any:
        started = time.monotonic()
        job = await self.submit(service_type, input, wait=_core.first_wait(wait_timeout),
                                **options)
        await job.wait(_core.time_left(wait_timeout, started))
        return await job.result()

    async def jobs(
        self,
        service_type: Optional[str] = None,
        *,
        status: Union[None, str, Iterable[str]] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        limit: Optional[int] = None,
        page_size: int = 100,
    ) -> AsyncIterator["AsyncJob"]:
        path = f"/jobs/{service_type}" if service_type else "/jobs"

        def params(want: int, cursor: Optional[str]) -> Dict[str, str]:
            return _core.list_params(status, since, until, idempotency_key, want, cursor)

        async for data in self._iterate(_core.list_flow(path, params, limit, page_size, self.retries)):
            yield AsyncJob(self, data)


class AsyncJob:
    def __init__(self, client: AsyncClient, data: Dict[str, Any]):
        self._client = client
        self.data = data

    def __repr__(self) -> str:
        return f"AsyncJob({self.service_type}/{self.id}, {self.status})"

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

    async def refresh(self) -> "AsyncJob":
        self.data = (await self._client._read(self._path)).json()
        return self

    async def wait(self, timeout: Optional[float] = None, reconnect: int = 5) -> "AsyncJob":
        self.data = await self._client._drive(
            _core.wait_flow(self.data, self._path, timeout, reconnect))
        _core.job_or_raise(self.data)
        return self

    async def result(self) -> Any:
        r = await self._client._read(f"{self._path}/result")
        return _core.decode_result(r.content, r.headers.get("content-type", ""))

    async def download(self, path: FilePath, reconnect: int = 5) -> int:
        d = _core.ResultDownload(reconnect)
        with _core.file_once_whole(path) as f:
            while True:
                try:
                    async with self._client._http.stream(
                            "GET", f"{self._path}/result", headers=d.request_headers()) as r:
                        if r.status_code >= 400:
                            await r.aread()
                            _core.check(r.status_code, r.content, r.headers)
                        d.start(r.status_code, r.headers, f)
                        async for chunk in r.aiter_bytes():
                            d.write(f, chunk)
                    if d.whole:
                        return d.got
                except httpx.TransportError:
                    pass
                await asyncio.sleep(d.after_cut())

    async def cancel(self) -> "AsyncJob":
        self.data = (await self._client._send(_core.Request("DELETE", self._path))).json()
        return self

    async def events(self, reconnect: int = 5) -> AsyncIterator[Event]:
        last_id = ""
        tries = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            parser = _core.SseParser()
            refused: Optional[RelayError] = None
            try:
                async with self._client._http.stream(
                        "GET", f"{self._path}/events", headers=headers,
                        timeout=httpx.Timeout(60.0, read=None)) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        _core.check(r.status_code, r.content, r.headers)
                    async for text in r.aiter_text():
                        for event in parser.feed(text):
                            last_id, tries = event.id, 0
                            self.data = event.job
                            yield event
                            if event.terminal:
                                return
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
            await asyncio.sleep(_core.reconnect_after(tries, refused))
