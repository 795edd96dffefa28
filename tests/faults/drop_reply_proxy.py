#!/usr/bin/env python3
"""A TCP proxy in front of redis-server that loses one reply: the first time a client sends a
command containing any of the --match strings, the command reaches Redis and runs, Redis's reply
is read and thrown away, and the client's connection is closed. The client sees a broken
connection for a step that did happen — the "unknown outcome" a real network gives after a
command was sent. Every other byte passes through unchanged. Prints "ready <port>"; each drop is
logged as "dropped" on stdout.

usage: drop_reply_proxy.py --port P --upstream-port R --match TEXT [--match TEXT ...]
"""
import socket
import threading

import tcp_proxy

args = tcp_proxy.arguments(lambda ap: ap.add_argument("--match", action="append", required=True))
patterns = [m.encode() for m in args.match]
state = {"armed": True}
lock = threading.Lock()


def serve(client, upstream):
    drop = threading.Event()

    def sent_up(data):  # client -> redis
        with lock:
            if state["armed"] and any(p in data for p in patterns):
                state["armed"] = False
                drop.set()
        return data

    def sent_down(data):  # redis -> client
        if drop.is_set():
            print("dropped", flush=True)
            return None  # the reply is lost with the connection
        return data

    def down():
        tcp_proxy.pump(client, upstream, sent_up)
        try:
            upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def up():
        tcp_proxy.pump(upstream, client, sent_down)
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    threading.Thread(target=down, daemon=True).start()
    up()


tcp_proxy.run(args, serve)
