// Submit-to-completion latency at a light, fixed rate (open loop: a job is started every
// 1/rate s whatever the others do), each job timed from just before its submission to the
// moment its client sees it completed. 1 KiB inputs.
//   node latency.js bullmq <redis port> <rate> <n>: Queue.add; completion from QueueEvents.
//   node latency.js relay <gateway url> <rate> <n>: POST /jobs/echo; completion by the long-poll
//     GET /jobs/echo/<id>?wait=30 (keep-alive connections).
//   node latency.js relay-wait <gateway url> <rate> <n>: the same, the POST with `Prefer: wait=30`
//     (the answer held until the job ends; the long-poll only if it did not).
// Prints {"n", "p50_ms", "p99_ms"} as JSON.
import http from "node:http";
import { Queue, QueueEvents } from "bullmq";

const [, , mode, target, rateArg, nArg] = process.argv;
const rate = Number(rateArg), n = Number(nArg);
const input = "x".repeat(1024);
const latencies = [];

async function bullmq() {
  const connection = { host: "127.0.0.1", port: Number(target) };
  const queue = new Queue("bench", { connection });
  const events = new QueueEvents("bench", { connection });
  await events.waitUntilReady();
  const started = new Map();
  let finished;
  const all = new Promise((resolve) => (finished = resolve));
  events.on("completed", ({ jobId }) => {
    const t0 = started.get(jobId);
    if (t0 === undefined) return;
    latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (latencies.length === n) finished();
  });
  for (let i = 0; i < n; i++) {
    const id = "lat-" + i;
    started.set(id, process.hrtime.bigint());
    queue.add("job", { input }, { jobId: id, removeOnComplete: true });
    await new Promise((r) => setTimeout(r, 1000 / rate));
  }
  await all;
  await events.close();
  await queue.close();
}

async function relay() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const url = new URL(target);
  // relay-wait: the submission itself waits for its job (Prefer: wait), as the clients' run() does.
  const prefer = mode === "relay-wait" ? { Prefer: "wait=30" } : {};
  const request = (method, path, body, extra = {}) =>
    new Promise((resolve, reject) => {
      const req = http.request(
        { host: url.hostname, port: url.port, method, path, agent,
          headers: { ...(body ? { "Content-Type": "application/octet-stream",
                                  "Content-Length": body.length } : {}),
                     ...extra,
                     // (the bench's --auth: the gateway then wants an API key)
                     ...(process.env.RELAY_API_KEY
                       ? { Authorization: `Bearer ${process.env.RELAY_API_KEY}` } : {}) } },
        (res) => {
          let text = "";
          res.on("data", (c) => (text += c));
          res.on("end", () => resolve({ status: res.statusCode, text }));
        });
      req.on("error", reject);
      req.end(body);
    });
  const one = async () => {
    const t0 = process.hrtime.bigint();
    const sub = JSON.parse((await request("POST", "/jobs/echo?filename=in.bin", input, prefer)).text);
    for (let st = sub; st.status !== "completed";) {
      if (st.status === "failed" || st.status === "cancelled") throw new Error(st.status);
      st = JSON.parse((await request("GET", `/jobs/echo/${sub.id}?wait=30`)).text);
    }
    latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
  };
  const running = [];
  for (let i = 0; i < n; i++) {
    running.push(one());
    await new Promise((r) => setTimeout(r, 1000 / rate));
  }
  await Promise.all(running);
  agent.destroy();
}

await (mode === "bullmq" ? bullmq() : relay());
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
console.log(JSON.stringify({ n: latencies.length, p50_ms: at(0.5), p99_ms: at(0.99) }));
process.exit(0);
