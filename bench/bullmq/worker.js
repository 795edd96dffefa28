// A BullMQ worker (the reference's best configuration: concurrency 64, a no-op processor; or a
// processor that takes delay ms, as a model would; or, given a model URL, one that POSTs each
// job's input to that model server as Relay's relay does — multipart, kept-alive connections —
// and returns its answer: a queue library bolted onto a model server). Prints "ready", then
// "done <n>" once it has completed n jobs (its first argument).
import http from "node:http";
import { Worker } from "bullmq";

const [, , total, concurrency = "64", port = "6379", delay = "0", model = ""] = process.argv;
const ms = Number(delay);

function infer(input) {
  const url = new URL(model);
  const agent = infer.agent ??= new http.Agent({ keepAlive: true, maxSockets: Number(concurrency) });
  const boundary = "relaybenchboundary";
  const body = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.bin"\r\n` +
      `Content-Type: application/octet-stream\r\n\r\n${input}\r\n--${boundary}--\r\n`,
  );
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname, port: url.port, path: "/predict", method: "POST", agent,
        headers: { "Content-Type": `multipart/form-data; boundary=${boundary}`, "Content-Length": body.length },
      },
      (res) => {
        const parts = [];
        res.on("data", (d) => parts.push(d));
        res.on("end", () =>
          res.statusCode === 200 ? resolve(Buffer.concat(parts).toString()) : reject(new Error(`HTTP ${res.statusCode}`)));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const processor = model
  ? (job) => infer(job.data.input)
  : ms > 0
    ? () => new Promise((resolve) => setTimeout(resolve, ms))
    : async () => null;
let done = 0;
const worker = new Worker("bench", processor, {
  connection: { host: "127.0.0.1", port: Number(port) },
  concurrency: Number(concurrency),
});
worker.on("completed", () => {
  if (++done === Number(total)) {
    console.log("done " + done);
    worker.close().then(() => process.exit(0));
  }
});
worker.on("failed", (job, err) => {
  console.error("failed: " + err.message);
  process.exit(1);
});
worker.waitUntilReady().then(() => console.log("ready"));
