"""What the fault-injecting proxies in front of redis-server share: the command line (--port,
--upstream-port, then each proxy's own options) and the accept loop, which hands each client
connection, with a connection of its own to Redis, to the proxy's serve(client, upstream) on a
thread of its own. Prints "ready <port>" once it listens."""
import argparse
import socket
import threading


def arguments(add_options):
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream-port", type=int, required=True)
    add_options(ap)
    return ap.parse_args()


def run(args, serve):
    listener = socket.create_server(("127.0.0.1", args.port))
    print("ready %d" % args.port, flush=True)
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", args.upstream_port))
        threading.Thread(target=serve, args=(client, upstream), daemon=True).start()


def pump(src, dst, each):
    """Copies what src sends to dst, each chunk through each(data): the bytes to send on (b"" for
    none), or None to stop. Returns at the end of src, a socket error, or None."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                return
            out = each(data)
            if out is None:
                return
            if out:
                dst.sendall(out)
    except OSError:
        pass
