// Submit-to-completion latency at a light, fixed rate (open loop: a job is started every
// 1/rate s whatever the others do), each job timed from just before its submission to the
// moment its client sees it completed. 1 KiB inputs.
//   node latency.js bullmq <redis port> <rate> <n>: Queue.add; completion from QueueEvents.
//   node latency.js relay <gateway url> <rate> <n>: POST /jobs/echo; completion by the long-poll
//     GET /jobs/echo/<id>?wait=30 (keep-alive connections).
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
  const request = (method, path, body) =>
    new Promise((resolve, reject) => {
      const req = http.request(
        { host: url.hostname, port: url.port, method, path, agent,
          headers: { ...(body ? { "Content-Type": "application/octet-stream",
                                  "Content-Length": body.length } : {}),
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
    const sub = await request("POST", "/jobs/echo?filename=in.bin", input);
    const id = JSON.parse(sub.text).id;
    for (;;) {
      const st = JSON.parse((await request("GET", `/jobs/echo/${id}?wait=30`)).text);
      if (st.status === "completed") break;
      if (st.status === "failed" || st.status === "cancelled") throw new Error(st.status);
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
