#!/usr/bin/env python3
"""A TCP proxy in front of redis-server whose connections can fall silent: once a client's
connection has carried a command containing any of the --match strings, and Redis's first
answer to it has passed, nothing more passes on that connection either way — and it stays open,
as one to a server gone without a word (a crashed node, a partition: no FIN, no RST). Every other
connection passes unchanged. Prints "ready <port>"; logs "silent" when a connection falls silent.

usage: silent_proxy.py --port P --upstream-port R --match TEXT [--match TEXT ...]
"""
import threading

import tcp_proxy

args = tcp_proxy.arguments(lambda ap: ap.add_argument("--match", action="append", required=True))
patterns = [m.encode() for m in args.match]


def serve(client, upstream):
    matched = threading.Event()  # the command went up: its answer may come down, then silence
    silent = threading.Event()

    def sent_up(data):  # client -> redis
        if silent.is_set():
            return b""  # swallowed
        if any(p in data for p in patterns):
            matched.set()
        return data

    def sent_down(data):  # redis -> client
        if silent.is_set():
            return b""
        if matched.is_set():  # this answer passes, then nothing
            silent.set()
            print("silent", flush=True)
        return data

    threading.Thread(target=tcp_proxy.pump, args=(client, upstream, sent_up), daemon=True).start()
    tcp_proxy.pump(upstream, client, sent_down)


tcp_proxy.run(args, serve)
