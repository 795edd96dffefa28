// The JavaScript client against a real stack it starts: redis-server, the gateway (auth on),
// relays and the no-op model — the project's binaries from $RELAY_BIN_DIR (default build/bin).
// Run: node --test clients/js/test/
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import {
  Client, RelayError, JobFailed, JobCancelled, WaitTimeout, SseParser, verifyWebhook,
  WebhookVerificationError,
} from "../relay-client.mjs";
import http from "node:http";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const BIN = process.env.RELAY_BIN_DIR || join(REPO, "build", "bin");
const KEY = "js-client-key", OTHER = "js-other-tenant";
const WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const sha = (s) => createHash("sha256").update(s).digest("hex");
const procs = [];
let root, url, common, redis;

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}
async function listening(port, what) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, "127.0.0.1", () => { s.destroy(); resolve(true); });
      s.on("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(what + " did not listen on " + port);
    await new Promise((r) => setTimeout(r, 20));
  }
}
function start(argv, env) {
  const p = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: "ignore" });
  procs.push(p);
  return p;
}

before(async () => {
  assert.ok(existsSync(join(BIN, "relay-gateway")), `no relay-gateway in ${BIN}: build first, or set RELAY_BIN_DIR`);
  root = mkdtempSync(join(tmpdir(), "relay-js-"));
  const redisPort = await freePort();
  redis = start(["redis-server", "--port", String(redisPort), "--save", "", "--appendonly", "no", "--dir", root], {});
  await listening(redisPort, "redis-server");
  common = { RELAY_REDIS_URL: `redis://127.0.0.1:${redisPort}`, RELAY_STORAGE_URL: `file://${root}/storage` };
  // echo: the no-op model at once; slow: 1.5 s with three progress reports; broken: HTTP 500;
  // big: a 400 kB answer.
  for (const [model, extra] of [["m1", []], ["m2", ["--delay-ms", "1500", "--progress-steps", "3"]],
                                ["m3", ["--status", "500"]], ["m4", ["--result-bytes", "400000"]]]) {
    const port = await freePort();
    start([join(BIN, "relay-inference-noop"), "--listen", `127.0.0.1:${port}`, ...extra], {});
    await listening(port, "relay-inference-noop");
    for (let i = 0; i < 2; i++)
      start([join(BIN, "relay"), "--max-jobs", "0"], {
        ...common, RELAY_MODEL: model, RELAY_INFERENCE_URL: `http://127.0.0.1:${port}`,
        RELAY_INFERENCE_ROUTES: "default=/predict,transcribe=/transcribe",
        RELAY_QUEUE_POP_TIMEOUT: "1h", RELAY_RELAY_PROGRESS_INTERVAL: "50ms", RELAY_RELAY_HEALTH_INTERVAL: "50ms",
      });
  }
  const gwPort = await freePort();
  await startGateway(gwPort);
  url = `http://127.0.0.1:${gwPort}`;
});

// A gateway replica on port (the suite's own, or another sharing its Redis), listening; env:
// settings of its own.
async function startGateway(port, env = {}) {
  const p = start([join(BIN, "relay-gateway")], {
    ...common, RELAY_SERVER_LISTEN: `127.0.0.1:${port}`, RELAY_SERVICE_TYPES: "echo=m1,slow=m2,broken=m3,big=m4",
    RELAY_AUTH_ENABLED: "true", RELAY_AUTH_API_KEYS: `${sha(KEY)}=js,${sha(OTHER)}=other`,
    RELAY_WEBHOOKS_SECRET: WEBHOOK_SECRET, RELAY_WEBHOOKS_ALLOW_PRIVATE: "true",
    RELAY_WEBHOOKS_INITIAL_BACKOFF: "100ms", RELAY_EVENTS_CONSUMER: `gateway-${port}`, ...env,
  });
  await listening(port, "relay-gateway");
  return p;
}

