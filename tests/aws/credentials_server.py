#!/usr/bin/env python3
"""The tests' own AWS credential services on loopback (Debian 12 packages no AWS mock):

  POST /sts   STS AssumeRoleWithWebIdentity (form body, as the AWS SDKs send it)
  GET  /creds the container credentials endpoint (EKS Pod Identity, ECS), Authorization header

Each successful call issues fresh temporary credentials valid for --lifetime seconds, appends them
to --credentials-file (read by the S3 test proxy, which then accepts exactly these, until they
expire) and logs one JSON line to --log: {"via", "akid", "token" (the identity token presented),
"role"}. --role-arn and --auth-token set what is accepted; anything else is refused the way the
real services refuse it.

usage: credentials_server.py --port P --credentials-file F --log L [--lifetime S]
                             [--role-arn ARN] [--auth-token T]
"""
import argparse
import datetime
import http.server
import json
import secrets
import threading
import time
import urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--credentials-file", required=True)
ap.add_argument("--log", required=True)
ap.add_argument("--lifetime", type=float, default=3600)
ap.add_argument("--role-arn", default="arn:aws:iam::123456789012:role/relay")
ap.add_argument("--auth-token", default="pod-identity-token")
args = ap.parse_args()
lock = threading.Lock()
counter = [0]


def issue(via, token, role):
    with lock:
        counter[0] += 1
        akid = "ASIATEST%08d" % counter[0]
        expires = time.time() + args.lifetime
        cred = {"akid": akid, "secret": secrets.token_hex(20), "token": secrets.token_hex(32),
                "expires_ms": int(expires * 1000)}
        with open(args.credentials_file, "a") as f:
            f.write(json.dumps(cred) + "\n")
        with open(args.log, "a") as f:
            f.write(json.dumps({"via": via, "akid": akid, "token": token, "role": role}) + "\n")
    stamp = datetime.datetime.fromtimestamp(expires, datetime.timezone.utc)
    return cred, stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status, ctype, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path != "/sts":
            return self.answer(404, "text/plain", "not found")
        length = int(self.headers.get("Content-Length", "0"))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        get = lambda k: form.get(k, [""])[0]
        def error(status, code, message):
            self.answer(status, "text/xml", "<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code>"
                        "<Message>%s</Message></Error></ErrorResponse>" % (code, message))
        if get("Action") != "AssumeRoleWithWebIdentity" or get("Version") != "2011-06-15":
            return error(400, "InvalidAction", "unsupported action")
        if get("RoleArn") != args.role_arn:
            return error(403, "AccessDenied", "not authorized to assume " + get("RoleArn"))
        if not get("WebIdentityToken") or not get("RoleSessionName"):
            return error(400, "MissingParameter", "WebIdentityToken and RoleSessionName are required")
        cred, expiration = issue("sts", get("WebIdentityToken"), get("RoleArn"))
        self.answer(200, "text/xml",
                    "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                    "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
                    "<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>"
                    "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
                    % (cred["akid"], cred["secret"], cred["token"], expiration))

    def do_GET(self):
        if self.path != "/creds":
            return self.answer(404, "text/plain", "not found")
        if self.headers.get("Authorization") != args.auth_token:
            return self.answer(401, "application/json", '{"message":"invalid authorization token"}')
        cred, expiration = issue("container", self.headers.get("Authorization"), "")
        self.answer(200, "application/json", json.dumps({
            "AccessKeyId": cred["akid"], "SecretAccessKey": cred["secret"], "Token": cred["token"],
            "Expiration": expiration}))


server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
print("ready %d" % args.port, flush=True)
server.serve_forever()
