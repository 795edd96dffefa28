// Relay's JavaScript client: one ES module, no dependencies, for Node 18+ and browsers (a web
// app on an origin listed in the gateway's server.cors_origins). It mirrors the Python client
// (clients/python): submit with retries that never make a second job (one Idempotency-Key per
// submission), long-polled waits, live events resumed after a drop, listings followed page by
// page, and typed errors from the API's error codes.
//
//   import { Client } from "./relay-client.mjs";
//   const relay = new Client("https://relay.example.com", { apiKey: "..." });
//   const job = await relay.submit("ocr", new Blob([bytes]), { filename: "scan.png" });
//   await job.wait();                 // throws JobFailed / JobCancelled when it did not complete
//   const text = await job.result();  // JSON, or a Uint8Array for other content types
//   for await (const e of job.events()) console.log(e.name, e.job.progress);

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

/** The gateway refused a request: `status` (HTTP; 0: no answer), `code`, `message`. */
export class RelayError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(`${status} ${code}: ${message}`);
    this.name = "RelayError";
    this.status = status;
    this.code = code;
    this.detail = message;
    this.retryAfter = retryAfter;  // seconds, from Retry-After (429, 503)
  }
}

/** A job ended without a result; `job` is its JSON. */
export class JobError extends Error {
  constructor(job, message) {
    super(message);
    this.name = "JobError";
    this.job = job;
  }
}
export class JobFailed extends JobError {
  constructor(job) {
    const error = job.error || {};
    super(job, `job ${job.id} failed: ${error.code}: ${error.message}`);
    this.name = "JobFailed";
    this.code = error.code || "";
  }
}
export class JobCancelled extends JobError {
  constructor(job) {
    super(job, `job ${job.id} was cancelled`);
    this.name = "JobCancelled";
  }
}
/** wait() gave up before the job ended; the job is still running. */
export class WaitTimeout extends JobError {
  constructor(job, seconds) {
    super(job, `job ${job.id} still ${job.status} after ${seconds}s`);
    this.name = "WaitTimeout";
  }
}

/** A webhook whose signature or timestamp does not verify. */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

// Worth sending the same request again (a submission with its Idempotency-Key): no answer, or
// one that says to try later — a 503 (Redis restarting or failing over), a proxy's 502 or 504
// (a gateway restarting behind an ingress) —, or the key's first submission in progress.
const retryable = (e) => e instanceof RelayError &&
  ([0, 502, 503, 504].includes(e.status) || e.code === "idempotency_in_progress");
// Seconds before the next try: the server's Retry-After, else 0.5 s doubling, at most 10.
const backoff = (attempt, e) => Math.min(e.retryAfter ?? 0.5 * 2 ** attempt, 10);

async function errorFrom(response) {
  let code = "http_" + response.status, message = response.statusText;
  try {
    const body = await response.json();
    if (body && body.error) ({ code, message } = body.error);
  } catch {
    // (not the API's JSON: a proxy's page)
  }
  const after = Number(response.headers.get("retry-after"));
  return new RelayError(response.status, code, message, Number.isFinite(after) && after > 0 ? after : null);
}

// WebCrypto: a global in browsers and Node 19+; Node 18 has it as node:crypto's webcrypto.
async function webCrypto() {
  return globalThis.crypto?.subtle ? globalThis.crypto : (await import("node:crypto")).webcrypto;
}

