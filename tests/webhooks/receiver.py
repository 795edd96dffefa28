#!/usr/bin/env python3
"""Webhook receiver for Relay's tests: verifies Standard Webhooks signatures with Python's own
hmac and base64 (an implementation independent of the gateway's C++), and appends one JSON line
per request to --log: {"id", "timestamp", "valid", "status", "body"}.

--fail-first N answers --fail-status (500) to the first N requests (to exercise retries, or 410
Gone), with Retry-After when --retry-after is given. --delay-ms answers each request that much
later (a receiver far away, or slow); each line says how many requests were in progress when its
own arrived, itself included ("in_flight")."""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--secret", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--fail-first", type=int, default=0)
parser.add_argument("--fail-status", type=int, default=500)
parser.add_argument("--retry-after", type=int, default=0, help="sent with each failure, in seconds")
parser.add_argument("--delay-ms", type=int, default=0)
args = parser.parse_args()
key = base64.b64decode(args.secret[len("whsec_"):])
lock = threading.Lock()
count = 0
in_flight = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global in_flight
        with lock:
            in_flight += 1
            arrived_with = in_flight
        self.counted = True
        try:
            time.sleep(args.delay_ms / 1000)
            self.answer(arrived_with)
        finally:
            self.done()

    def done(self):
        # Before the answer goes out: the client may send its next request the moment it has it,
        # before this thread would get here after the write.
        global in_flight
        if self.counted:
            self.counted = False
            with lock:
                in_flight -= 1

    def answer(self, arrived_with):
        global count
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        wid = self.headers.get("webhook-id", "")
        ts = self.headers.get("webhook-timestamp", "")
        signed = f"{wid}.{ts}.".encode() + body
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        given = [s.split(",", 1)[1] for s in self.headers.get("webhook-signature", "").split(" ") if s.startswith("v1,")]
        valid = any(hmac.compare_digest(g, expected) for g in given)
        with lock:
            count += 1
            status = args.fail_status if count <= args.fail_first else 200
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            with open(args.log, "a") as f:
                f.write(json.dumps({"id": wid, "timestamp": ts, "valid": valid, "status": status, "body": parsed,
                                    "event": self.headers.get("webhook-event", ""),
                                    "traceparent": self.headers.get("traceparent", ""),
                                    "received_at": time.time(), "in_flight": arrived_with}) + "\n")
        self.send_response(status)
        if status != 200 and args.retry_after:
            self.send_header("Retry-After", str(args.retry_after))
        self.send_header("Content-Length", "0")
        self.done()
        self.end_headers()

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
