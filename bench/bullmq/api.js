// The front of "BullMQ doing Relay's work" (queue_bench.py's last reference): what a team would
// bolt onto BullMQ to offer what Relay's gateway does per job — an HTTP API that stores each
// submitted input as an object (a file in the given folder, as Relay's benchmark stores on
// tmpfs) and queues a job naming it, answering 202 with the job's id. Kept as lean as such a
// service gets, in BullMQ's favour: no authentication, no validation, no folder per job, no
// temporary name renamed into place, no idempotency, no events stream. Jobs are kept once done
// (BullMQ's default), as Relay keeps its records for gc.job_retention.
// usage: node api.js PORT REDIS_PORT FOLDER; prints "ready" once listening.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { Queue } from "bullmq";

const [, , port, redisPort, folder] = process.argv;
const queue = new Queue("bench", { connection: { host: "127.0.0.1", port: Number(redisPort) } });

http
  .createServer((req, res) => {
    const parts = [];
    req.on("data", (d) => parts.push(d));
    req.on("end", async () => {
      try {
        const id = randomUUID();
        const file = `${folder}/${id}.in`;
        // Synchronous: on tmpfs a write does not block, and it spares the thread pool's hand-off
        // (measured cheaper than fs/promises here).
        writeFileSync(file, Buffer.concat(parts));
        await queue.add("job", { file }, { jobId: id });
        res.writeHead(202, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ id, status: "pending" }));
      } catch (e) {
        res.writeHead(500);
        res.end(String(e));
      }
    });
  })
  .listen(Number(port), "127.0.0.1", () => console.log("ready"));