async function randomKey() {
  const bytes = new Uint8Array(16);
  (await webCrypto()).getRandomValues(bytes);
  return "relay-js-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** "30s", "10m", or a number of seconds. */
const duration = (v) => (v == null ? null : typeof v === "number" ? `${v}s` : String(v));

/** Server-Sent Events fed text as it arrives (a line may be split across chunks). */
export class SseParser {
  constructor() {
    this.buffer = "";
    this.id = "";
    this.name = "";
    this.data = [];
  }
  feed(text) {
    this.buffer += text;
    const out = [];
    let nl;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      // (A CRLF may arrive split across two chunks: the CR is dropped with its line.)
      const line = this.buffer.slice(0, this.buffer[nl - 1] === "\r" ? nl - 1 : nl);
      this.buffer = this.buffer.slice(nl + 1);
      if (line === "") {
        if (this.data.length)
          out.push({ id: this.id, name: this.name || "message", job: JSON.parse(this.data.join("\n")) });
        this.name = "";
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue;  // a keep-alive comment
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") this.id = value;
      else if (field === "event") this.name = value;
      else if (field === "data") this.data.push(value);
    }
    return out;
  }
}

export class Client {
  /**
   * @param {string} baseUrl the gateway, e.g. "https://relay.example.com"
   * @param {{apiKey?: string, retries?: number, priorityHeader?: string, fetch?: typeof fetch}} options
   *   apiKey defaults to $RELAY_API_KEY under Node; submissions and reads (a job, its result, a
   *   listing's pages) are retried `retries` times, after a backoff, when the gateway is
   *   unreachable or answers 502, 503 or 504 — a submission with the same Idempotency-Key: never a
   *   second job. (A cancel is not: its second try could find the job it cancelled ended.)
   */
  constructor(baseUrl, { apiKey, retries = 3, priorityHeader = "X-Priority", fetch: f } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey ?? globalThis.process?.env?.RELAY_API_KEY ?? null;
    this.retries = retries;
    this.priorityHeader = priorityHeader;
    this.fetch = f || globalThis.fetch.bind(globalThis);
  }

  /** A request answered below 400 (its Response), else the RelayError for its answer. */
  async request(method, path, { query, headers = {}, body, signal } = {}) {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query || {})) if (v != null) url.searchParams.set(k, String(v));
    const h = { ...headers };
    if (this.apiKey) h.Authorization = "Bearer " + this.apiKey;
    let response;
    try {
      response = await this.fetch(url, { method, headers: h, body, signal });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new RelayError(0, "unreachable", String(e));
    }
    if (response.status >= 400) throw await errorFrom(response);
    return response;
  }

  /** A read (GET), sent again after no answer or a 502/503/504, up to `retries` times. */
  async read(path, options = {}) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.request("GET", path, options);
      } catch (e) {
        if (!retryable(e) || attempt >= this.retries || options.signal?.aborted) throw e;
        await sleep(backoff(attempt, e));
      }
    }
  }

  /**
   * Submits a job: `input` a Blob, File, ArrayBuffer, typed array or string (sent as a
   * multipart file), or null with `options.inputUrl` (by reference). Options: filename,
   * contentType, operation, params (JSON), callbackUrl, webhookEvents (array), ttl, timeout
   * ("30s" or seconds), maxAttempts, priority (boolean), idempotencyKey (default: a new one),
   * wait (seconds: the gateway answers once the job ended, or that wait passed — Prefer: wait,
   * at most its server.max_wait).
   * @returns {Promise<Job>}
   */
  async submit(serviceType, input, options = {}) {
    if ((input == null) === (options.inputUrl == null))
      throw new TypeError("give an input or options.inputUrl, not both");
    const fields = {
      operation: options.operation,
      params: options.params != null ? JSON.stringify(options.params) : null,
      callback_url: options.callbackUrl,
      webhook_events: options.webhookEvents?.length ? options.webhookEvents.join(",") : null,
      ttl: duration(options.ttl),
      timeout: duration(options.timeout),
      max_attempts: options.maxAttempts,
      input_url: options.inputUrl,
    };
    const headers = { "Idempotency-Key": options.idempotencyKey || (await randomKey()) };
    if (options.priority) headers[this.priorityHeader] = "1";
    if (options.wait >= 1) headers.Prefer = `wait=${Math.floor(options.wait)}`;
    const build = () => {
      if (input == null) return { query: fields, headers, body: new Uint8Array(0) };
      const form = new FormData();
      for (const [k, v] of Object.entries(fields)) if (v != null) form.append(k, String(v));
      // (A Blob or File keeps its own type unless contentType names another.)
      const blob = input instanceof Blob && !options.contentType ? input
        : new Blob([input], { type: options.contentType || input.type || "application/octet-stream" });
      form.append("file", blob, options.filename || input.name || "input");
      return { headers, body: form };
    };
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await this.request("POST", `/jobs/${encodeURIComponent(serviceType)}`, build());
        return new Job(this, await r.json());
      } catch (e) {
        if (!retryable(e) || attempt >= this.retries) throw e;
        await sleep(backoff(attempt, e));
      }
    }
  }

  /** A job by its id (nothing is asked until a method needs it). */
  job(serviceType, id) {
    return new Job(this, { id, service_type: serviceType, status: "pending" });
  }

  /**
   * submit() then wait(): the completed job (or JobFailed / JobCancelled / WaitTimeout). The
   * submission itself waits for the job (Prefer: wait), up to a minute of waitSeconds.
   */
  async run(serviceType, input, options = {}, waitSeconds = null) {
    const started = Date.now();
    const wait = waitSeconds == null ? 60 : Math.max(0, Math.min(60, Math.floor(waitSeconds)));
    const job = await this.submit(serviceType, input, { wait, ...options });
    const left = waitSeconds == null ? null : Math.max(0, waitSeconds - (Date.now() - started) / 1000);
    return job.wait(left);
  }

  /**
   * The tenant's jobs, newest first (all service types without one), page after page:
   * filters status (string or array), since, until, idempotencyKey; limit: how many in all.
   */
  async *jobs({ serviceType, status, since, until, idempotencyKey, limit, pageSize = 100 } = {}) {
    const path = serviceType ? `/jobs/${encodeURIComponent(serviceType)}` : "/jobs";
    let cursor = null, given = 0;
    for (;;) {
      const want = limit == null ? pageSize : Math.min(pageSize, limit - given);
      if (want <= 0) return;
      const query = { limit: want, status: Array.isArray(status) ? status.join(",") : status,
                      since, until, idempotency_key: idempotencyKey, cursor };
      const page = await (await this.read(path, { query })).json();
      for (const j of page.jobs) {
        given++;
        yield new Job(this, j);
      }
      cursor = page.next_cursor;
      if (!cursor || !page.jobs.length) return;
    }
  }
}

