// The load generator of the BullMQ side: adds n jobs of a 1 KiB payload, `concurrency` adds in
// flight at a time (single adds, as the reference measured), then exits.
import { Queue } from "bullmq";

const [, , total, concurrency = "64", port = "6379", size = "1024"] = process.argv;
const queue = new Queue("bench", { connection: { host: "127.0.0.1", port: Number(port) } });
const payload = { input: "x".repeat(Number(size)) };
let next = 0;
async function lane() {
  while (next < Number(total)) {
    next++;
    await queue.add("job", payload, { removeOnComplete: true, removeOnFail: true });
  }
}
await Promise.all(Array.from({ length: Number(concurrency) }, lane));
await queue.close();
console.log("added " + total);