after(async () => {
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => (p.exitCode !== null ? null : new Promise((r) => p.once("exit", r)))));
  if (root) rmSync(root, { recursive: true, force: true });
});

const client = () => new Client(url, { apiKey: KEY });
const filePart = (answer) => answer.parts.find((p) => p.name === "file");
const hex = (bytes) => createHash("sha256").update(bytes).digest("hex");

test("submit bytes, wait, and read the result", async () => {
  const data = new Uint8Array(1 << 20).map((_, i) => i % 251);
  const job = await client().submit("echo", data, {
    filename: "clip.bin", operation: "transcribe", params: { lang: "en", n: 0.1 },
  });
  assert.equal(job.status, "pending");
  assert.equal(job.serviceType, "echo");
  assert.equal(await job.wait(30), job);
  assert.equal(job.status, "completed");
  const answer = await job.result();
  assert.equal(answer.path, "/transcribe");
  assert.equal(filePart(answer).sha256, hex(data));
  assert.equal(filePart(answer).filename, "clip.bin");
  const fields = Object.fromEntries(answer.parts.map((p) => [p.name, p.value]));
  assert.equal(fields.lang, "en");
  assert.equal(fields.n, "0.1");
  // A Blob and a string; run() is submit then wait.
  const ran = await client().run("echo", "hello", { filename: "a.txt", contentType: "text/plain" });
  assert.equal(filePart(await ran.result()).sha256, hex("hello"));
  const blob = await client().run("echo", new Blob(["blob"], { type: "text/plain" }), { filename: "b.txt" });
  assert.equal(filePart(await blob.result()).filename, "b.txt");
  assert.equal(blob.data.input.content_type, "text/plain", "a Blob keeps its type");
  const typed = await client().run("echo", new Blob(["{}"]), { filename: "c.json", contentType: "application/json" });
  assert.equal(typed.data.input.content_type, "application/json");
});

test("a submission that waits for its job (Prefer: wait)", async () => {
  const quick = await client().submit("echo", "quick", { wait: 30 });
  assert.equal(quick.status, "completed", "answered once it ended: no long-poll needed");
  const slow = await client().submit("slow", "x", { wait: 1 });
  assert.notEqual(slow.status, "completed", "a shorter wait: the job as it is");
  assert.equal((await slow.wait(30)).status, "completed");
  // run(): its submission waits, so a quick job costs one request (and its result's read).
  const sent = [];
  const counting = (input, init) => {
    sent.push(init?.method || "GET");
    return fetch(input, init);
  };
  const ran = await new Client(url, { apiKey: KEY, fetch: counting }).run("echo", "hello", {}, 30);
  assert.equal(ran.status, "completed");
  assert.deepEqual(sent, ["POST"]);
});

test("errors are typed, with the API's codes", async () => {
  await assert.rejects(new Client(url, { apiKey: "wrong" }).submit("echo", "x"),
    (e) => e instanceof RelayError && e.status === 401 && e.code === "unauthorized");
  await assert.rejects(client().submit("nope", "x"), (e) => e.status === 404 && e.code === "unknown_service_type");
  await assert.rejects(client().submit("echo", "x", { ttl: "soon" }), (e) => e.status === 400);
  await assert.rejects(client().job("echo", "11111111-1111-4111-8111-111111111111").refresh(),
    (e) => e.status === 404 && e.code === "job_not_found");
  // Another tenant's job is not found.
  const mine = await client().submit("echo", "mine");
  await assert.rejects(new Client(url, { apiKey: OTHER }).job("echo", mine.id).refresh(), (e) => e.status === 404);
  // Nobody there.
  await assert.rejects(new Client("http://127.0.0.1:9", { apiKey: KEY, retries: 0 }).submit("echo", "x"),
    (e) => e instanceof RelayError && e.status === 0 && e.code === "unreachable");
  await assert.rejects(client().submit("echo", null), TypeError);
});

