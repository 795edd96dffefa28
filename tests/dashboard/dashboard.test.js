// The operator dashboard in a real browser (Debian's chromium, headless, driven by
// puppeteer-core) against a running stack (relayctl up, with operator keys): the pages load
// without console errors; a job submitted through the API shows up with its timings; a
// dead-lettered job is requeued from the UI and completes; pausing holds a model's jobs out of
// pending (what the scaler counts); a read-only operator cannot change anything.
// With RELAY_SCREENSHOTS_DIR set, the main pages are saved there (the README's pictures).
// And a web app on another origin calls the API from the browser (CORS): allowed when its origin
// is in server.cors_origins, kept from the answers when it is not.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import http from "node:http";
import puppeteer from "puppeteer-core";

const RELAYCTL = process.env.RELAYCTL;
const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.RELAY_SCREENSHOTS_DIR || "";
const ADMIN = "dashboard-admin-key", VIEWER = "dashboard-viewer-key";
const sha = (s) => createHash("sha256").update(s).digest("hex");

let up, base, redisUrl, browser, dataDir;
// Two web apps on origins of their own (another port is another origin): the first listed in
// server.cors_origins, the second not.
let appServer, appOrigin, strangerOrigin;
const consoleErrors = [];

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}
async function until(pred, ms = 30000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const redis = (...args) => execFileSync("redis-cli", ["-u", redisUrl, ...args]).toString().trim();
async function submit(content) {
  const form = new FormData();
  form.append("file", new Blob([content]), "in.txt");
  const r = await fetch(base + "/jobs/echo", { method: "POST", body: form });
  assert.equal(r.status, 202);
  return (await r.json()).id;
}
async function job(id, wait = 0) {
  return (await fetch(base + "/jobs/echo/" + id + (wait ? "?wait=" + wait : ""))).json();
}
async function signIn(page, key) {
  await page.goto(base + "/dashboard", { waitUntil: "networkidle0" });
  await page.type("#key", key);
  await page.click("#login-form button");
  await page.waitForSelector("#queues tbody tr[data-model]");
}
async function newPage(context) {
  const page = await (context || browser).newPage();
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.setViewport({ width: 1280, height: 900 });
  return page;
}
async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: join(SHOTS, name + ".png"), fullPage: true });
}

