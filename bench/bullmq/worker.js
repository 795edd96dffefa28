// A BullMQ worker (the reference's best configuration: concurrency 64, a no-op processor; or a
// processor that takes delay ms, as a model would). Prints "ready", then "done <n>" once it has
// completed n jobs (its first argument).
import { Worker } from "bullmq";

const [, , total, concurrency = "64", port = "6379", delay = "0"] = process.argv;
const ms = Number(delay);
let done = 0;
const worker = new Worker(
  "bench",
  ms > 0 ? () => new Promise((resolve) => setTimeout(resolve, ms)) : async () => null,
  { connection: { host: "127.0.0.1", port: Number(port) }, concurrency: Number(concurrency) },
);
worker.on("completed", () => {
  if (++done === Number(total)) {
    console.log("done " + done);
    worker.close().then(() => process.exit(0));
  }
});
worker.waitUntilReady().then(() => console.log("ready"));