test("a wait that times out, a cancel, and a cancelled job", async () => {
  const job = await client().submit("slow", "x");
  await assert.rejects(job.wait(0.2), WaitTimeout);
  await job.cancel();
  assert.ok(["cancelled", "processing", "pending"].includes(job.status), job.status);
  await assert.rejects(job.wait(30), JobCancelled);
  await assert.rejects(job.cancel(), (e) => e.status === 409);
});

test("a failed job rejects its wait with JobFailed", async () => {
  const job = await client().submit("broken", "x");
  await assert.rejects(job.wait(30), (e) => e instanceof JobFailed && e.code !== "" &&
    e.job.status === "failed" && e.job.id === job.id);
  await assert.rejects(job.result(), (e) => e.status === 409 && e.code === "no_result");
});

test("listings follow their pages", async () => {
  const c = client();
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await c.submit("echo", "page", { idempotencyKey: `js-list-${i}` })).id);
  const listed = [];
  for await (const j of c.jobs({ serviceType: "echo", pageSize: 2, limit: 200 })) listed.push(j.id);
  assert.ok(listed.indexOf(ids[4]) < listed.indexOf(ids[0]), "newest first");
  for (const id of ids) assert.ok(listed.includes(id));
  assert.equal(new Set(listed).size, listed.length, "each job once");
  const byKey = [];
  for await (const j of c.jobs({ idempotencyKey: "js-list-3" })) byKey.push(j.id);
  assert.deepEqual(byKey, [ids[3]]);
  let n = 0;
  for await (const _ of c.jobs({ serviceType: "echo", limit: 3 })) n++;
  assert.equal(n, 3);
});

test("a submission whose answer was lost is sent again and makes one job", async () => {
  let calls = 0;
  const losing = async (input, init) => {
    const r = await fetch(input, init);
    if (++calls === 1) {
      await r.arrayBuffer();
      throw new TypeError("fetch failed: the answer was lost");
    }
    return r;
  };
  const job = await new Client(url, { apiKey: KEY, fetch: losing }).submit("echo", "exactly once", { filename: "once-js.txt" });
  assert.equal(calls, 2);
  const named = [];
  for await (const j of client().jobs({ serviceType: "echo", limit: 100 }))
    if (j.data.input.filename === "once-js.txt") named.push(j.id);
  assert.deepEqual(named, [job.id]);
});

