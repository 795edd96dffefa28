// Types of relay-client.mjs, for TypeScript users (checked against the module and a usage file
// by clients/js/test/types: `tsc --noEmit`).

/** A job as the gateway's API describes it (GET /jobs/{service_type}/{id}). */
export interface JobData {
  id: string;
  service_type: string;
  model?: string;
  operation?: string | null;
  status: "pending" | "processing" | "completed" | "failed" | "cancelled";
  created_at?: string;
  started_at?: string | null;
  finished_at?: string | null;
  error?: { code: string; message: string } | null;
  result_url?: string | null;
  input?: { filename: string; content_type: string; size: number; url: string | null };
  progress?: { fraction: number; message?: string; updated_at: string } | null;
  timings?: Record<string, number>;
  [field: string]: unknown;
}

/** One live event: its id (for Last-Event-ID), its name (the job's status or "progress"), the job. */
export interface JobEvent {
  id: string;
  name: string;
  job: JobData;
}

export class RelayError extends Error {
  constructor(status: number, code: string, message: string, retryAfter?: number | null);
  /** HTTP status; 0: no answer. */
  status: number;
  code: string;
  detail: string;
  /** Seconds, from Retry-After (429, 503). */
  retryAfter: number | null;
}
export class JobError extends Error {
  job: JobData;
}
export class JobFailed extends JobError {
  code: string;
}
export class JobCancelled extends JobError {}
export class WaitTimeout extends JobError {}
export class WebhookVerificationError extends Error {}

export class SseParser {
  feed(text: string): JobEvent[];
}

export type Input = Blob | ArrayBuffer | ArrayBufferView | string;

export interface SubmitOptions {
  filename?: string;
  contentType?: string;
  operation?: string;
  params?: unknown;
  callbackUrl?: string;
  webhookEvents?: Array<"started" | "progress" | "terminal">;
  /** "30s", "10m", or seconds. */
  ttl?: string | number;
  timeout?: string | number;
  maxAttempts?: number;
  priority?: boolean;
  idempotencyKey?: string;
  inputUrl?: string;
  /** Seconds the gateway holds its answer for the job to end (Prefer: wait). */
  wait?: number;
}

export interface ListOptions {
  serviceType?: string;
  status?: string | string[];
  since?: string;
  until?: string;
  idempotencyKey?: string;
  /** How many jobs in all. */
  limit?: number;
  pageSize?: number;
}

export interface ClientOptions {
  /** Defaults to $RELAY_API_KEY under Node. */
  apiKey?: string | null;
  /** Tries again, after a backoff, of a submission or a read that got no answer or a 502/503/504 (3). */
  retries?: number;
  priorityHeader?: string;
  fetch?: typeof fetch;
}

export class Client {
  constructor(baseUrl: string, options?: ClientOptions);
  baseUrl: string;
  request(method: string, path: string, options?: {
    query?: Record<string, string | number | null | undefined>;
    headers?: Record<string, string>;
    body?: BodyInit | null;
    signal?: AbortSignal;
  }): Promise<Response>;
  /** A GET, sent again (`retries` times) after no answer or a 502/503/504. */
  read(path: string, options?: {
    query?: Record<string, string | number | null | undefined>;
    headers?: Record<string, string>;
    signal?: AbortSignal;
  }): Promise<Response>;
  submit(serviceType: string, input: Input | null, options?: SubmitOptions): Promise<Job>;
  job(serviceType: string, id: string): Job;
  run(serviceType: string, input: Input | null, options?: SubmitOptions,
      waitSeconds?: number | null): Promise<Job>;
  jobs(options?: ListOptions): AsyncGenerator<Job, void, undefined>;
}

export class Job {
  constructor(client: Client, data: JobData);
  client: Client;
  data: JobData;
  readonly id: string;
  readonly serviceType: string;
  readonly status: JobData["status"];
  readonly done: boolean;
  readonly path: string;
  refresh(): Promise<Job>;
  /**
   * Resolves when the job completed; rejects with JobFailed, JobCancelled or WaitTimeout. A poll
   * without an answer or answered 502/503/504 is sent again, up to `reconnect` (5) times in a row.
   */
  wait(timeoutSeconds?: number | null, options?: { reconnect?: number }): Promise<Job>;
  /** Parsed JSON, or the bytes for other content types. */
  result(): Promise<unknown>;
  /** Node: the result streamed into a file, resumed after cuts; resolves with its size. */
  download(path: string, options?: { reconnect?: number }): Promise<number>;
  cancel(): Promise<Job>;
  events(options?: { reconnect?: number; signal?: AbortSignal }): AsyncGenerator<JobEvent, void, undefined>;
}

/** The webhook's JSON (the job, with "event") when it verifies; WebhookVerificationError else. */
export function verifyWebhook(
  secret: string,
  headers: Headers | Record<string, string | string[] | undefined>,
  body: string | ArrayBuffer | Uint8Array,
  options?: { toleranceSeconds?: number },
): Promise<JobData & { event: string }>;
