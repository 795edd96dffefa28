// A BullMQ worker with a no-op processor (the reference's best configuration: concurrency 64).
// Prints "ready", then "done <n>" once it has completed n jobs (its first argument).
import { Worker } from "bullmq";

const [, , total, concurrency = "64", port = "6379"] = process.argv;
let done = 0;
const worker = new Worker("bench", async () => null, {
  connection: { host: "127.0.0.1", port: Number(port) },
  concurrency: Number(concurrency),
});
worker.on("completed", () => {
  if (++done === Number(total)) {
    console.log("done " + done);
    worker.close().then(() => process.exit(0));
  }
});
worker.waitUntilReady().then(() => console.log("ready"));