before(async () => {
  assert.ok(RELAYCTL, "set RELAYCTL to the relayctl binary");
  dataDir = mkdtempSync(join(tmpdir(), "relay-dashboard-"));
  // The app's page, and the JavaScript client (clients/js) served as the app would serve it.
  const clientModule = readFileSync(join(REPO, "clients", "js", "relay-client.mjs"));
  appServer = http.createServer((req, res) => {
    if (req.url === "/relay-client.mjs") {
      res.writeHead(200, { "Content-Type": "text/javascript" });
      res.end(clientModule);
      return;
    }
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end("<!doctype html><title>app</title>");
  });
  await new Promise((r) => appServer.listen(0, "127.0.0.1", r));
  appOrigin = "http://127.0.0.1:" + appServer.address().port;
  strangerOrigin = "http://localhost:" + appServer.address().port;  // another host: another origin
  const port = await freePort();
  base = "http://127.0.0.1:" + port;
  up = spawn(RELAYCTL, ["up", "--port", String(port), "--max-relays", "2", "--data-dir", dataDir], {
    env: { ...process.env, RELAY_ADMIN_API_KEYS: `${sha(ADMIN)}=admin,${sha(VIEWER)}=read`,
           RELAY_SERVER_CORS_ORIGINS: appOrigin },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  up.stdout.on("data", (d) => { log += d; });
  up.stderr.on("data", (d) => { log += d; });
  await until(() => log.includes("Relay is up"), 60000, "relayctl up: " + log);
  redisUrl = log.match(/redis (redis:\/\/[0-9.:]+)/)[1];
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
});

after(async () => {
  if (browser) await browser.close();
  if (up) {
    up.kill("SIGTERM");
    await new Promise((r) => up.once("exit", r));
  }
  if (appServer) appServer.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test("the pages load and a job submitted through the API shows its timings", async () => {
  const page = await newPage();
  await signIn(page, ADMIN);
  assert.equal(await page.$eval("#role", (e) => e.textContent), "admin");
  const models = await page.$$eval("#queues tbody tr[data-model]", (rows) => rows.map((r) => r.dataset.model));
  assert.ok(models.includes("echo"), models.join());
  const id = await submit("hello dashboard");
  assert.equal((await job(id, 30)).status, "completed");
  await page.type("#search", id);
  await page.click("#search-form button");
  await page.waitForSelector("#detail:not([hidden]) #detail-timings tr[data-stage='inference']");
  assert.equal(await page.$eval("#detail-title", (e) => e.textContent), "echo/" + id);
  const stages = await page.$$eval("#detail-timings tr", (rows) => rows.map((r) => r.dataset.stage));
  for (const s of ["queue_wait", "inference", "total"]) assert.ok(stages.includes(s), stages.join());
  await shot(page, "job-detail");
  await page.click("#detail-close");
  // The page refreshes itself: the finished job shows in the throughput and the tenant's list.
  await page.waitForFunction(() => {
    const row = document.querySelector("#queues tbody tr[data-model='echo']");
    return row && Number(row.children[8].textContent) >= 1;
  }, { timeout: 15000 });
  await page.waitForSelector(`#finished tbody a[data-id='${id}']`, { timeout: 15000 });
  await shot(page, "queues");
  // Usable on a phone: nothing wider than the screen.
  await page.setViewport({ width: 390, height: 844, isMobile: true });
  await page.reload({ waitUntil: "networkidle0" });
  await page.waitForSelector("#queues tbody tr[data-model]");
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 392, "page width on a phone: " + width);
  await shot(page, "phone");
  await page.close();
  assert.deepEqual(consoleErrors, []);
});

test("pausing holds jobs out of pending, and a dead-lettered job requeued from the UI completes", async () => {
  const page = await newPage();
  await signIn(page, ADMIN);
  const row = "#queues tbody tr[data-model='echo']";
  await page.click(row + " button");  // Pause
  await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes("paused"), {}, row);
  const id = await submit("to the dead letter");
  assert.equal(redis("LLEN", "relay:echo:pending"), "0", "the scaler sees nothing to do");
  assert.equal(redis("LLEN", "relay:echo:held"), "1");
  // Make it a dead letter, as the reaper would after its relay died too often.
  redis("LMOVE", "relay:echo:held", "relay:echo:deadletter", "LEFT", "RIGHT");
  redis("HSET", "job:" + id, "status", "failed", "error_code", "dead_lettered", "error_message", "relay died");
  await page.click(row + " button");  // Resume
  await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes("running"), {}, row);
  await page.select("#model", "echo");
  await page.click("#states button[data-state='deadletter']");
  const dead = `#jobs tbody tr[data-id='${id}']`;
  await page.waitForSelector(dead + " button");
  await shot(page, "dead-letter");
  await page.click(dead + " button");  // Requeue
  const done = await until(async () => { const j = await job(id); return j.status === "completed" && j; }, 60000, "the requeued job");
  assert.equal(done.error, null);
  await page.close();
  assert.deepEqual(consoleErrors, []);
});

test("a read-only operator sees everything and cannot change anything", async () => {
  const context = await browser.createBrowserContext();
  const page = await newPage(context);
  await signIn(page, VIEWER);
  assert.equal(await page.$eval("#role", (e) => e.textContent), "read-only");
  assert.equal(await page.$$eval("#queues tbody button", (b) => b.length), 0, "no pause buttons");
  const id = await submit("read only");
  await page.waitForSelector(`#jobs tbody tr[data-id='${id}'], #jobs tbody tr`);
  assert.equal(await page.$$eval("#jobs tbody button", (b) => b.length), 0, "no cancel buttons");
  const status = await page.evaluate(async (jobId, key) => {
    const r = await fetch("/admin/api/jobs/echo/" + jobId + "/cancel", { method: "POST", headers: { Authorization: "Bearer " + key } });
    return r.status;
  }, id, VIEWER);
  assert.equal(status, 403);
  await page.click("#signout");
  await page.waitForSelector("#login:not([hidden])");
  await context.close();
  assert.deepEqual(consoleErrors.filter((e) => !e.includes("403")), []);
});

// What a web app does from its own origin: a submission with headers that need a preflight
// (Authorization, Idempotency-Key), the Location it was told, a long-poll, an error it must be
// able to read, and the job's live events. In the browser, under its CORS rules.
async function fromTheApp(origin) {
  const page = await browser.newPage();  // (not newPage(): a refused origin logs errors on purpose)
  try {
    await page.goto(origin + "/", { waitUntil: "load" });
    return await page.evaluate(async (base) => {
      try {
        const form = new FormData();
        form.append("file", new Blob(["from a web app"]), "in.txt");
        const submitted = await fetch(base + "/jobs/echo", {
          method: "POST", body: form,
          headers: { Authorization: "Bearer app-user", "Idempotency-Key": "cors-" + Math.random() },
        });
        const location = submitted.headers.get("Location");
        const { id } = await submitted.json();
        const done = await (await fetch(base + location + "?wait=30")).json();
        const cancel = await fetch(base + location, { method: "DELETE" });
        const refusal = await cancel.json();
        const event = await new Promise((resolve, reject) => {
          const es = new EventSource(base + location + "/events");
          // (Each event is named by the job's status.)
          es.addEventListener("completed", (e) => { es.close(); resolve(JSON.parse(e.data)); });
          es.onerror = () => { es.close(); reject(new Error("event stream refused")); };
        });
        return { status: submitted.status, id, location, done: done.status, cancel: cancel.status,
                 refusal: refusal.error.code, event: event.status };
      } catch (e) {
        return { error: String(e) };
      }
    }, base);
  } finally {
    await page.close();
  }
}

test("a web app on a listed origin calls the API from the browser; another origin cannot", async () => {
  const app = await fromTheApp(appOrigin);
  assert.equal(app.error, undefined, app.error);
  assert.equal(app.status, 202);
  assert.equal(app.location, "/jobs/echo/" + app.id, "Location is exposed to the page");
  assert.equal(app.done, "completed");
  assert.equal(app.cancel, 409, "an ended job's cancel is refused");
  assert.equal(app.refusal, "job_finished", "and the page reads why");
  assert.equal(app.event, "completed");

  const pending = Number(redis("LLEN", "relay:echo:pending"));
  const stranger = await fromTheApp(strangerOrigin);
  assert.match(stranger.error || "", /TypeError|Failed to fetch/, JSON.stringify(stranger));
  // Its preflight was refused: the submission was never sent.
  assert.equal(Number(redis("LLEN", "relay:echo:pending")), pending);
});

test("the JavaScript client works in a page on a listed origin", async () => {
  const page = await browser.newPage();
  try {
    await page.goto(appOrigin + "/", { waitUntil: "load" });
    const got = await page.evaluate(async (base) => {
      const { Client, JobCancelled } = await import("/relay-client.mjs");
      const relay = new Client(base, { apiKey: "a-browser-user" });
      const job = await relay.submit("echo", new Blob(["in the browser"]), { filename: "page.txt",
                                                                          params: { n: 1 } });
      const names = [];
      for await (const e of job.events()) names.push(e.name);
      const answer = await job.result();
      const listed = [];
      for await (const j of relay.jobs({ serviceType: "echo", limit: 5 })) listed.push(j.id);
      let refused = "";
      try {
        await relay.job("echo", job.id).cancel();
      } catch (e) {
        refused = e.code;
      }
      return { status: job.status, last: names.at(-1), file: answer.parts.find((p) => p.name === "file").filename,
               listed: listed.includes(job.id), refused, typed: typeof JobCancelled };
    }, base);
    assert.deepEqual(got, { status: "completed", last: "completed", file: "page.txt", listed: true,
                            refused: "job_finished", typed: "function" });
  } finally {
    await page.close();
  }
});
