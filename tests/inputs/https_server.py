#!/usr/bin/env python3
"""An HTTPS origin for tests of inputs by reference.

GET /files/<name>        the file <dir>/<name> (with Content-Length)
GET /chunked/<name>      the same file, chunked (no Content-Length)
GET /flaky/<name>        the same file with an ETag, Range (one bytes=N- range) and If-Range;
                         the first --cut requests are cut after --cut-after bytes of the body
GET /redirect?to=<url>   302 to <url>
anything else            404
Every request is appended to <dir>/requests.log as "<method> <path>".
"""
import argparse
import http.server
import os
import re
import socket
import ssl
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cut", type=int, default=0)
    ap.add_argument("--cut-after", type=int, default=0)
    args = ap.parse_args()
    cuts = {"left": args.cut}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            with open(os.path.join(args.dir, "requests.log"), "a") as f:
                f.write(f"GET {self.path}\n")
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/redirect":
                to = urllib.parse.parse_qs(url.query).get("to", [""])[0]
                self.send_response(302)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if url.path.startswith("/flaky/"):
                path = os.path.join(args.dir, os.path.basename(url.path[len("/flaky/"):]))
                if os.path.isfile(path):
                    return self.send_flaky(path)
            for route, chunked in (("/files/", False), ("/chunked/", True)):
                if url.path.startswith(route):
                    name = os.path.basename(url.path[len(route):])
                    path = os.path.join(args.dir, name)
                    if name and os.path.isfile(path):
                        return self.send_file(path, chunked)
            body = b"not found"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_file(self, path, chunked):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(os.path.getsize(path)))
            self.end_headers()
            with open(path, "rb") as f:
                while True:
                    block = f.read(256 * 1024)
                    if not block:
                        break
                    if chunked:
                        self.wfile.write(b"%x\r\n" % len(block) + block + b"\r\n")
                    else:
                        self.wfile.write(block)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")

        def send_flaky(self, path):
            size = os.path.getsize(path)
            etag = '"%x-%x"' % (size, int(os.path.getmtime(path)))
            first = 0
            m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if m and self.headers.get("If-Range", etag) == etag and int(m.group(1)) < size:
                first = int(m.group(1))
            self.send_response(206 if first else 200)
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            if first:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (first, size - 1, size))
            self.send_header("Content-Length", str(size - first))
            self.end_headers()
            with open(path, "rb") as f:
                f.seek(first)
                data = f.read()
            if cuts["left"] > 0:
                cuts["left"] -= 1
                with open(os.path.join(args.dir, "requests.log"), "a") as log:
                    log.write("cut\n")
                self.wfile.write(data[:args.cut_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
