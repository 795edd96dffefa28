#!/usr/bin/env python3
"""A TCP proxy in front of redis-server that refuses one command of a pipeline and runs the
next: the first time a client sends, in one write, a command containing --refuse followed by one
containing --then, the first is answered with --error (default a BUSY refusal) without reaching
Redis, and the second runs. The client sees what Redis gives when a busy spell (a long script)
ends between two pipelined commands. Every other command passes through, in order; replies are
returned in the order the commands came. A connection that subscribes passes bytes through
unread from then on. Prints "ready <port>"; the refusal is logged as "refused" on stdout.

usage: refuse_step_proxy.py --port P --upstream-port R --refuse TEXT --then TEXT [--error E]
"""
import socket
import threading

import tcp_proxy


def options(ap):
    ap.add_argument("--refuse", required=True)
    ap.add_argument("--then", required=True)
    ap.add_argument("--error", default="BUSY Redis is busy running a script. (injected)")


args = tcp_proxy.arguments(options)
refuse, then = args.refuse.encode(), args.then.encode()
state = {"armed": True}
lock = threading.Lock()


class Reader:
    """RESP2 off a socket: whole commands (client side) and whole replies (server side)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def reply(self):
        """One reply, as the bytes that came."""
        head = self.line()
        out = head + b"\r\n"
        kind, rest = head[:1], head[1:]
        if kind == b"$" and int(rest) >= 0:
            out += self.exactly(int(rest) + 2)
        elif kind == b"*":
            for _ in range(max(int(rest), 0)):
                out += self.reply()
        return out

    def command(self):
        """One command (a multibulk), as (raw bytes, its arguments)."""
        head = self.line()
        if not head.startswith(b"*"):  # an inline command
            return head + b"\r\n", head.split()
        raw, argv = head + b"\r\n", []
        for _ in range(int(head[1:])):
            size = self.line()
            arg = self.exactly(int(size[1:]) + 2)
            raw += size + b"\r\n" + arg
            argv.append(arg[:-2])
        return raw, argv


def shut(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        shut(src, dst)


def serve(client, upstream):
    commands, replies = Reader(client), Reader(upstream)
    try:
        while True:
            batch = [commands.command()]
            while commands.buf:  # what came in the same write: a pipeline
                batch.append(commands.command())
            refused = None
            with lock:
                for i in range(len(batch) - 1):
                    if state["armed"] and refuse in batch[i][0] and then in batch[i + 1][0]:
                        state["armed"], refused = False, i
                        print("refused", flush=True)
            upstream.sendall(b"".join(raw for i, (raw, _) in enumerate(batch) if i != refused))
            out = b""
            for i, (_, argv) in enumerate(batch):
                out += ("-%s\r\n" % args.error).encode() if i == refused else replies.reply()
            client.sendall(out)
            if any(argv and argv[0].upper().endswith(b"SUBSCRIBE") for _, argv in batch):
                # Messages come unasked from now on: bytes pass through unread.
                if replies.buf:
                    client.sendall(replies.buf)
                threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
                if commands.buf:
                    upstream.sendall(commands.buf)
                pipe(client, upstream)
                return
    except (EOFError, OSError):
        pass
    finally:
        shut(client, upstream)
        client.close()
        upstream.close()


tcp_proxy.run(args, serve)
