#!/usr/bin/env python3
"""A TCP proxy in front of redis-server that loses one reply: the first time a client sends a
command containing any of the --match strings, the command reaches Redis and runs, Redis's reply
is read and thrown away, and the client's connection is closed. The client sees a broken
connection for a step that did happen — the "unknown outcome" a real network gives after a
command was sent. Every other byte passes through unchanged. Prints "ready <port>"; each drop is
logged as "dropped" on stdout.

usage: drop_reply_proxy.py --port P --upstream-port R --match TEXT [--match TEXT ...]
"""
import argparse
import socket
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--upstream-port", type=int, required=True)
ap.add_argument("--match", action="append", required=True)
args = ap.parse_args()
patterns = [m.encode() for m in args.match]
state = {"armed": True}
lock = threading.Lock()


def serve(client):
    upstream = socket.create_connection(("127.0.0.1", args.upstream_port))
    drop = threading.Event()

    def down():  # client -> redis
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                with lock:
                    if state["armed"] and any(p in data for p in patterns):
                        state["armed"] = False
                        drop.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            try:
                upstream.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def up():  # redis -> client
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if drop.is_set():
                    print("dropped", flush=True)
                    break  # the reply is lost with the connection
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    threading.Thread(target=down, daemon=True).start()
    threading.Thread(target=up, daemon=True).start()


listener = socket.create_server(("127.0.0.1", args.port))
print("ready %d" % args.port, flush=True)
while True:
    conn, _ = listener.accept()
    serve(conn)
