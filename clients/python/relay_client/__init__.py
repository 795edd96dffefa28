"""Relay's Python client: submit inference jobs, wait for them, read results and events.

    from relay_client import Client
    with Client("http://127.0.0.1:8080") as relay:
        print(relay.run("ocr", "invoice.png"))
"""

from ._core import Event
from .aio import AsyncClient, AsyncJob
from .client import Client, Job
from .errors import (
    AuthenticationFailed,
    Conflict,
    InputTooLarge,
    InvalidRequest,
    JobCancelled,
    JobError,
    JobFailed,
    NotFound,
    QuotaExceeded,
    RelayError,
    TransportError,
    Unavailable,
    WaitTimeout,
    WebhookVerificationError,
)
from .webhooks import verify_webhook

__all__ = [
    "AsyncClient", "AsyncJob", "AuthenticationFailed", "Client", "Conflict", "Event",
    "InputTooLarge", "InvalidRequest", "Job", "JobCancelled", "JobError", "JobFailed", "NotFound",
    "QuotaExceeded", "RelayError", "TransportError", "Unavailable", "WaitTimeout",
    "WebhookVerificationError", "verify_webhook",
]
__version__ = "0.1.0"