export class Job {
  constructor(client, data) {
    this.client = client;
    this.data = data;
  }
  get id() { return this.data.id; }
  get serviceType() { return this.data.service_type; }
  get status() { return this.data.status; }
  get done() { return TERMINAL.has(this.data.status); }
  get path() { return `/jobs/${encodeURIComponent(this.serviceType)}/${this.id}`; }

  async refresh() {
    this.data = await (await this.client.read(this.path)).json();
    return this;
  }

  /**
   * Long-polls until the job ends (`timeoutSeconds`: at most that long, else WaitTimeout).
   * Resolves with the job when it completed; rejects with JobFailed or JobCancelled otherwise.
   * A poll the gateway did not answer, or answered 502/503/504 (restarting, Redis failing
   * over), is sent again after a backoff, up to `reconnect` times in a row.
   */
  async wait(timeoutSeconds = null, { reconnect = 5 } = {}) {
    const deadline = timeoutSeconds == null ? null : Date.now() + timeoutSeconds * 1000;
    for (let failed = 0; ;) {
      if (this.done) break;
      const left = deadline == null ? 60 : (deadline - Date.now()) / 1000;
      if (left <= 0) throw new WaitTimeout(this.data, timeoutSeconds);
      const wait = Math.max(1, Math.min(60, Math.floor(left)));
      let response;
      try {
        response = await this.client.request("GET", this.path, { query: { wait } });
      } catch (e) {
        if (failed >= reconnect || !retryable(e)) throw e;
        await sleep(Math.min(backoff(failed++, e), left));
        continue;
      }
      failed = 0;
      this.data = await response.json();
    }
    if (this.data.status === "failed") throw new JobFailed(this.data);
    if (this.data.status === "cancelled") throw new JobCancelled(this.data);
    return this;
  }

  /** The completed job's result: parsed JSON, or a Uint8Array for any other content type. */
  async result() {
    const r = await this.client.read(this.path + "/result");
    const type = (r.headers.get("content-type") || "").split(";")[0].trim().toLowerCase();
    return type === "application/json" ? r.json() : new Uint8Array(await r.arrayBuffer());
  }

  /**
   * Node: streams the completed job's result into the file at `path`, never whole in memory,
   * and resolves with its size. A download cut midway resumes where it stopped (Range, with
   * If-Range on the result's ETag so two versions never mix; `reconnect` cuts in a row without
   * progress at most); the file appears at `path` only once whole (`<path>.part` until then).
   */
  async download(path, { reconnect = 5 } = {}) {
    const fs = await import("node:fs/promises");
    const part = path + ".part";
    const file = await fs.open(part, "w");
    let got = 0, total = null, etag = null, tries = 0;
    try {
      for (;;) {
        const headers = got && etag ? { Range: `bytes=${got}-`, "If-Range": etag } : {};
        try {
          const r = await this.client.request("GET", this.path + "/result", { headers });
          etag = r.headers.get("etag");
          if (r.status === 206) {
            const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(r.headers.get("content-range") || "");
            if (!m || Number(m[1]) !== got)
              throw new RelayError(206, "bad_range", "the gateway answered another range: " +
                                   r.headers.get("content-range"));
            total = Number(m[3]);
          } else {
            // The whole result (first, or the result is not the one resumed): from the start.
            const length = r.headers.get("content-length");
            total = length == null ? null : Number(length);
            got = 0;
            await file.truncate(0);
          }
          for await (const chunk of r.body) {
            await file.write(chunk, 0, chunk.length, got);
            got += chunk.length;
            if (chunk.length) tries = 0;  // the cuts counted are those in a row without progress
          }
          if (total == null || got >= total) break;
        } catch (e) {
          if (!(e instanceof RelayError && e.status === 0) && !(e instanceof TypeError)) throw e;
        }
        if (++tries > reconnect) throw new RelayError(0, "unreachable", "the result download kept dropping");
        await sleep(Math.min(0.2 * 2 ** tries, 5));
      }
      await file.close();
      await fs.rename(part, path);
      return got;
    } catch (e) {
      await file.close().catch(() => {});
      await fs.rm(part, { force: true });
      throw e;
    }
  }

