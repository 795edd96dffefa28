{{/*
The pod of one model: (dict "root" $ "m" <model entry>). The model server is a native sidecar
(an init container with restartPolicy: Always): it starts first, its startup probe holds the
relay back until the model is loaded, and it does not keep a finished Job's pod alive — the relay
is the only regular container, so its exit 0 completes the Job.
*/}}
{{- define "relay.modelPod" -}}
{{- $root := .root -}}
{{- $m := .m -}}
{{- $v := $root.Values -}}
{{- $port := $m.port | default 9000 | int -}}
{{- $health := $m.healthPath | default "/health" -}}
{{- $startup := $m.startupSeconds | default 600 | int -}}
{{- $routes := $m.routes | default (dict "default" "/predict") -}}
{{- $pairs := list -}}
{{- range $op, $path := $routes }}{{ $pairs = append $pairs (printf "%s=%s" $op $path) }}{{ end -}}
metadata:
  labels:
    {{- include "relay.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: model
    relay.dev/model: {{ $m.name }}
  {{- with $m.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- if eq (default "job" $m.mode) "job" }}
  restartPolicy: Never
  {{- end }}
  serviceAccountName: {{ include "relay.serviceAccountName" $root }}
  automountServiceAccountToken: {{ $v.serviceAccount.automountToken }}
  # No <SERVICE>_HOST/_PORT variables for every Service in the namespace: the relay reads
  # RELAY_* variables as its configuration, and a Service named relay-… would add some.
  enableServiceLinks: false
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  # The relay gives its job back on SIGTERM at once; the model server exits on SIGTERM.
  terminationGracePeriodSeconds: 30
  securityContext:
    fsGroup: 65532
  initContainers:
    - name: model
      image: {{ printf "%s:%s" $m.image.repository ($m.image.tag | default "latest") }}
      imagePullPolicy: {{ $m.image.pullPolicy | default $v.image.pullPolicy }}
      restartPolicy: Always
      {{- with $m.args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $m.env }}
      env:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: model
          containerPort: {{ $port }}
      # Model loading can take minutes (weights, compilation): the startup probe allows
      # startupSeconds before the kubelet gives up; readiness afterwards.
      startupProbe:
        httpGet:
          path: {{ $health }}
          port: model
        periodSeconds: 5
        failureThreshold: {{ div $startup 5 | max 1 }}
      readinessProbe:
        httpGet:
          path: {{ $health }}
          port: model
        periodSeconds: 10
        failureThreshold: 3
      {{- with $m.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  containers:
    - name: relay
      image: {{ include "relay.image" (dict "root" $root "name" "relay") }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      env:
        {{- include "relay.commonEnv" $root | nindent 8 }}
        {{- include "relay.redisUserEnv" (dict "root" $root "who" "relays") | nindent 8 }}
        - name: RELAY_MODEL
          value: {{ $m.name | quote }}
        - name: RELAY_INFERENCE_URL
          value: "http://127.0.0.1:{{ $port }}"
        - name: RELAY_INFERENCE_HEALTH_PATH
          value: {{ $health | quote }}
        - name: RELAY_INFERENCE_ROUTES
          value: {{ join "," $pairs | quote }}
        - name: RELAY_MAX_JOBS
          value: {{ if eq (default "job" $m.mode) "job" }}"1"{{ else }}"0"{{ end }}
        {{- if and (eq (default "job" $m.mode) "job") (gt (int (default 1 $m.concurrency)) 1) }}
        {{- fail (printf "models[%s].concurrency: only for mode: deployment (a job-mode pod runs one job)" $m.name) }}
        {{- end }}
        - name: RELAY_RELAY_CONCURRENCY
          value: {{ default 1 $m.concurrency | quote }}
        {{- with $m.takeAhead }}
        {{- if eq (default "job" $m.mode) "job" }}
        {{- fail (printf "models[%s].takeAhead: only for mode: deployment (a job-mode pod runs one job)" $m.name) }}
        {{- end }}
        - name: RELAY_RELAY_TAKE_AHEAD
          value: {{ . | quote }}
        {{- end }}
        - name: RELAY_QUEUE_POP_TIMEOUT
          # job: a surplus pod frees its GPU soon; deployment: KEDA scales idle pods down.
          value: {{ if eq (default "job" $m.mode) "job" }}{{ $v.relay.queuePopTimeout | quote }}{{ else }}"1h"{{ end }}
        - name: RELAY_LEASE_TTL
          value: {{ $v.relay.leaseTtl | quote }}
        - name: RELAY_RELAY_HEALTH_TIMEOUT
          value: {{ $v.relay.healthTimeout | quote }}
        - name: RELAY_RELAY_STORAGE_RETRY_TIMEOUT
          value: {{ $v.relay.storageRetryTimeout | quote }}
        - name: RELAY_RELAY_SPOOL_DIR
          value: /var/spool/relay
        - name: RELAY_RELAY_POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: RELAY_LOG_LEVEL
          value: {{ $v.relay.logLevel | quote }}
      resources:
        {{- toYaml $v.relay.resources | nindent 8 }}
      securityContext:
        {{- include "relay.containerSecurity" $root | nindent 8 }}
      volumeMounts:
        - name: spool
          mountPath: /var/spool/relay
        {{- with include "relay.secretMounts" $root | trim }}{{ . | nindent 8 }}{{ end }}
  volumes:
    - name: spool
      emptyDir:
        sizeLimit: {{ $v.relay.spoolSizeLimit }}
    {{- with include "relay.secretVolumes" $root | trim }}{{ . | nindent 4 }}{{ end }}
  {{- with $m.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The KEDA trigger on one of a model's lists: (dict "root" $ "model" name "list" "pending") */}}
{{- define "relay.redisTrigger" -}}
{{- $v := .root.Values -}}
{{- $type := get (dict "standalone" "redis" "cluster" "redis-cluster" "sentinel" "redis-sentinel") $v.redis.mode -}}
- type: {{ $type }}
  name: {{ .list }}
  metadata:
    {{- if eq $type "redis" }}
    address: {{ include "relay.redisAddresses" .root | quote }}
    databaseIndex: {{ include "relay.redisDb" .root | quote }}
    {{- else }}
    addresses: {{ include "relay.redisAddresses" .root | quote }}
    {{- end }}
    {{- if eq $type "redis-sentinel" }}
    sentinelMaster: {{ required "redis.sentinelMaster is required in sentinel mode" $v.redis.sentinelMaster | quote }}
    {{- end }}
    listName: {{ include "relay.modelKey" (dict "root" .root "model" .model "list" .list) | quote }}
    listLength: "1"
    activationListLength: "0"
    {{- if eq (include "relay.redisTls" .root) "true" }}
    enableTLS: "true"
    {{- end }}
  authenticationRef:
    name: {{ include "relay.fullname" .root }}-redis
{{- end -}}
