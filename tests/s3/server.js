// S3 test server for Relay's integration tests: s3rver (an S3 implementation that does not check
// signatures) behind a front that verifies every request's SigV4 signature with AWS's own signer,
// as real S3 would: a wrong signature fails the test instead of passing silently.
//
// usage: node server.js --port P --dir DIR [--bucket B] [--access-key K] [--secret-key S]
//                       [--region R] [--session-token T] [--credentials-file F]
// --credentials-file: temporary credentials instead of the fixed key, as issued by the tests' STS
// and container-credentials server (tests/aws/credentials_server.py): one JSON object a line,
// {"akid", "secret", "token", "expires_ms"}, re-read at every request. Like S3, a request signed
// with expired credentials is refused with 400 ExpiredToken.
// Fault injection (each for the first N requests whose URL contains the given text):
//   --fail-puts N --fail-match TEXT    PUTs answered 503 SlowDown (as S3 under load does)
//   --cut-gets N --cut-match TEXT --cut-after BYTES   GETs whose connection drops after BYTES
//                                                     bytes of the body (a reset mid-download)
//   --hold-requests N --hold-match TEXT --hold-ms MS [--hold-method M] [--hold-after K]
//       requests (of method M, if given) held MS ms before they are served: a slow store. The
//       first K that match are served at once, the next N held.
// --log-connections: a line on stderr for every TCP connection accepted.
// --no-delete-objects: DeleteObjects answered 501 NotImplemented, as some S3-compatible stores
// answer it.
// --log-requests: a line on stderr for every request verified ("s3 request: <method> <url>").
// --log-puts: a line on stderr for every PUT verified ("s3 put: <url> <content-length>"): what an
// upload sent, part by part.
// Prints "ready <port>" on stdout once it listens.
'use strict';
const http = require('http');
const fs = require('fs');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Sha256 } = require('@aws-crypto/sha256-js');
const S3rver = require('s3rver');
const FilesystemStore = require('s3rver/lib/stores/filesystem');
const crypto = require('crypto');
const path = require('path');
const { Transform } = require('stream');
const { pipeline } = require('stream/promises');

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
const logPuts = process.argv.includes('--log-puts');
const logRequests = process.argv.includes('--log-requests');
const faults = {
  failPuts: Number(arg('fail-puts', '0')), failMatch: arg('fail-match', ''),
  cutGets: Number(arg('cut-gets', '0')), cutMatch: arg('cut-match', ''),
  cutAfter: Number(arg('cut-after', '0')),
  holdRequests: Number(arg('hold-requests', '0')), holdMatch: arg('hold-match', ''),
  holdMs: Number(arg('hold-ms', '0')), holdMethod: arg('hold-method', ''),
  holdAfter: Number(arg('hold-after', '0')),
};

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
// its Content-Length, leaves nothing, and an object is never visible while it is uploaded.
// s3rver writes straight to the object's file as bytes arrive; so its store writes each object
// to a file beside the bucket folders and renames it into place once the body ended whole.
// (In one pass: a spool in front of s3rver would cost this server, which on a 2-core machine is
// what sets the pace of any upload, a second write and read of every byte.)
let incoming = 0;
FilesystemStore.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  const spool = `${this.rootDirectory}.incoming/${process.pid}-${incoming++}`;
  await fs.promises.mkdir(path.dirname(spool), { recursive: true });
  await fs.promises.mkdir(path.dirname(objectPath), { recursive: true });
  const md5 = crypto.createHash('md5');
  let size = 0;
  try {
    if (Buffer.isBuffer(object.content)) {
      await fs.promises.writeFile(spool, object.content);
      md5.update(object.content);
      size = object.content.length;
    } else {
      const count = new Transform({
        transform(chunk, encoding, callback) {
          md5.update(chunk);
          size += chunk.length;
          callback(null, chunk);
        },
      });
      await pipeline(object.content, count, fs.createWriteStream(spool));
      // A request body that ended early (its client went away) ends the stream too.
      if (object.content.complete === false) throw new Error('the request ended before its body');
    }
    await fs.promises.rename(spool, objectPath);
  } catch (e) {
    await fs.promises.rm(spool, { force: true });
    throw e;
  }
  const digest = md5.digest('hex');
  await this.putMetadata(object.bucket, object.key, object.metadata, digest);
  return { size, md5: digest };
};

