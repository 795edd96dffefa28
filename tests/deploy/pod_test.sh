#!/usr/bin/env bash
# The chart's pod shape, run with podman on this machine from the images scripts/images built:
# one network namespace shared the way a pod shares it (the model container's, with loopback
# only), the model server and the relay in it, and the gateway (its image), Redis and the S3 test
# server reachable there on 127.0.0.1. Every container runs non-root with a read-only root
# filesystem, as the chart runs them.
#
#   1. A real OCR job submitted through the gateway image: the relay image exits 0, the job is
#      completed with the right text.
#   2. A 100 MiB model answer through a relay whose only writable place is its spool volume;
#      without that volume the relay refuses to start (the root really is read-only).
#   3. SIGTERM to the relay mid-job: exit 0, the job is back in pending at once.
#   4. The model server stops on SIGTERM by itself (exit 0, not SIGKILL after the grace period).
#
# Exit 77 (ctest: skipped) with the reason when podman or the images are not there.
set -uo pipefail
cd "$(dirname "$0")/../.."
TAG=${TAG:-dev}
skip() { echo "SKIP: $*"; exit 77; }
command -v podman >/dev/null || skip "podman is not installed (scripts/images installs it)"
. deploy/images/podman-env.sh
for image in relay relay-gateway relay-model-ocr relay-inference-noop; do
  podman image exists "localhost/$image:$TAG" || skip "localhost/$image:$TAG not built (run scripts/images)"
done
revision=$(podman image inspect -f '{{index .Labels "org.opencontainers.image.revision"}}' "localhost/relay:$TAG" 2>/dev/null)
[ "$revision" = "$(git rev-parse HEAD 2>/dev/null)" ] ||
  echo "note: the images were built from ${revision:-an unknown revision}, not HEAD: run scripts/images to test this tree"

run_id=relay-podtest-$$
tmp=$(mktemp -d)
pids=()
failures=0
passes=0
cleanup() {
  podman ps -a --filter "name=^$run_id" --format '{{.Names}}' | xargs -r podman rm -f -t 0 >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
[ -n "${KEEP_LOGS:-}" ] && trap "cp -r $tmp ${KEEP_LOGS}; cleanup" EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; passes=$((passes + 1)); }
# wait_for SECONDS CMD...: polls every 100 ms until CMD succeeds; 1 at the deadline.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# The pod's network namespace: the model container's, with loopback only (--network none).
podman run -d --name "$run_id-model" --network none --read-only --read-only-tmpfs=false \
  "localhost/relay-model-ocr:$TAG" >/dev/null || skip "podman cannot run a container here"
pod_pid=$(podman inspect -f '{{.State.Pid}}' "$run_id-model")
in_pod() { nsenter -t "$pod_pid" -n "$@"; }
join=(--network "container:$run_id-model" --read-only --read-only-tmpfs=false)

# nsenter execs the program, so $! is the server itself (a shell function here would leave it
# running after the kill at cleanup).
nsenter -t "$pod_pid" -n redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no \
  >"$tmp/redis.log" 2>&1 &
pids+=($!)
nsenter -t "$pod_pid" -n node tests/s3/server.js --port 9100 --dir "$tmp/s3" >"$tmp/s3.log" 2>&1 &
pids+=($!)
common_env=(-e RELAY_REDIS_URL=redis://127.0.0.1:6379 -e RELAY_STORAGE_URL=s3://relay-test/jobs
  -e RELAY_STORAGE_S3_ENDPOINT=http://127.0.0.1:9100 -e RELAY_STORAGE_S3_PATH_STYLE=true
  -e AWS_ACCESS_KEY_ID=relaytestkey -e AWS_SECRET_ACCESS_KEY=relaytestsecret)
wait_for 20 in_pod redis-cli -p 6379 ping || { fail "redis did not start"; exit 1; }
wait_for 30 grep -q ready "$tmp/s3.log" || { fail "S3 test server did not start: $(cat "$tmp/s3.log")"; exit 1; }

podman run -d --name "$run_id-gateway" "${join[@]}" "${common_env[@]}" \
  -e RELAY_SERVER_LISTEN=127.0.0.1:8080 -e RELAY_AUTH_ENABLED=false \
  -e RELAY_SERVICE_TYPES=ocr=ocr,big=noop,slow=slow -e RELAY_LOG_LEVEL=warn \
  "localhost/relay-gateway:$TAG" >/dev/null
gw() { in_pod curl -sS "$@"; }
wait_for 30 in_pod curl -sf http://127.0.0.1:8080/readyz || {
  fail "gateway not ready: $(podman logs "$run_id-gateway" 2>&1 | tail -5)"; exit 1; }
wait_for 60 in_pod curl -sf http://127.0.0.1:9000/health || { fail "OCR model not healthy"; exit 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
status_of() { gw "http://127.0.0.1:8080/jobs/$1/$2" | json "['status']"; }
job_is() { [ "$(status_of "$1" "$2")" = "$3" ]; }  # for wait_for: evaluated at each poll

