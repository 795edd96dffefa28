#include "gateway/openapi.hpp"

namespace relay::gateway {

const std::string& openapi_json() {
  static const std::string doc = R"json({
  "openapi": "3.0.3",
  "info": {"title": "Relay gateway", "version": "1", "description": "Asynchronous inference jobs: submit, poll or long-poll, fetch results, cancel."},
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}, "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
    "parameters": {
      "serviceType": {"name": "service_type", "in": "path", "required": true, "schema": {"type": "string"}},
      "id": {"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}},
      "listStatus": {"name": "status", "in": "query", "schema": {"type": "string"}, "description": "comma-separated statuses"},
      "listSince": {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}},
      "listUntil": {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}},
      "listIdempotencyKey": {"name": "idempotency_key", "in": "query", "schema": {"type": "string"}},
      "listLimit": {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
      "listCursor": {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "a next_cursor"}
    },
    "schemas": {
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
      "Job": {"type": "object", "required": ["id", "service_type", "model", "status", "created_at", "attempts", "input", "timings"],
        "properties": {
          "id": {"type": "string", "format": "uuid"}, "service_type": {"type": "string"}, "model": {"type": "string"},
          "operation": {"type": "string", "nullable": true},
          "status": {"type": "string", "enum": ["pending", "processing", "completed", "failed", "cancelled"]},
          "created_at": {"type": "string", "format": "date-time"}, "started_at": {"type": "string", "format": "date-time", "nullable": true},
          "finished_at": {"type": "string", "format": "date-time", "nullable": true}, "attempts": {"type": "integer"},
          "expires_at": {"type": "string", "format": "date-time", "nullable": true, "description": "the queue deadline: not started by then, the job fails with error code expired"},
          "timeout": {"type": "number", "nullable": true, "description": "seconds: running longer, the job fails with error code timed_out"},
          "max_attempts": {"type": "integer", "description": "attempts in all (1: failures are not retried)"},
          "retry_at": {"type": "string", "format": "date-time", "nullable": true, "description": "waiting for a retry until then"},
          "failures": {"type": "array", "items": {"type": "object", "properties": {"attempt": {"type": "integer"}, "code": {"type": "string"}, "message": {"type": "string"}, "at": {"type": "string", "format": "date-time"}}}},
          "error": {"type": "object", "nullable": true, "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
          "result_url": {"type": "string", "nullable": true},
          "input": {"type": "object", "properties": {"filename": {"type": "string", "nullable": true}, "content_type": {"type": "string", "nullable": true}, "size": {"type": "integer"}, "url": {"type": "string", "nullable": true, "description": "an input given by reference"}}},
          "timings": {"type": "object", "additionalProperties": {"type": "number"}, "description": "milliseconds per stage: queue_wait, download, inference, upload, total"},
          "priority": {"type": "boolean"}, "cancel_requested": {"type": "boolean"}, "callback_url": {"type": "string", "nullable": true},
          "progress": {"type": "object", "nullable": true, "description": "the model's last progress report for the attempt that holds (or ended) the job",
            "properties": {"fraction": {"type": "number", "minimum": 0, "maximum": 1, "nullable": true}, "message": {"type": "string", "nullable": true}, "updated_at": {"type": "string", "format": "date-time"}}}
        }}
    },
    "responses": {
      "Error": {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Job": {"description": "the job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}}}},
      "JobPage": {"description": "a page of jobs, newest first", "content": {"application/json": {"schema": {"type": "object", "properties": {"jobs": {"type": "array", "items": {"$ref": "#/components/schemas/Job"}}, "next_cursor": {"type": "string", "nullable": true}}}}}}
    }
  },
  "security": [{"bearer": []}, {"apiKey": []}],
  "paths": {
    "/jobs": {
      "get": {"summary": "List the tenant's jobs", "operationId": "listJobs",
        "parameters": [{"$ref": "#/components/parameters/listStatus"}, {"$ref": "#/components/parameters/listSince"}, {"$ref": "#/components/parameters/listUntil"}, {"$ref": "#/components/parameters/listIdempotencyKey"}, {"$ref": "#/components/parameters/listLimit"}, {"$ref": "#/components/parameters/listCursor"}],
        "responses": {"200": {"$ref": "#/components/responses/JobPage"}, "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"}}}
    },
    "/jobs/{service_type}": {
      "parameters": [{"$ref": "#/components/parameters/serviceType"}],
      "get": {"summary": "List the tenant's jobs of a service type", "operationId": "listServiceTypeJobs",
        "parameters": [{"$ref": "#/components/parameters/listStatus"}, {"$ref": "#/components/parameters/listSince"}, {"$ref": "#/components/parameters/listUntil"}, {"$ref": "#/components/parameters/listIdempotencyKey"}, {"$ref": "#/components/parameters/listLimit"}, {"$ref": "#/components/parameters/listCursor"}],
        "responses": {"200": {"$ref": "#/components/responses/JobPage"}, "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"}}},
      "post": {"summary": "Submit a job", "operationId": "submitJob",
        "parameters": [
          {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "maxLength": 256}},
          {"name": "Prefer", "in": "header", "schema": {"type": "string"}, "example": "wait=30", "description": "RFC 7240: wait=SECONDS holds the answer until the job ends (200 and the ended job) or the wait does (202 and the job as it is), at most server.max_wait; bare wait means server.max_wait; anything else is ignored"},
          {"name": "operation", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only"},
          {"name": "callback_url", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only"},
          {"name": "params", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only: a JSON object"},
          {"name": "filename", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only"},
          {"name": "ttl", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only: a duration (\"90\" seconds, \"90s\", \"15m\", \"2h\"; at most 30 days); not started within it, the job fails expired"},
          {"name": "timeout", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only: a duration; running longer, the job fails timed_out"},
          {"name": "max_attempts", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10}, "description": "raw bodies only: attempts in all; failures of the model (5xx, 429, unreachable) are retried"},
          {"name": "input_url", "in": "query", "schema": {"type": "string"}, "description": "the input by reference instead of a body: s3://bucket/key or https://... under a prefix the service type allows (service_types.<name>.input_urls); the relay streams it to the model"},
          {"name": "webhook_events", "in": "query", "schema": {"type": "string"}, "description": "raw bodies only: comma-separated events to send webhooks for: terminal (the default), started, progress (at most one per relay.progress_webhook_interval); needs callback_url"}],
        "requestBody": {"required": false, "description": "the input: a multipart form with a file part, or the raw bytes; empty with an input_url", "content": {
          "multipart/form-data": {"schema": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}, "operation": {"type": "string"},
            "callback_url": {"type": "string"}, "params": {"type": "string", "description": "a JSON object"},
            "ttl": {"type": "string", "description": "a duration; see the query parameter"},
            "timeout": {"type": "string", "description": "a duration; see the query parameter"},
            "max_attempts": {"type": "string", "description": "1 to 10; see the query parameter"},
            "webhook_events": {"type": "string", "description": "see the query parameter"},
            "input_url": {"type": "string", "description": "instead of a file part; see the query parameter"}}}},
          "*/*": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "202": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
          "409": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"},
          "415": {"$ref": "#/components/responses/Error"},
          "429": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}}}
    },
    "/jobs/{service_type}/{id}": {
      "parameters": [{"$ref": "#/components/parameters/serviceType"}, {"$ref": "#/components/parameters/id"}],
      "get": {"summary": "Get a job; with wait=SECONDS, long-poll until it ends", "operationId": "getJob",
        "parameters": [{"name": "wait", "in": "query", "schema": {"type": "integer", "minimum": 0}}],
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}}},
      "delete": {"summary": "Cancel a job", "operationId": "cancelJob",
        "responses": {"200": {"$ref": "#/components/responses/Job"}, "202": {"$ref": "#/components/responses/Job"},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
          "409": {"$ref": "#/components/responses/Error"}, "503": {"$ref": "#/components/responses/Error"}}}
    },
    "/jobs/{service_type}/{id}/events": {
      "parameters": [{"$ref": "#/components/parameters/serviceType"}, {"$ref": "#/components/parameters/id"}],
      "get": {"summary": "The job's live events (Server-Sent Events) until it ends", "operationId": "jobEvents",
        "description": "Each event is the job as it is then: its name is pending, processing, progress, completed, failed or cancelled; its data the job's JSON; its id a digest of the state. The stream closes after a terminal event. With Last-Event-ID, the current state is sent at once only if it changed since that event (states passed meanwhile are not replayed: each event carries the whole job).",
        "parameters": [{"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "text/event-stream", "content": {"text/event-stream": {}}},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
          "503": {"$ref": "#/components/responses/Error"}}}
    },
    "/jobs/{service_type}/{id}/result": {
      "parameters": [{"$ref": "#/components/parameters/serviceType"}, {"$ref": "#/components/parameters/id"}],
      "get": {"summary": "The stored result.json of a completed job", "operationId": "getResult",
        "description": "The model's answer, in the content type it gave. A download resumes with Range (one byte range: bytes=first-last, first- or -suffix; several ranges are served whole) and If-Range with the ETag, the job's id quoted: the result never changes once the job completed. If-None-Match with it answers 304.",
        "parameters": [{"name": "Range", "in": "header", "schema": {"type": "string"}},
          {"name": "If-Range", "in": "header", "schema": {"type": "string"}},
          {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "result.json", "content": {"application/json": {}}},
          "206": {"description": "the range asked for (Content-Range says which)"},
          "304": {"description": "the client's copy (If-None-Match) is this result"},
          "401": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
          "409": {"$ref": "#/components/responses/Error"},
          "416": {"description": "the range starts past the end (Content-Range: bytes */size)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "503": {"$ref": "#/components/responses/Error"}}}
    },
    "/healthz": {"get": {"summary": "Alive", "security": [], "responses": {"200": {"description": "alive"}}}},
    "/readyz": {"get": {"summary": "Redis and storage reachable", "security": [], "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "security": [], "responses": {"200": {"description": "text format 0.0.4", "content": {"text/plain": {}}}}}},
    "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3"}}}}
  }
})json";
  return doc;
}

}  // namespace relay::gateway
