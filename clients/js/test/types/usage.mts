// Type-checked (tsc --noEmit, strict) against relay-client.d.mts: what a TypeScript user writes.
// A declaration that drifts from this usage fails ctest JsClientTypes.
import {
  Client, Job, JobCancelled, JobFailed, RelayError, WaitTimeout, WebhookVerificationError,
  verifyWebhook, type JobData, type JobEvent, type SubmitOptions,
} from "../../relay-client.mjs";

export async function usage(file: Blob, secret: string, headers: Headers, body: string): Promise<void> {
  const relay = new Client("https://relay.example.com", { apiKey: "k", retries: 2 });
  const options: SubmitOptions = { filename: "scan.png", params: { language: "eng" }, ttl: "15m",
                                   timeout: 120, maxAttempts: 3, webhookEvents: ["terminal"] };
  const job: Job = await relay.submit("ocr", file, options);
  await relay.submit("asr", null, { inputUrl: "s3://media/calls/c.wav", priority: true });
  await relay.submit("echo", new Uint8Array([1, 2, 3]));
  await relay.submit("echo", "text");
  try {
    await job.wait(120);
  } catch (e) {
    if (e instanceof JobFailed) console.log(e.code, e.job.error?.message);
    else if (e instanceof JobCancelled || e instanceof WaitTimeout) console.log(e.job.status);
    else if (e instanceof RelayError) console.log(e.status, e.code, e.retryAfter);
  }
  const status: JobData["status"] = job.status;
  const done: boolean = job.done;
  const result: unknown = await job.result();
  const size: number = await job.download("scan.json", { reconnect: 3 });
  for await (const e of job.events({ reconnect: 2 })) {
    const event: JobEvent = e;
    console.log(event.name, event.job.progress?.fraction);
  }
  for await (const j of relay.jobs({ serviceType: "ocr", status: ["failed"], limit: 50 })) console.log(j.id);
  const again: Job = await relay.job("ocr", job.id).refresh();
  await again.cancel();
  const ran: Job = await relay.run("ocr", file, {}, 60);
  try {
    const doc = await verifyWebhook(secret, headers, body, { toleranceSeconds: 60 });
    console.log(doc.event, doc.id, status, done, result, size, ran.id);
  } catch (e) {
    if (e instanceof WebhookVerificationError) console.log(e.message);
  }
}
