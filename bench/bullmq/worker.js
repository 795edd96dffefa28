// A BullMQ worker (the reference's best configuration: concurrency 64, a no-op processor; or a
// processor that takes delay ms, as a model would; or, given a model URL, one that POSTs each
// job's input to that model server as Relay's relay does — multipart, kept-alive connections —
// and returns its answer: a queue library bolted onto a model server; or, given a folder too,
// one that reads the job's input from the file api.js stored, POSTs it and stores the answer as
// <id>.result.json beside it, returning its name: BullMQ doing Relay's work). Prints "ready",
// then "done <n>" once it has completed n jobs (its first argument).
import http from "node:http";
import { readFileSync, writeFileSync } from "node:fs";
import { Worker } from "bullmq";

const [, , total, concurrency = "64", port = "6379", delay = "0", model = "", folder = ""] =
  process.argv;
const ms = Number(delay);

function infer(input) {
  const url = new URL(model);
  const agent = infer.agent ??= new http.Agent({ keepAlive: true, maxSockets: Number(concurrency) });
  const boundary = "relaybenchboundary";
  // (input: a string, or a Buffer read from a file: its bytes as they are)
  const body = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.bin"\r\n` +
        `Content-Type: application/octet-stream\r\n\r\n`,
    ),
    Buffer.isBuffer(input) ? input : Buffer.from(input),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
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

// (Synchronous file calls, as in api.js: cheaper than fs/promises on tmpfs.)
async function relayLike(job) {
  const answer = await infer(readFileSync(job.data.file));
  const result = `${folder}/${job.id}.result.json`;
  writeFileSync(result, answer);
  return { result };
}

const processor = folder
  ? relayLike
  : model
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