  /** Cancels the job: at once while pending, else the relay stops it (see `status`). */
  async cancel() {
    this.data = await (await this.client.request("DELETE", this.path)).json();
    return this;
  }

  /**
   * The job's live events until its end ({id, name, job}, `name` the status), read with fetch
   * (an EventSource cannot send the API key); a dropped stream is resumed with Last-Event-ID,
   * as is one refused for now (502, 503, 504), `reconnect` times in a row at most.
   */
  async *events({ reconnect = 5, signal } = {}) {
    let lastId = "", tries = 0;
    for (;;) {
      const parser = new SseParser();
      let refused = null;
      try {
        const headers = lastId ? { "Last-Event-ID": lastId } : {};
        const r = await this.client.request("GET", this.path + "/events", { headers, signal });
        const decoder = new TextDecoder();
        const reader = r.body.getReader();
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            for (const event of parser.feed(decoder.decode(value, { stream: true }))) {
              lastId = event.id;
              tries = 0;
              this.data = event.job;
              yield event;
              if (TERMINAL.has(event.name)) return;
            }
          }
        } finally {
          await reader.cancel().catch(() => {});  // (a stream left early frees its connection)
        }
        // The gateway closes a stream after its terminal event; one that ended without it was
        // cut (a gateway restarting): resume.
        if (this.done) return;
      } catch (e) {
        // No answer, a cut, or refused for now (503: Redis failing over; a proxy's 502/504): again.
        if (!retryable(e) && !(e instanceof TypeError)) throw e;
        if (signal?.aborted) throw e;
        refused = e instanceof RelayError && e.status !== 0 ? e : null;
      }
      if (++tries > reconnect) throw refused ?? new RelayError(0, "unreachable", "the event stream kept dropping");
      await sleep(refused?.retryAfter ? Math.min(refused.retryAfter, 10) : Math.min(0.2 * 2 ** tries, 5));
    }
  }
}

const base64Bytes = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

/**
 * Verifies a webhook the gateway sent (Standard Webhooks: webhook-id, webhook-timestamp,
 * webhook-signature "v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>", keyed with the bytes
 * of the gateway's webhooks.secret, whsec_<base64>). `headers`: a Headers or a plain object (names
 * in any case); `body`: the raw body as received (string or bytes) — not re-serialized JSON.
 * Resolves with the webhook's JSON (the job, with "event"); rejects with
 * WebhookVerificationError when no signature matches or the timestamp is further than
 * `toleranceSeconds` from now (a replay). WebCrypto: Node 18+, browsers, edge runtimes.
 */
export async function verifyWebhook(secret, headers, body, { toleranceSeconds = 300 } = {}) {
  const get = (name) => (typeof headers.get === "function" ? headers.get(name)
    : Object.entries(headers).find(([k]) => k.toLowerCase() === name)?.[1]) ?? null;
  const id = get("webhook-id"), timestamp = get("webhook-timestamp"), signatures = get("webhook-signature");
  for (const [name, value] of [["webhook-id", id], ["webhook-timestamp", timestamp], ["webhook-signature", signatures]])
    if (value == null) throw new WebhookVerificationError("missing header " + name);
  if (!/^\d+$/.test(timestamp)) throw new WebhookVerificationError("webhook-timestamp is not a number");
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > toleranceSeconds)
    throw new WebhookVerificationError("webhook-timestamp is too far from now (a replay?)");
  const raw = typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body);
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + raw.length);
  signed.set(prefix);
  signed.set(raw, prefix.length);
  const { subtle } = await webCrypto();
  let key;
  try {
    key = await subtle.importKey("raw", base64Bytes(secret.replace(/^whsec_/, "")),
                                                   { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  } catch {
    throw new WebhookVerificationError("the secret is not whsec_<base64>");
  }
  for (const candidate of String(signatures).split(" ")) {
    const [version, sig] = candidate.split(",", 2);
    if (version !== "v1" || !sig) continue;
    let given;
    try {
      given = base64Bytes(sig);
    } catch {
      continue;
    }
    // (verify compares in constant time)
    if (await subtle.verify("HMAC", key, given, signed))
      return JSON.parse(new TextDecoder().decode(raw));
  }
  throw new WebhookVerificationError("no signature matches");
}
