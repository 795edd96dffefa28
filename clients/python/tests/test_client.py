"""The client against a real gateway, relays and the no-op model (conftest.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import signal
import threading

import httpx
import pytest

from conftest import API_KEY, OTHER_KEY, WEBHOOK_SECRET, free_port, wait_for
from relay_client import (AsyncClient, AuthenticationFailed, Client, Conflict, InvalidRequest,
                          JobCancelled, NotFound, TransportError, WaitTimeout,
                          WebhookVerificationError,
                          verify_webhook)


def file_part(answer):
    return next(p for p in answer["parts"] if p["name"] == "file")


def test_submit_a_path_wait_and_read_the_result(client, tmp_path):
    data = bytes(range(256)) * 4096  # 1 MiB
    path = tmp_path / "clip.bin"
    path.write_bytes(data)
    job = client.submit("echo", path, params={"lang": "en", "n": 0.1}, operation="transcribe")
    assert job.status == "pending" and job.service_type == "echo"
    assert job.wait(30) is job and job.status == "completed"
    answer = job.result()
    assert answer["path"] == "/transcribe"
    assert file_part(answer)["sha256"] == hashlib.sha256(data).hexdigest()
    assert file_part(answer)["filename"] == "clip.bin"
    fields = {p["name"]: p.get("value") for p in answer["parts"]}
    assert fields["lang"] == "en" and fields["n"] == "0.1"


def test_bytes_and_file_objects_and_run(client):
    answer = client.run("echo", b"hello", filename="a.txt", content_type="text/plain",
                        wait_timeout=30)
    assert file_part(answer)["size"] == 5 and file_part(answer)["content_type"] == "text/plain"
    answer = client.run("echo", io.BytesIO(b"x" * 1000), wait_timeout=30)
    assert file_part(answer)["size"] == 1000


def test_a_submission_that_waits_for_its_job(client, stack):
    # Prefer: wait — the gateway answers once the job ended: no long-poll needed.
    job = client.submit("echo", b"quick", wait=30)
    assert job.done and job.status == "completed"
    # A wait shorter than the job: answered with the job as it is, then waited for as usual.
    slow = client.submit("slow", b"x", wait=1)
    assert not slow.done
    assert slow.wait(30).status == "completed"

    # run(): its submission waits, so a quick job costs two requests in all (the submission and
    # the result's download).
    class Counting(httpx.HTTPTransport):
        sent: list = []

        def handle_request(self, request):
            self.sent.append(request.method)
            return super().handle_request(request)

    counting = Counting()
    with Client(stack.url, api_key=API_KEY, transport=counting) as counted:
        answer = counted.run("echo", b"hello", wait_timeout=30)
    assert file_part(answer)["size"] == 5
    assert counting.sent == ["POST", "GET"]


def test_errors_are_typed(client, stack):
    with pytest.raises(NotFound) as e:
        client.submit("nope", b"x")
    assert e.value.code == "unknown_service_type" and e.value.status == 404
    with pytest.raises(InvalidRequest) as e:
        client.submit("echo", b"x", max_attempts=99)
    assert e.value.code == "invalid_max_attempts"
    with pytest.raises(NotFound):
        client.job("echo", "11111111-1111-4111-8111-111111111111")
    with Client(stack.url, api_key="wrong") as bad:
        with pytest.raises(AuthenticationFailed):
            bad.submit("echo", b"x")
    with pytest.raises(ValueError):
        client.submit("echo")  # no input at all


def test_another_tenants_job_is_not_found(client, stack):
    job = client.submit("echo", b"mine")
    with Client(stack.url, api_key=OTHER_KEY) as other:
        with pytest.raises(NotFound):
            other.job("echo", job.id)


def test_api_key_from_the_environment(stack, monkeypatch):
    monkeypatch.setenv("RELAY_API_KEY", API_KEY)
    with Client(stack.url) as c:
        assert c.submit("echo", b"x").wait(30).status == "completed"


def test_wait_timeout_cancel_and_a_cancelled_job(client):
    job = client.submit("slow", b"x")
    with pytest.raises(WaitTimeout):
        job.wait(timeout=0.2)
    job.cancel()
    assert job.status in ("cancelled", "processing", "pending")
    with pytest.raises(JobCancelled):
        job.wait(30)
    with pytest.raises(Conflict) as e:
        job.cancel()
    assert e.value.code == "job_already_ended" or e.value.status == 409


def test_listing_follows_pages(client):
    ids = [client.submit("echo", b"page", idempotency_key=f"list-{i}").id for i in range(5)]
    listed = [j.id for j in client.jobs("echo", page_size=2, limit=200)]
    assert listed.index(ids[4]) < listed.index(ids[0]), "newest first"
    assert set(ids) <= set(listed)
    assert len(listed) == len(set(listed)), "each job once"
    assert [j.id for j in client.jobs(idempotency_key="list-3")] == [ids[3]]
    assert len(list(client.jobs("echo", limit=3))) == 3


def test_a_retried_submit_makes_one_job(stack):
    """The first attempt reaches the gateway, its answer is lost: the retry carries the same
    Idempotency-Key and gets the first job back."""
    calls = {"n": 0}

    class LoseFirstAnswer(httpx.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            calls["n"] += 1
            if calls["n"] == 1:
                response.read()
                raise httpx.ReadError("the answer was lost", request=request)
            return response

    with Client(stack.url, api_key=API_KEY, transport=LoseFirstAnswer()) as c:
        job = c.submit("echo", b"exactly once", filename="once.txt")
    assert calls["n"] == 2
    with Client(stack.url, api_key=API_KEY) as c:
        named = [j for j in c.jobs("echo", limit=100) if j.data["input"]["filename"] == "once.txt"]
    assert [j.id for j in named] == [job.id]


class CountingRefusals(httpx.HTTPTransport):
    """The real transport, counting the connections refused (a gateway down)."""

    def __init__(self):
        super().__init__()
        self.refused = 0

    def handle_request(self, request):
        try:
            return super().handle_request(request)
        except httpx.ConnectError:
            self.refused += 1
            raise


@pytest.mark.parametrize("call", ["wait", "refresh", "result", "listing"])
def test_a_call_rides_out_a_gateway_restart(stack, call):
    """A call whose gateway is down (a restart, a rolling update) is sent again after a backoff,
    and answered once the gateway is back; it raised at the first refused connection."""
    port = free_port()
    replica = stack.gateway(port)  # a replica of its own, stopped and started by this test
    transport = CountingRefusals()
    try:
        with Client(f"http://127.0.0.1:{port}", api_key=API_KEY, transport=transport,
                    retries=5) as c:
            job = c.submit("echo", b"ridden out", idempotency_key=f"restart-{call}")
            if call != "wait":
                job.wait(30)
            replica.terminate()
            replica.wait(10)
            calls = {"wait": lambda: job.wait(timeout=60).status,
                     "refresh": lambda: job.refresh().status,
                     "result": lambda: file_part(job.result())["size"],
                     "listing": lambda: [j.id for j in c.jobs(idempotency_key=f"restart-{call}")]}
            got = {}

            def run():
                try:
                    got["answer"] = calls[call]()
                except Exception as e:  # (the assertion below says which)
                    got["error"] = e
            running = threading.Thread(target=run, daemon=True)
            running.start()
            assert wait_for(lambda: transport.refused >= 2 or "error" in got), got
            replica = stack.gateway(port)
            running.join(60)
        assert "error" not in got, got
        assert got["answer"] == {"wait": "completed", "refresh": "completed", "result": 10,
                                 "listing": [job.id]}[call]
    finally:
        replica.terminate()
        replica.wait(10)


def test_events_ride_out_a_redis_outage(stack):
    """An event stream asked for while Redis does not answer is refused (503, after the
    gateway's redis.retry_timeout) and asked for again after Retry-After, to the job's end once
    Redis is back; it raised at the refusal."""
    port = free_port()
    replica = stack.gateway(port, {"RELAY_REDIS_RETRY_TIMEOUT": "1s"})  # (refuses sooner)

    class Counting503s(httpx.HTTPTransport):
        refused = 0

        def handle_request(self, request):
            response = super().handle_request(request)
            if response.status_code == 503:
                Counting503s.refused += 1
            return response

    try:
        with Client(f"http://127.0.0.1:{port}", api_key=API_KEY,
                    transport=Counting503s()) as c:
            job = c.submit("slow", b"followed")
            names, got = [], {}

            def follow():
                try:
                    names.extend(e.name for e in job.events())
                except Exception as e:  # (the assertion below says which)
                    got["error"] = e
            stack.redis.send_signal(signal.SIGSTOP)
            try:
                following = threading.Thread(target=follow, daemon=True)
                following.start()
                assert wait_for(lambda: Counting503s.refused >= 1 or "error" in got), got
            finally:
                stack.redis.send_signal(signal.SIGCONT)
            following.join(60)
        assert "error" not in got, got
        assert names[-1] == "completed"
    finally:
        replica.terminate()
        replica.wait(10)


def test_events_until_the_end(client):
    job = client.submit("slow", b"x")
    names = [e.name for e in job.events()]
    assert names[0] in ("pending", "processing", "progress")
    assert names[-1] == "completed"
    assert "progress" in names
    assert job.status == "completed" and job.progress["fraction"] > 0


def test_the_async_twin(stack):
    async def main():
        async with AsyncClient(stack.url, api_key=API_KEY) as c:
            job = await c.submit("echo", b"async", filename="a.bin")
            await job.wait(30)
            answer = await job.result()
            assert file_part(answer)["size"] == 5
            slow = await c.submit("slow", b"x")
            names = [e.name async for e in slow.events()]
            assert names[-1] == "completed"
            listed = [j.id async for j in c.jobs("echo", limit=50)]
            assert job.id in listed
            with pytest.raises(NotFound):
                await c.job("echo", "11111111-1111-4111-8111-111111111111")

    asyncio.run(main())


def test_webhooks_verify(client, receiver):
    job = client.submit("echo", b"hook", callback_url=receiver.url,
                        webhook_events=["started", "terminal"])
    job.wait(30)
    assert wait_for(lambda: any(json.loads(r["body"])["event"] == "completed"
                                for r in receiver.received))
    for r in receiver.received:
        doc = verify_webhook(WEBHOOK_SECRET, r["headers"], r["body"])
        assert doc["id"] == job.id
    r = receiver.received[0]
    with pytest.raises(WebhookVerificationError):
        verify_webhook(WEBHOOK_SECRET, r["headers"], r["body"] + b" ")
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_" + "A" * 32, r["headers"], r["body"])
    old = dict(r["headers"], **{"webhook-timestamp": "1000"})
    with pytest.raises(WebhookVerificationError):
        verify_webhook(WEBHOOK_SECRET, old, r["body"])


def test_input_by_reference_is_sent_without_a_body(client):
    # echo takes no inputs by reference: the gateway's refusal says so (the request was right).
    with pytest.raises(InvalidRequest) as e:
        client.submit("echo", input_url="s3://bucket/key.wav")
    assert e.value.code == "input_url_not_allowed"


class CutResults:
    """Fault injection: the first `cuts` result downloads end after `after` bytes with a read
    error, as a dropped connection would; `rewrite` may change a request's headers first."""

    def __init__(self, after, cuts, rewrite=None):
        self.after, self.cuts, self.rewrite = after, cuts, rewrite
        self.asked = []  # each result request's Range header

    def cut(self, request, response, stream_type):
        if not request.url.path.endswith("/result"):
            return response
        self.asked.append(request.headers.get("range"))
        if self.cuts == 0:
            return response
        self.cuts -= 1
        after = self.after

        class Cut(stream_type):
            def __iter__(self):
                sent = 0
                for chunk in response.stream:
                    if sent + len(chunk) >= after:
                        yield chunk[:after - sent]
                        raise httpx.ReadError("cut", request=request)
                    sent += len(chunk)
                    yield chunk

            async def __aiter__(self):
                sent = 0
                async for chunk in response.stream:
                    if sent + len(chunk) >= after:
                        yield chunk[:after - sent]
                        raise httpx.ReadError("cut", request=request)
                    sent += len(chunk)
                    yield chunk

        return httpx.Response(response.status_code, headers=response.headers, stream=Cut(),
                              request=request)

    def sync(self):
        outer = self

        class Transport(httpx.HTTPTransport):
            def handle_request(self, request):
                if outer.rewrite:
                    outer.rewrite(request)
                return outer.cut(request, super().handle_request(request), httpx.SyncByteStream)

        return Transport()

    def asynchronous(self):
        outer = self

        class Transport(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request):
                response = await super().handle_async_request(request)
                return outer.cut(request, response, httpx.AsyncByteStream)

        return Transport()


def completed_job(client, data):
    job = client.submit("echo", data, filename="big.bin")
    job.wait(30)
    whole = httpx.get(f"{client._http.base_url}/jobs/echo/{job.id}/result",
                      headers={"X-API-Key": API_KEY}).content
    assert len(whole) > 200  # the echo model's answer: over the cuts below
    return job, whole


def test_a_cut_download_resumes_where_it_stopped(client, stack, tmp_path):
    job, whole = completed_job(client, b"r" * 100_000)
    cuts = CutResults(after=60, cuts=2)
    with Client(stack.url, api_key=API_KEY, transport=cuts.sync()) as c:
        got = c.job("echo", job.id).download(tmp_path / "result.json")
    assert got == len(whole) and (tmp_path / "result.json").read_bytes() == whole
    assert cuts.asked == [None, "bytes=60-", "bytes=120-"]
    assert not (tmp_path / "result.json.part").exists()


def test_a_download_served_whole_on_resume_starts_over(client, stack, tmp_path):
    job, whole = completed_job(client, b"s" * 1000)

    def several_ranges(request):  # the gateway then answers with the whole result (200)
        if "range" in request.headers:
            request.headers["range"] = "bytes=0-1,5-6"

    cuts = CutResults(after=100, cuts=1, rewrite=several_ranges)
    with Client(stack.url, api_key=API_KEY, transport=cuts.sync()) as c:
        got = c.job("echo", job.id).download(tmp_path / "r.json")
    assert got == len(whole) and (tmp_path / "r.json").read_bytes() == whole
    assert cuts.asked == [None, "bytes=0-1,5-6"]


def test_a_download_that_keeps_dropping_fails_and_leaves_nothing(client, stack, tmp_path):
    job, _ = completed_job(client, b"t" * 1000)
    with Client(stack.url, api_key=API_KEY, transport=CutResults(0, cuts=99).sync()) as c:
        with pytest.raises(TransportError):
            c.job("echo", job.id).download(tmp_path / "r.json", reconnect=2)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(Conflict):  # a job without a result
        client.submit("slow", b"x").download(tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_the_async_twin_downloads_and_resumes(client, stack, tmp_path):
    job, whole = completed_job(client, b"u" * 5000)
    cuts = CutResults(after=70, cuts=1)

    async def main():
        async with AsyncClient(stack.url, api_key=API_KEY, transport=cuts.asynchronous()) as c:
            return await (await c.job("echo", job.id)).download(tmp_path / "a.json")

    assert asyncio.run(main()) == len(whole)
    assert (tmp_path / "a.json").read_bytes() == whole
    assert cuts.asked == [None, "bytes=70-"]
