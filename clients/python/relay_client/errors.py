"""Typed errors, mapped from the gateway's status codes and error codes."""

from __future__ import annotations

from typing import Any, Dict, Optional


class RelayError(Exception):
    """The gateway refused a request: `status` (HTTP), `code` (the API's error code), `message`."""

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class InvalidRequest(RelayError):
    """400: bad options, malformed input, a refused callback or input URL."""


class AuthenticationFailed(RelayError):
    """401: a missing or unknown API key."""


class NotFound(RelayError):
    """404: unknown service type, route or job (another tenant's job is not found either)."""


class Conflict(RelayError):
    """409: cancel of an ended job, result of a job that did not complete, key in flight."""


class InputTooLarge(RelayError):
    """413: the input is larger than the service type allows."""


class QuotaExceeded(RelayError):
    """429: quota_exceeded (max_pending) or rate_limited (the submit rate); see retry_after."""


class Unavailable(RelayError):
    """503: Redis or storage unavailable on the gateway's side, or a callback_url / input_url host
    whose name could not be resolved in time (callback_url_unresolved, input_url_unresolved);
    retry after retry_after."""


class TransportError(RelayError):
    """No answer: the gateway could not be reached (status 0)."""


class JobError(Exception):
    """A job ended without a result; `job` is its JSON."""

    def __init__(self, job: Dict[str, Any], message: str):
        super().__init__(message)
        self.job = job


class JobFailed(JobError):
    """The job failed: `code` and `message` are the job's error."""

    def __init__(self, job: Dict[str, Any]):
        error = job.get("error") or {}
        self.code = error.get("code", "")
        self.error_message = error.get("message", "")
        super().__init__(job, f"job {job.get('id')} failed: {self.code}: {self.error_message}")


class JobCancelled(JobError):
    def __init__(self, job: Dict[str, Any]):
        super().__init__(job, f"job {job.get('id')} was cancelled")


class WaitTimeout(JobError):
    """wait() gave up before the job ended; the job is still running."""

    def __init__(self, job: Dict[str, Any], seconds: float):
        super().__init__(job, f"job {job.get('id')} still {job.get('status')} after {seconds:g}s")


class WebhookVerificationError(Exception):
    """A webhook whose signature or timestamp does not verify."""


_BY_STATUS = {
    400: InvalidRequest,
    401: AuthenticationFailed,
    404: NotFound,
    409: Conflict,
    413: InputTooLarge,
    429: QuotaExceeded,
    503: Unavailable,
}


def error_for(status: int, body: bytes, retry_after: Optional[str]) -> RelayError:
    """The typed error for an answer that is not a success."""
    import json

    code, message = "http_error", body[:300].decode("utf-8", "replace")
    try:
        doc = json.loads(body)
        code = doc["error"]["code"]
        message = doc["error"]["message"]
    except (ValueError, KeyError, TypeError):
        pass
    seconds: Optional[float] = None
    if retry_after:
        try:
            seconds = float(retry_after)
        except ValueError:
            seconds = None
    cls = _BY_STATUS.get(status, RelayError)
    return cls(status, code, message, seconds)