for (const call of ["wait", "refresh", "result", "listing"])
  test(`a ${call} rides out a gateway restart`, async () => {
    // Its own replica, stopped and started by this test; the real fetch, its refusals counted.
    const port = await freePort();
    let replica = await startGateway(port);
    let refused = 0;
    const counting = async (input, init) => {
      try {
        return await fetch(input, init);
      } catch (e) {
        refused++;
        throw e;
      }
    };
    const c = new Client(`http://127.0.0.1:${port}`, { apiKey: KEY, fetch: counting, retries: 5 });
    try {
      const key = `restart-js-${call}`;
      const job = await c.submit("echo", "ridden out", { idempotencyKey: key });
      if (call !== "wait") await job.wait(30);
      const stopped = new Promise((r) => replica.once("exit", r));
      replica.kill("SIGTERM");
      await stopped;
      const calls = {
        wait: async () => (await job.wait(60)).status,
        refresh: async () => (await job.refresh()).status,
        result: async () => filePart(await job.result()).size,
        listing: async () => {
          const ids = [];
          for await (const j of c.jobs({ idempotencyKey: key })) ids.push(j.id);
          return ids;
        },
      };
      let error = null, answer;
      const running = calls[call]().then((a) => { answer = a; }, (e) => { error = e; });
      // (It rejected at the first refused connection.)
      const deadline = Date.now() + 20000;
      while (refused < 2 && !error && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(error, null);
      assert.ok(refused >= 2, "calls refused while the gateway was down");
      replica = await startGateway(port);
      await running;
      assert.equal(error, null);
      assert.deepEqual(answer, { wait: "completed", refresh: "completed", result: 10, listing: [job.id] }[call]);
    } finally {
      replica.kill("SIGTERM");
    }
  });

test("live events asked for while Redis does not answer are asked for again, to the end", async () => {
  // Its own replica, refusing sooner (503 after redis.retry_timeout); the 503s counted.
  const port = await freePort();
  const replica = await startGateway(port, { RELAY_REDIS_RETRY_TIMEOUT: "1s" });
  let refused = 0;
  const counting = async (input, init) => {
    const r = await fetch(input, init);
    if (r.status === 503) refused++;
    return r;
  };
  try {
    const c = new Client(`http://127.0.0.1:${port}`, { apiKey: KEY, fetch: counting });
    const job = await c.submit("slow", "followed");
    const names = [];
    let error = null;
    redis.kill("SIGSTOP");
    let following;
    try {
      following = (async () => { for await (const e of job.events()) names.push(e.name); })()
        .catch((e) => { error = e; });
      // (It rejected at the refusal.)
      const deadline = Date.now() + 20000;
      while (refused < 1 && !error && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    } finally {
      redis.kill("SIGCONT");
    }
    assert.ok(refused >= 1, "refused while Redis did not answer");
    await following;
    assert.equal(error, null);
    assert.equal(names.at(-1), "completed");
  } finally {
    replica.kill("SIGTERM");
  }
});

test("live events until the end, resumed after a cut", async () => {
  const job = await client().submit("slow", "x");
  const names = [];
  for await (const e of job.events()) names.push(e.name);
  assert.ok(["pending", "processing", "progress"].includes(names[0]), names.join());
  assert.equal(names.at(-1), "completed");
  assert.ok(names.includes("progress"), names.join());
  assert.equal(job.status, "completed");
  assert.ok(job.data.progress.fraction > 0);

  // The first stream is cut after its first event: the client resumes with Last-Event-ID.
  const cut = await client().submit("slow", "y");
  let streams = 0;
  const lastIds = [];
  const cutting = async (input, init) => {
    const r = await fetch(input, init);
    if (!String(input).endsWith("/events")) return r;
    lastIds.push(init.headers["Last-Event-ID"] || "");
    if (++streams > 1) return r;
    // Its bytes up to the end of the first whole event, then the connection "drops".
    const reader = r.body.getReader();
    const chunks = [];
    let text = "";
    while (!text.includes("\n\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      text += new TextDecoder().decode(value);
    }
    reader.cancel().catch(() => {});
    const body = new ReadableStream({
      pull(controller) {  // (an error in start() would discard what was enqueued)
        if (chunks.length) controller.enqueue(chunks.shift());
        else controller.error(new TypeError("terminated"));
      },
    });
    return new Response(body, { status: r.status, headers: r.headers });
  };
  const seen = [];
  for await (const e of new Client(url, { apiKey: KEY, fetch: cutting }).job("slow", cut.id).events()) seen.push(e);
  assert.ok(streams >= 2, "the stream was opened again");
  assert.equal(lastIds[0], "");
  assert.notEqual(lastIds[1], "", "resumed from the last event seen");
  assert.equal(seen.at(-1).name, "completed");
});

test("the SSE parser takes lines split anywhere", () => {
  const p = new SseParser();
  const text = 'id: 1\nevent: processing\ndata: {"id":"a","status":"processing"}\n\n: keep-alive\n\nid: 2\r\nevent: completed\r\ndata: {"id":"a","status":"completed"}\r\n\r\n';
  const events = [];
  for (let i = 0; i < text.length; i += 3) events.push(...p.feed(text.slice(i, i + 3)));
  assert.deepEqual(events.map((e) => [e.id, e.name, e.job.status]), [["1", "processing", "processing"], ["2", "completed", "completed"]]);
});

test("the client uses only what the gateway's /openapi.json documents", async () => {
  const doc = await (await fetch(url + "/openapi.json")).json();
  const used = [];
  const recording = (input, init) => {
    const u = new URL(String(input));
    used.push({ method: init.method.toLowerCase(), path: u.pathname, query: [...u.searchParams.keys()],
                fields: init.body instanceof FormData ? [...init.body.keys()] : [] });
    return fetch(input, init);
  };
  const c = new Client(url, { apiKey: KEY, fetch: recording, retries: 0 });
  const job = await c.submit("echo", "documented", {
    filename: "d.txt", operation: "transcribe", params: { a: 1 }, ttl: "1m", timeout: 30, maxAttempts: 2,
  });
  await c.submit("echo", null, { inputUrl: "https://example.com/in.wav", ttl: 60 }).catch(() => {});
  await job.wait(30);
  await job.result();
  for await (const _ of job.events()) { /* to its end */ }
  await job.cancel().catch(() => {});
  for await (const _ of c.jobs({ serviceType: "echo", status: ["completed", "failed"], since: "2020-01-01T00:00:00Z",
                                 until: "2100-01-01T00:00:00Z", idempotencyKey: "none", limit: 1 })) { /* one */ }
  for await (const _ of c.jobs({ limit: 3, pageSize: 1 })) { /* pages, with their cursor */ }

  const param = (p) => (p.$ref ? doc.components.parameters[p.$ref.split("/").at(-1)] : p).name;
  const templates = Object.keys(doc.paths).map((t) => ({
    t, re: new RegExp("^" + t.replace(/\{[^}]+\}/g, "[^/]+") + "$") }));
  assert.ok(used.length >= 8, JSON.stringify(used));
  for (const u of used) {
    const match = templates.find((x) => x.re.test(u.path));
    assert.ok(match, `${u.method} ${u.path} is no documented path`);
    const op = doc.paths[match.t][u.method];
    assert.ok(op, `${u.method} ${match.t} is not documented`);
    const names = new Set([...(op.parameters || []), ...(doc.paths[match.t].parameters || [])].map(param));
    const form = op.requestBody?.content?.["multipart/form-data"]?.schema?.properties || {};
    for (const q of u.query) assert.ok(names.has(q), `query parameter ${q} of ${u.method} ${match.t}`);
    for (const f of u.fields) assert.ok(f in form, `form field ${f} of ${u.method} ${match.t}`);
  }
  const job_fields = doc.components.schemas.Job.properties;
  for (const f of ["id", "service_type", "status", "error", "progress", "input"])
    assert.ok(f in job_fields, `job field ${f}`);
});

// A fetch whose result downloads are cut after `after` bytes, the first `cuts` times; `whole`:
// the Range asked for is dropped (the gateway then answers the whole result).
function cuttingResults({ cuts, after, whole = false }) {
  const seen = { requests: 0, ranges: [] };
  const f = async (input, init) => {
    if (!String(input).endsWith("/result")) return fetch(input, init);
    seen.ranges.push(init.headers.Range || "");
    if (whole) {
      delete init.headers.Range;
      delete init.headers["If-Range"];
    }
    const r = await fetch(input, init);
    if (seen.requests++ >= cuts) return r;
    const reader = r.body.getReader();
    let sent = 0;
    const body = new ReadableStream({
      async pull(controller) {
        const { value, done } = sent < after ? await reader.read() : { done: true };
        if (done) {
          reader.cancel().catch(() => {});
          controller.error(new TypeError("terminated"));
          return;
        }
        const keep = value.subarray(0, after - sent);
        sent += keep.length;
        controller.enqueue(keep);
      },
    });
    return new Response(body, { status: r.status, headers: r.headers });
  };
  return { f, seen };
}

test("a result download resumes where a cut left it; the file appears only whole", async () => {
  const job = await client().run("big", "x");
  const whole = new Uint8Array(await (await fetch(url + job.path + "/result",
    { headers: { Authorization: "Bearer " + KEY } })).arrayBuffer());
  assert.ok(whole.length > 400000);
  const path = join(root, "result.json");

  const resumed = cuttingResults({ cuts: 2, after: 100000 });
  const size = await new Client(url, { apiKey: KEY, fetch: resumed.f }).job("big", job.id).download(path);
  assert.equal(size, whole.length);
  assert.deepEqual(new Uint8Array(readFileSync(path)), whole);
  assert.deepEqual(resumed.seen.ranges, ["", "bytes=100000-", "bytes=200000-"]);
  assert.ok(!existsSync(path + ".part"));

  // A whole answer to a resume (the result is not the one resumed) starts the file over.
  const over = cuttingResults({ cuts: 1, after: 100000, whole: true });
  const again = join(root, "again.json");
  assert.equal(await new Client(url, { apiKey: KEY, fetch: over.f }).job("big", job.id).download(again), whole.length);
  assert.deepEqual(new Uint8Array(readFileSync(again)), whole);

  // A download that keeps dropping without progress fails and leaves nothing.
  const dropping = cuttingResults({ cuts: 100, after: 0 });
  const never = join(root, "never.json");
  await assert.rejects(new Client(url, { apiKey: KEY, fetch: dropping.f }).job("big", job.id).download(never, { reconnect: 2 }),
    (e) => e instanceof RelayError && e.status === 0);
  assert.ok(!existsSync(never) && !existsSync(never + ".part"));
  // Nothing to download: the API's error, and no file.
  const pending = await client().submit("slow", "x");
  await assert.rejects(pending.download(join(root, "none.json")), (e) => e.status === 409);
  assert.ok(!existsSync(join(root, "none.json.part")));
});

test("webhooks verify with the gateway's secret, and nothing else does", async () => {
  const received = [];
  const receiver = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200).end();
    });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  try {
    const hook = `http://127.0.0.1:${receiver.address().port}/hook`;
    const job = await client().run("echo", "hook", { callbackUrl: hook, webhookEvents: ["started", "terminal"] });
    const deadline = Date.now() + 30000;
    while (!received.some((r) => JSON.parse(r.body).event === "completed")) {
      assert.ok(Date.now() < deadline, "no terminal webhook");
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const r of received) {
      const doc = await verifyWebhook(WEBHOOK_SECRET, r.headers, r.body);
      assert.equal(doc.id, job.id);
    }
    const r = received[0];
    assert.equal((await verifyWebhook(WEBHOOK_SECRET, new Headers(r.headers), r.body.toString())).id, job.id,
      "a Headers and a string body too");
    const fails = (secret, headers, body) =>
      assert.rejects(verifyWebhook(secret, headers, body), WebhookVerificationError);
    await fails(WEBHOOK_SECRET, r.headers, Buffer.concat([r.body, Buffer.from(" ")]));
    await fails("whsec_" + "A".repeat(32), r.headers, r.body);
    await fails(WEBHOOK_SECRET, { ...r.headers, "webhook-timestamp": "1000" }, r.body);
    await fails(WEBHOOK_SECRET, { ...r.headers, "webhook-signature": "v1,AAAA" }, r.body);
    const { "webhook-id": _, ...noId } = r.headers;
    await fails(WEBHOOK_SECRET, noId, r.body);
  } finally {
    receiver.close();
  }
});

test("the TypeScript declarations name what the module exports, and its classes' methods", async () => {
  const module = await import("../relay-client.mjs");
  const dts = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "relay-client.d.mts"), "utf8");
  const declared = [...dts.matchAll(/^export (?:class|function) (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(declared, Object.keys(module).sort());
  // Each method declared on Client and Job exists on the class.
  for (const cls of ["Client", "Job"]) {
    const body = dts.slice(dts.indexOf(`export class ${cls} {`));
    const block = body.slice(0, body.indexOf("\n}\n"));
    for (const [, name] of block.matchAll(/^  (\w+)\(/gm))
      if (name !== "constructor") assert.equal(typeof module[cls].prototype[name], "function", `${cls}.${name}`);
  }
});