// s3rver's deleteObject removes the folders it empties, racing itself when DeleteObjects deletes
// two keys of one folder at once (a readdir, then an rmdir of a folder the other call removed:
// a 500 that S3, which has no folders, never gives): deletions run one after another.
const deleteObject = FilesystemStore.prototype.deleteObject;
let deleting = Promise.resolve();
FilesystemStore.prototype.deleteObject = function serialDeleteObject(bucket, key) {
  const run = deleting.then(() => deleteObject.call(this, bucket, key));
  deleting = run.catch(() => {});
  return run;
};

async function main() {
  fs.mkdirSync(dir, { recursive: true });
  const backend = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: dir,
                               configureBuckets: [{ name: bucket }] });
  await backend.run();  // creates the buckets; its own listener is not used
  const s3rver = backend.callback();
  // Requests are verified here, then handled by s3rver in this same server: no second HTTP hop
  // (which would cost this one Node process a second parse and copy of every byte).
  const server = http.createServer(async (req, res) => {
    let problem;
    try { problem = await verify(req); } catch (e) { problem = ['InternalError', String(e)]; }
    if (problem) {
      process.stderr.write(`s3 proxy: rejected ${req.method} ${req.url}: ${problem[0]}: ${problem[1]}\n`);
      req.resume();
      return fail(res, problem[2] || 403, problem[0], problem[1]);
    }
    if (logRequests) process.stderr.write(`s3 request: ${req.method} ${req.url}\n`);
    if (process.argv.includes('--no-delete-objects') && req.method === 'POST' &&
        /[?&]delete(=|&|$)/.test(req.url)) {
      req.resume();
      return fail(res, 501, 'NotImplemented', 'A header you provided implies functionality that is not implemented');
    }
    // Like S3: DeleteObjects without Content-MD5 (or a checksum) is refused.
    if (req.method === 'POST' && /[?&]delete(=|&|$)/.test(req.url) &&
        !/^[A-Za-z0-9+/]{22}==$/.test(req.headers['content-md5'] ?? '')) {
      req.resume();
      return fail(res, 400, 'InvalidRequest', 'Missing required header for this request: Content-Md5');
    }
    if (logPuts && req.method === 'PUT') {
      process.stderr.write(`s3 put: ${req.url} ${req.headers['content-length'] ?? '-'}\n`);
    }
    // S3 refuses an object PUT of unknown length (no chunked uploads without aws-chunked signing).
    if (req.method === 'PUT' && !req.url.includes('?') && !req.headers['x-amz-copy-source'] &&
        !Number.isInteger(Number(req.headers['content-length'] ?? 'x'))) {
      req.resume();
      return fail(res, 411, 'MissingContentLength', 'You must provide the Content-Length HTTP header.');
    }
    if (faults.holdRequests > 0 && req.url.includes(faults.holdMatch) &&
        (!faults.holdMethod || req.method === faults.holdMethod)) {
      if (faults.holdAfter > 0) {
        faults.holdAfter--;
      } else {
        faults.holdRequests--;
        process.stderr.write(`s3 fault: ${req.method} ${req.url} held ${faults.holdMs} ms\n`);
        await new Promise((resolve) => setTimeout(resolve, faults.holdMs));
      }
    }
    if (req.method === 'PUT' && faults.failPuts > 0 && req.url.includes(faults.failMatch)) {
      faults.failPuts--;
      process.stderr.write(`s3 fault: 503 for PUT ${req.url}\n`);
      req.resume();
      return fail(res, 503, 'SlowDown', 'Please reduce your request rate.');
    }
    if (req.method === 'GET' && faults.cutGets > 0 && req.url.includes(faults.cutMatch)) {
      faults.cutGets--;
      process.stderr.write(`s3 fault: GET ${req.url} cut after ${faults.cutAfter} bytes\n`);
      let sent = 0;
      const write = res.write.bind(res);
      res.write = (chunk, ...rest) => {
        const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
        if (sent + buf.length <= faults.cutAfter) {
          sent += buf.length;
          return write(buf, ...rest);
        }
        write(buf.subarray(0, faults.cutAfter - sent));
        sent = faults.cutAfter;
        setImmediate(() => res.socket && res.socket.destroy());
        return false;
      };
    }
    // Verified; s3rver would check the key against its own built-in one, so it sees an
    // anonymous request.
    delete req.headers['authorization'];
    s3rver(req, res);
  });
  // --log-connections: each TCP connection a line, for tests of the clients' connection reuse.
  if (process.argv.includes('--log-connections')) {
    server.on('connection', () => process.stderr.write('s3 connection opened\n'));
  }
  server.listen(port, '127.0.0.1', () => {
    process.stdout.write(`ready ${server.address().port}\n`);
  });
}
main().catch((e) => { console.error(e); process.exit(1); });
