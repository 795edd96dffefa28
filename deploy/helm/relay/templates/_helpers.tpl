{{/*
Names, labels, Redis keys and the environment every Relay container shares. Redis key names are
built here exactly as src/redis/keys.hpp builds them, so that a KEDA trigger counts the list the
relay takes from (deploy/check verifies it on every rendered example).
*/}}

{{- define "relay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "relay.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "relay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "relay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image of the chart: (dict "root" $ "name" "relay") */}}
{{- define "relay.image" -}}
{{- $v := .root.Values.image -}}
{{- printf "%s/%s:%s" $v.registry (index $v .name) (default .root.Chart.AppVersion $v.tag) -}}
{{- end -}}

{{/* Hash tags are forced on in cluster mode: every Lua step's keys must share a slot. */}}
{{- define "relay.hashTag" -}}
{{- if or .Values.redis.hashTag (eq .Values.redis.mode "cluster") }}true{{ else }}false{{ end -}}
{{- end -}}

{{/* A model's list key: (dict "root" $ "model" "ocr" "list" "pending") — keys.hpp model_key */}}
{{- define "relay.modelKey" -}}
{{- $tagged := .model -}}
{{- if eq (include "relay.hashTag" .root) "true" }}{{ $tagged = printf "{%s}" .model }}{{ end -}}
{{- printf "%srelay:%s:%s" .root.Values.redis.keyPrefix $tagged .list -}}
{{- end -}}

{{/* host:port of every address in redis.url (comma-separated), for KEDA. */}}
{{- define "relay.redisAddresses" -}}
{{- $out := list -}}
{{- range $u := splitList "," .Values.redis.url -}}
{{- $p := urlParse (trim $u) -}}
{{- $hostport := $p.host -}}
{{- if not (contains ":" $hostport) }}{{ $hostport = printf "%s:6379" $hostport }}{{ end -}}
{{- $out = append $out $hostport -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "relay.redisTls" -}}
{{- if hasPrefix "rediss://" (trim .Values.redis.url) }}true{{ else }}false{{ end -}}
{{- end -}}

{{- define "relay.redisDb" -}}
{{- $p := urlParse (trim (first (splitList "," .Values.redis.url))) -}}
{{- default "0" (trimPrefix "/" $p.path) -}}
{{- end -}}

{{/* A component's Redis user (who: gateway or relays): its own (redis.<who>.username, its
password under redis.<who>.passwordKey; least privilege: deploy/redis/*.acl), else the shared
one. */}}
{{- define "relay.redisUserEnv" -}}
{{- $r := .root.Values.redis -}}
{{- $own := index $r .who | default dict -}}
{{- with default $r.username $own.username }}
- name: RELAY_REDIS_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if $r.existingSecret }}
- name: RELAY_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret }}
      key: {{ default $r.passwordKey $own.passwordKey }}
{{- end }}
{{- end -}}

{{/* Environment shared by the gateway and every relay: Redis, storage, encryption, logs. */}}
{{- define "relay.commonEnv" -}}
- name: RELAY_REDIS_URL
  value: {{ .Values.redis.url | quote }}
- name: RELAY_REDIS_MODE
  value: {{ .Values.redis.mode | quote }}
- name: RELAY_REDIS_WAIT_REPLICAS
  value: {{ .Values.redis.waitReplicas | quote }}
{{- with .Values.redis.sentinelMaster }}
- name: RELAY_REDIS_SENTINEL_MASTER
  value: {{ . | quote }}
{{- end }}
{{- with .Values.redis.sentinelPasswordKey }}
- name: RELAY_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "redis.existingSecret holds the sentinels' password (redis.sentinelPasswordKey)" $.Values.redis.existingSecret }}
      key: {{ . }}
{{- end }}
{{- with .Values.redis.sentinelUsername }}
- name: RELAY_REDIS_SENTINEL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.redis.keyPrefix }}
- name: RELAY_REDIS_KEY_PREFIX
  value: {{ . | quote }}
{{- end }}
- name: RELAY_REDIS_HASH_TAG
  value: {{ include "relay.hashTag" . | quote }}
{{- if .Values.redis.tls.caSecret }}
- name: RELAY_REDIS_TLS_CA_FILE
  value: /etc/relay/redis-ca/ca.crt
{{- end }}
{{- with .Values.redis.tls.serverName }}
- name: RELAY_REDIS_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
- name: RELAY_STORAGE_URL
  value: {{ .Values.storage.url | quote }}
- name: RELAY_STORAGE_S3_REGION
  value: {{ .Values.storage.s3Region | quote }}
{{- with .Values.storage.s3Endpoint }}
- name: RELAY_STORAGE_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: RELAY_STORAGE_S3_PATH_STYLE
  value: {{ .Values.storage.s3PathStyle | quote }}
{{- if .Values.storage.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.storage.credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.storage.credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
- name: RELAY_ENCRYPTION_ENABLED
  value: {{ .Values.encryption.enabled | quote }}
{{- if .Values.encryption.enabled }}
- name: RELAY_ENCRYPTION_ACTIVE_KEY
  value: {{ required "encryption.activeKey is required when encryption is enabled" .Values.encryption.activeKey | quote }}
- name: RELAY_ENCRYPTION_KEYS_DIR
  value: /etc/relay/encryption-keys
{{- end }}
{{- end -}}

{{/* Volumes and mounts for the Secrets the binaries read as files. */}}
{{/* The tenants' API keys Secret. */}}
{{- define "relay.apiKeysSecret" -}}
{{ default (printf "%s-api-keys" (include "relay.fullname" .)) .Values.auth.apiKeysSecret }}
{{- end -}}

{{- define "relay.secretVolumes" -}}
{{- if .Values.encryption.enabled }}
- name: encryption-keys
  secret:
    secretName: {{ required "encryption.keysSecret is required when encryption is enabled" .Values.encryption.keysSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.redis.tls.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .Values.redis.tls.caSecret }}
{{- end }}
{{- end -}}

{{- define "relay.secretMounts" -}}
{{- if .Values.encryption.enabled }}
- name: encryption-keys
  mountPath: /etc/relay/encryption-keys
  readOnly: true
{{- end }}
{{- if .Values.redis.tls.caSecret }}
- name: redis-ca
  mountPath: /etc/relay/redis-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* Every Relay container runs as uid 65532 with nothing writable but its volumes. */}}
{{- define "relay.containerSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
