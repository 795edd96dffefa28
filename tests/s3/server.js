// S3 test server for Relay's integration tests: s3rver (an S3 implementation that does not check
// signatures) behind a proxy that verifies every request's SigV4 signature with AWS's own signer,
// as real S3 would: a wrong signature fails the test instead of passing silently.
//
// usage: node server.js --port P --dir DIR [--bucket B] [--access-key K] [--secret-key S]
//                       [--region R] [--session-token T] [--credentials-file F]
// --credentials-file: temporary credentials instead of the fixed key, as issued by the tests' STS
// and container-credentials server (tests/aws/credentials_server.py): one JSON object a line,
// {"akid", "secret", "token", "expires_ms"}, re-read at every request. Like S3, a request signed
// with expired credentials is refused with 400 ExpiredToken.
// Prints "ready <port>" on stdout once both servers listen.
'use strict';
const http = require('http');
const fs = require('fs');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Sha256 } = require('@aws-crypto/sha256-js');
const S3rver = require('s3rver');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const port = Number(arg('port', '0'));
const dir = arg('dir');
const bucket = arg('bucket', 'relay-test');
const accessKeyId = arg('access-key', 'relaytestkey');
const secretAccessKey = arg('secret-key', 'relaytestsecret');
const sessionToken = arg('session-token', undefined);
const region = arg('region', 'us-east-1');
const credentialsFile = arg('credentials-file', undefined);

// The credentials a request's access key id names: the fixed ones, or an issued set.
function lookup(akid) {
  if (!credentialsFile) {
    return akid === accessKeyId ? { secret: secretAccessKey, token: sessionToken, expires: Infinity } : null;
  }
  let text = '';
  try { text = fs.readFileSync(credentialsFile, 'utf8'); } catch (e) { return null; }
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const c = JSON.parse(line);
    if (c.akid === akid) return { secret: c.secret, token: c.token, expires: c.expires_ms };
  }
  return null;
}

function fail(res, status, code, message) {
  res.writeHead(status, { 'content-type': 'application/xml' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`);
}

async function verify(req) {
  const auth = req.headers['authorization'];
  if (!auth) return ['AccessDenied', 'no Authorization header'];
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return ['AuthorizationHeaderMalformed', 'cannot parse: ' + auth];
  const [, akid, , reqRegion, service, signedList, signature] = m;
  const cred = lookup(akid);
  if (!cred) return ['InvalidAccessKeyId', 'unknown access key ' + akid];
  if (Date.now() >= cred.expires) return ['ExpiredToken', 'the credentials of ' + akid + ' have expired', 400];
  if (reqRegion !== region || service !== 's3') return ['AuthorizationHeaderMalformed', `scope ${reqRegion}/${service}`];
  const amzDate = req.headers['x-amz-date'];
  if (!amzDate) return ['AccessDenied', 'no x-amz-date'];
  if (!req.headers['x-amz-content-sha256']) return ['InvalidRequest', 'missing x-amz-content-sha256'];
  if (cred.token && req.headers['x-amz-security-token'] !== cred.token) return ['InvalidToken', 'bad session token'];
  const signed = signedList.split(';');
  const headers = {};
  for (const h of signed) {
    if (req.headers[h] === undefined) return ['SignatureDoesNotMatch', `signed header "${h}" was not sent`];
    headers[h] = String(req.headers[h]);
  }
  const url = new URL(req.url, 'http://placeholder');
  const query = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  const date = new Date(Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8),
                                 +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15)));
  const signer = new SignatureV4({
    credentials: { accessKeyId: akid, secretAccessKey: cred.secret, sessionToken: cred.token }, region, service: 's3',
    sha256: Sha256, uriEscapePath: false, applyChecksum: false,
  });
  const out = await signer.sign({
    method: req.method, protocol: 'http:', hostname: 'placeholder', path: url.pathname, query, headers,
  }, { signingDate: date, signableHeaders: new Set(signed) });
  const expected = /Signature=([0-9a-f]{64})/.exec(out.headers['authorization'])[1];
  if (expected !== signature) return ['SignatureDoesNotMatch', `${req.method} ${req.url} signed ${signedList}`];
  return null;
}

// S3 stores an object whole or not at all: a PUT whose client goes away, or that ends short of
// its Content-Length, leaves nothing (and an object is never visible while it is uploaded).
// s3rver writes straight to the object's file as bytes arrive, so PUTs are spooled here first
// and handed on only once complete.
let spooled = 0;
function atomicPut(req, res, headers, forward) {
  const expected = Number(req.headers['content-length']);
  if (!Number.isInteger(expected)) {
    req.resume();
    return fail(res, 411, 'MissingContentLength', 'You must provide the Content-Length HTTP header.');
  }
  fs.mkdirSync(dir + '.incoming', { recursive: true });
  const tmp = `${dir}.incoming/${process.pid}-${spooled++}`;
  const out = fs.createWriteStream(tmp);
  let got = 0;
  const drop = () => { req.unpipe(out); out.destroy(); fs.rm(tmp, { force: true }, () => {}); };
  out.on('error', () => drop());
  req.on('data', (c) => { got += c.length; });
  req.on('close', () => { if (!req.complete) drop(); });
  out.on('finish', () => {
    if (!req.complete || got !== expected) {
      drop();
      if (!res.headersSent) fail(res, 400, 'IncompleteBody', 'fewer bytes than Content-Length');
      return;
    }
    const body = fs.createReadStream(tmp);
    forward(body).on('close', () => fs.rm(tmp, { force: true }, () => {}));
  });
  req.pipe(out);
}

async function main() {
  fs.mkdirSync(dir, { recursive: true });
  const backend = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: dir,
                               configureBuckets: [{ name: bucket }] });
  const { port: backendPort } = await backend.run();
  const proxy = http.createServer(async (req, res) => {
    let problem;
    try { problem = await verify(req); } catch (e) { problem = ['InternalError', String(e)]; }
    if (problem) {
      process.stderr.write(`s3 proxy: rejected ${req.method} ${req.url}: ${problem[0]}: ${problem[1]}\n`);
      req.resume();
      return fail(res, problem[2] || 403, problem[0], problem[1]);
    }
    // Verified here; s3rver would check the key against its own built-in one, so it gets an
    // anonymous request instead.
    const headers = { ...req.headers };
    delete headers['authorization'];
    const forward = (body) => {
      const up = http.request({ host: '127.0.0.1', port: backendPort, method: req.method, path: req.url,
                                headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', (e) => { if (!res.headersSent) fail(res, 502, 'BadGateway', String(e)); else res.destroy(); });
      body.pipe(up);
      return up;
    };
    if (req.method === 'PUT' && !req.url.includes('?') && !headers['x-amz-copy-source']) {
      return atomicPut(req, res, headers, forward);
    }
    forward(req);
  });
  proxy.listen(port, '127.0.0.1', () => {
    process.stdout.write(`ready ${proxy.address().port}\n`);
  });
}
main().catch((e) => { console.error(e); process.exit(1); });