# Runs the relay image in the pod; extra args go to podman run before the image.
relay_run() { podman run --name "$run_id-relay-$1" "${join[@]}" "${common_env[@]}" -e RELAY_MODEL="$1" \
  -e RELAY_QUEUE_POP_TIMEOUT=5s -e RELAY_RELAY_HEALTH_INTERVAL=100ms "${@:2}" "localhost/relay:$TAG"; }
spool=(--tmpfs /var/spool/relay:rw,size=256m,mode=1777 -e RELAY_RELAY_SPOOL_DIR=/var/spool/relay)

# 1. OCR through the gateway image, one job, the relay exits 0.
id=$(gw -F file=@examples/samples/invoice.png http://127.0.0.1:8080/jobs/ocr | json "['id']")
relay_run ocr -e RELAY_INFERENCE_ROUTES=default=/ocr "${spool[@]}" >"$tmp/relay-ocr.log" 2>&1
code=$?
[ "$code" = 0 ] && pass "relay exited 0 after the OCR job" || fail "relay exit $code: $(tail -3 "$tmp/relay-ocr.log")"
st=$(gw "http://127.0.0.1:8080/jobs/ocr/$id?wait=20" | json "['status']")
[ "$st" = completed ] && pass "OCR job completed" || fail "OCR job is $st"
gw "http://127.0.0.1:8080/jobs/ocr/$id/result" | grep -q INVOICE && pass "OCR result holds the text" ||
  fail "OCR result lacks INVOICE: $(gw "http://127.0.0.1:8080/jobs/ocr/$id/result" | head -c 300)"

# 2. A 100 MiB answer, read-only root, spool volume only.
podman run -d --name "$run_id-noop" "${join[@]}" --entrypoint /usr/bin/relay-inference-noop \
  "localhost/relay-inference-noop:$TAG" --listen 127.0.0.1:9001 --result-bytes 104857600 >/dev/null
wait_for 20 in_pod curl -sf http://127.0.0.1:9001/health || fail "noop model not healthy"
id=$(gw --data-binary 'large answer please' -H 'Content-Type: text/plain' http://127.0.0.1:8080/jobs/big | json "['id']")
relay_run noop -e RELAY_INFERENCE_URL=http://127.0.0.1:9001 >"$tmp/relay-nospool.log" 2>&1
code=$?
[ "$code" = 2 ] && grep -q relay.spool_dir "$tmp/relay-nospool.log" &&
  pass "without a spool volume the relay refuses to start (read-only root): exit 2" ||
  fail "relay without spool volume: exit $code: $(tail -2 "$tmp/relay-nospool.log")"
relay_run noop2 -e RELAY_MODEL=noop -e RELAY_INFERENCE_URL=http://127.0.0.1:9001 "${spool[@]}" \
  >"$tmp/relay-big.log" 2>&1
code=$?
[ "$code" = 0 ] && pass "relay exited 0 after the 100 MiB answer" || fail "relay exit $code: $(tail -3 "$tmp/relay-big.log")"
st=$(status_of big "$id")
[ "$st" = completed ] && pass "large-result job completed" || fail "large-result job is $st"
size=$(gw -o /dev/null -w '%{size_download}' "http://127.0.0.1:8080/jobs/big/$id/result")
((size > 104857600)) && pass "result.json is $size bytes" || fail "result.json is $size bytes"

# 3. SIGTERM mid-job gives the job back.
podman run -d --name "$run_id-slow" "${join[@]}" --entrypoint /usr/bin/relay-inference-noop \
  "localhost/relay-inference-noop:$TAG" --listen 127.0.0.1:9002 --delay-ms 60000 >/dev/null
wait_for 20 in_pod curl -sf http://127.0.0.1:9002/health || fail "slow model not healthy"
id=$(gw --data-binary 'slow' -H 'Content-Type: text/plain' http://127.0.0.1:8080/jobs/slow | json "['id']")
relay_run slow -d -e RELAY_INFERENCE_URL=http://127.0.0.1:9002 "${spool[@]}" >/dev/null
if wait_for 60 job_is slow "$id" processing; then
  podman kill --signal TERM "$run_id-relay-slow" >/dev/null
  code=$(podman wait "$run_id-relay-slow")
  [ "$code" = 0 ] && pass "relay exited 0 on SIGTERM mid-job" || fail "relay exit $code on SIGTERM"
  st=$(status_of slow "$id")
  queued=$(in_pod redis-cli -p 6379 lrange relay:slow:pending 0 -1)
  [ "$st" = pending ] && grep -qx "$id" <<<"$queued" && pass "the job is back in pending" ||
    fail "after SIGTERM the job is $st, pending list: $queued"
else
  fail "slow job never started: $(status_of slow "$id"); relay: $(podman logs "$run_id-relay-slow" 2>&1 | tail -3)"
fi

# 4. The model server stops on SIGTERM by itself.
start=$(date +%s%N)
podman stop -t 10 "$run_id-model" >/dev/null
ms=$((($(date +%s%N) - start) / 1000000))
code=$(podman inspect -f '{{.State.ExitCode}}' "$run_id-model")
[ "$code" = 0 ] && pass "OCR model server exited 0 on SIGTERM in $ms ms (podman stop included)" ||
  fail "OCR model server exit $code after $ms ms (137 = SIGKILL after the grace period)"

echo "$passes passed, $failures failed"
((failures == 0))
