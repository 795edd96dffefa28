"""Verifying Relay's webhooks (Standard Webhooks: webhook-id, webhook-timestamp,
webhook-signature "v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>" keyed with the bytes of
the gateway's webhooks.secret, whsec_<base64>)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, Dict, Mapping, Union

from .errors import WebhookVerificationError


def verify_webhook(secret: str, headers: Mapping[str, str], body: Union[bytes, str],
                   tolerance: float = 300.0) -> Dict[str, Any]:
    """The webhook's JSON (the job, with "event") if its signature verifies and its timestamp is
    within `tolerance` seconds of now; WebhookVerificationError otherwise. Header names are
    matched without regard to case."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id = lower["webhook-id"]
        timestamp = lower["webhook-timestamp"]
        signatures = lower["webhook-signature"]
    except KeyError as e:
        raise WebhookVerificationError(f"missing header {e.args[0]}") from None
    try:
        ts = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    if abs(time.time() - ts) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is too far from now (a replay?)")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split():
        version, _, sig = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(sig, expected):
            return json.loads(raw)
    raise WebhookVerificationError("no signature matches")
