// node --test deploy/check — mutation tests of the chart checks: the rendered examples pass, and
// each mutation (one mistake a person could make in the chart) is caught by the rule meant for
// it. Without these, a check that never fires would look the same as a chart without mistakes.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { chart, checkRules, checkValues, examplesDir, knownEnv, render, tool, validateStrict } from './lib.js';

const jobExample = render([path.join(examplesDir, 'two-gpu-models.yaml')]);
const deploymentExample = render([path.join(examplesDir, 'ocr-deployment-mode.yaml')]);

const clone = (docs) => structuredClone(docs);
const find = (docs, kind, pred = () => true) => docs.find((d) => d.kind === kind && pred(d));
const scaledJob = (docs) => find(docs, 'ScaledJob');
const jobPod = (docs) => scaledJob(docs).spec.jobTargetRef.template.spec;
const relayOf = (podSpec) => podSpec.containers.find((c) => c.name === 'relay');
const modelOf = (podSpec) => podSpec.initContainers.find((c) => c.name === 'model');
const env = (c, name) => c.env.find((e) => e.name === name);
const gatewayDeployment = (docs) => find(docs, 'Deployment', (d) => d.metadata.name.endsWith('-gateway'));

async function allErrors(docs) {
  const errors = [];
  for (const d of docs) errors.push(...await validateStrict(d));
  return [...errors, ...checkRules(docs)];
}

async function expectCaught(base, mutate, pattern) {
  const docs = clone(base);
  mutate(docs);
  const errors = await allErrors(docs);
  assert.ok(errors.some((e) => pattern.test(e)),
    `expected an error matching ${pattern}, got:\n  ${errors.join('\n  ') || '(none)'}`);
}

test('the binaries are there to ask for their config keys', () => {
  assert.ok(knownEnv('relay') && knownEnv('relay-gateway'), 'build first, or set RELAY_BIN_DIR');
});

test('the rendered examples pass every check', async () => {
  assert.deepEqual(await allErrors(jobExample), []);
  assert.deepEqual(await allErrors(deploymentExample), []);
});

// Each row: what the mistake is, which render, the mutation, what must be reported.
const mutations = [
  ['misspelt pod field (helm lint passes it)', jobExample,
    (d) => { const s = jobPod(d); s.restartPolicyy = s.restartPolicy; delete s.restartPolicy; }, /unknown field .*restartPolicyy/],
  ['misspelt container field', jobExample, (d) => { relayOf(jobPod(d)).volumeMount = []; }, /unknown field .*volumeMount\b/],
  ['misspelt ScaledJob field', jobExample, (d) => { scaledJob(d).spec.pollingIntervall = 5; }, /unknown field .*pollingIntervall/],
  ['wrong type', jobExample, (d) => { scaledJob(d).spec.maxReplicaCount = 'ten'; }, /maxReplicaCount/],
  ['misspelt scaling strategy (helm lint passes it)', jobExample,
    (d) => { scaledJob(d).spec.scalingStrategy.strategy = 'acurate'; }, /strategy acurate is not one of/],
  ['another scaling strategy', jobExample, (d) => { scaledJob(d).spec.scalingStrategy.strategy = 'eager'; }, /must be accurate/],
  ['loading pods not counted as pending', jobExample,
    (d) => { delete scaledJob(d).spec.scalingStrategy.pendingPodConditions; }, /pendingPodConditions must include Ready/],
  ['service links left on (RELAY_* variables from Services)', jobExample,
    (d) => { delete jobPod(d).enableServiceLinks; }, /enableServiceLinks must be false/],
  ['service links on in the gateway', deploymentExample,
    (d) => { gatewayDeployment(d).spec.template.spec.enableServiceLinks = true; }, /Deployment\/.*-gateway: enableServiceLinks must be false/],
  ['pod restart policy not an enum value', jobExample, (d) => { jobPod(d).restartPolicy = 'Sometimes'; }, /restartPolicy Sometimes is not one of/],
  ['Job pod restarted by the kubelet', jobExample, (d) => { jobPod(d).restartPolicy = 'OnFailure'; }, /restartPolicy must be Never/],
  ['Job retried', jobExample, (d) => { scaledJob(d).spec.jobTargetRef.backoffLimit = 3; }, /backoffLimit must be 0/],
  ['image pull policy not an enum value', jobExample, (d) => { relayOf(jobPod(d)).imagePullPolicy = 'Sometimes'; }, /imagePullPolicy Sometimes/],
  ['trigger type not a Redis list scaler', jobExample, (d) => { scaledJob(d).spec.triggers[0].type = 'redis-lists'; }, /not a KEDA Redis list scaler/],
  ['trigger type of another Redis mode', jobExample,
    (d) => { const t = scaledJob(d).spec.triggers[0]; t.type = 'redis-cluster'; t.metadata.addresses = t.metadata.address; delete t.metadata.address; delete t.metadata.databaseIndex; },
    /does not match redis.mode standalone/],
  ['misspelt trigger metadata key', jobExample,
    (d) => { const m = scaledJob(d).spec.triggers[0].metadata; m.listname = m.listName; delete m.listName; }, /unknown redis metadata key listname/],
  ['trigger metadata not a string', jobExample, (d) => { scaledJob(d).spec.triggers[0].metadata.listLength = 1; }, /listLength must be a string|metadata/],
  ['trigger on another list', jobExample,
    (d) => { scaledJob(d).spec.triggers[0].metadata.listName = 'prod:relay:whisper:processing'; }, /listName .* is not the list the relay uses/],
  ['trigger without the key prefix', jobExample,
    (d) => { scaledJob(d).spec.triggers[0].metadata.listName = 'relay:whisper:pending'; }, /is not the list the relay uses \(prod:relay:whisper:pending\)/],
  ['relay with hash tags, trigger without', jobExample,
    (d) => { env(relayOf(jobPod(d)), 'RELAY_REDIS_HASH_TAG').value = 'true'; }, /relay:\{whisper\}:pending/],
  ['relay serving another model than the trigger counts', jobExample,
    (d) => { env(relayOf(jobPod(d)), 'RELAY_MODEL').value = 'whisper2'; }, /not the list the relay uses/],
  ['several pods per job', jobExample, (d) => { scaledJob(d).spec.triggers[0].metadata.listLength = '5'; }, /listLength must be "1"/],
  ['no scale from zero', jobExample, (d) => { scaledJob(d).spec.triggers[0].metadata.activationListLength = '1'; }, /activationListLength must be "0"/],
  ['model server as a regular container keeps the Job alive', jobExample,
    (d) => { const s = jobPod(d); const m = modelOf(s); delete m.restartPolicy; s.containers.push(m); s.initContainers = []; }, /only regular container|no native sidecar/],
  ['model server as a plain init container', jobExample, (d) => { delete modelOf(jobPod(d)).restartPolicy; }, /no native sidecar/],
  ['init container restart policy not Always', jobExample, (d) => { modelOf(jobPod(d)).restartPolicy = 'Never'; }, /restartPolicy must be Always/],
  ['startup probe on another path', jobExample, (d) => { modelOf(jobPod(d)).startupProbe.httpGet.path = '/healthz'; }, /startupProbe path \/healthz differs/],
  ['readiness probe on another port', jobExample, (d) => { modelOf(jobPod(d)).readinessProbe.httpGet.port = 8080; }, /readinessProbe port 8080 is not the model port/],
  ['no readiness probe', jobExample, (d) => { delete modelOf(jobPod(d)).readinessProbe; }, /no HTTP readinessProbe/],
  ['relay health path differs from the probes', jobExample,
    (d) => { env(relayOf(jobPod(d)), 'RELAY_INFERENCE_HEALTH_PATH').value = '/ready'; }, /differs from the relay's health path \/ready/],
  ['relay talking to the model over the network', jobExample,
    (d) => { env(relayOf(jobPod(d)), 'RELAY_INFERENCE_URL').value = 'http://whisper:9000'; }, /loopback/],
  ['writable root filesystem', jobExample, (d) => { relayOf(jobPod(d)).securityContext.readOnlyRootFilesystem = false; }, /readOnlyRootFilesystem/],
  ['spool not on a volume', jobExample, (d) => { relayOf(jobPod(d)).volumeMounts = relayOf(jobPod(d)).volumeMounts.filter((m) => m.name !== 'spool'); }, /SPOOL_DIR .* is not a mounted volume/],
  ['spool without a size limit', jobExample, (d) => { delete jobPod(d).volumes.find((v) => v.name === 'spool').emptyDir.sizeLimit; }, /emptyDir with a sizeLimit/],
  ['password as a literal env value', jobExample,
    (d) => { const e = env(relayOf(jobPod(d)), 'RELAY_REDIS_PASSWORD'); delete e.valueFrom; e.value = 'hunter2'; }, /RELAY_REDIS_PASSWORD carries a literal value/],
  ['webhook secret in a ConfigMap', jobExample,
    (d) => { find(d, 'ConfigMap').data['config.yaml'] += 'webhooks:\n  secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n'; }, /holds a webhook signing secret/],
  ['Redis password in a ConfigMap', jobExample,
    (d) => { find(d, 'ConfigMap').data['config.yaml'] += 'redis:\n  password: hunter2\n'; }, /holds a password, secret or key setting/],
  ['API key hashes in a ConfigMap', jobExample,
    (d) => { find(d, 'ConfigMap').data['config.yaml'] += `auth:\n  api_keys:\n    ${'ab'.repeat(32)}: acme\n`; }, /ConfigMap.*holds/],
  ['service type routed to a model without relays', jobExample,
    (d) => { const cm = find(d, 'ConfigMap'); cm.data['config.yaml'] = cm.data['config.yaml'].replace('model: blip', 'model: blipp'); }, /routes to model blipp, which has no relay/],
  ['gateway killed before its uploads drain', jobExample,
    (d) => { gatewayDeployment(d).spec.template.spec.terminationGracePeriodSeconds = 30; }, /terminationGracePeriodSeconds 30 must exceed/],
  ['gateway without readiness probe', jobExample,
    (d) => { delete gatewayDeployment(d).spec.template.spec.containers[0].readinessProbe; }, /gateway has no readinessProbe/],
  ['Service type misspelt', jobExample, (d) => { find(d, 'Service').spec.type = 'ClusterIp'; }, /Service type ClusterIp/],
  ['relay setting misspelt (the relay would ignore it)', jobExample,
    (d) => { env(relayOf(jobPod(d)), 'RELAY_QUEUE_POP_TIMEOUT').name = 'RELAY_QUEUE_POP_TIMOUT'; }, /RELAY_QUEUE_POP_TIMOUT is not a relay config key/],
  ['gateway setting the relay has, not the gateway', jobExample,
    (d) => { gatewayDeployment(d).spec.template.spec.containers[0].env.push({ name: 'RELAY_LEASE_TTL', value: '60s' }); }, /RELAY_LEASE_TTL is not a relay-gateway config key/],
  // Deployment mode.
  ['ScaledObject counting only pending', deploymentExample,
    (d) => { const so = find(d, 'ScaledObject'); so.spec.triggers = so.spec.triggers.filter((t) => t.name === 'pending'); }, /triggers named pending and processing/],
  ['ScaledObject formula', deploymentExample,
    (d) => { find(d, 'ScaledObject').spec.advanced.scalingModifiers.formula = 'pending'; }, /formula must be/],
  ['ScaledObject metric type misspelt', deploymentExample,
    (d) => { find(d, 'ScaledObject').spec.advanced.scalingModifiers.metricType = 'Averagevalue'; }, /metricType Averagevalue|metricType/],
  ['cluster mode without hash tags', deploymentExample,
    (d) => { const so = find(d, 'ScaledObject'); so.spec.triggers[0].metadata.listName = 'relay:ocr:pending'; }, /relay:\{ocr\}:pending/],
  ['ScaledObject targeting a Deployment that does not exist', deploymentExample,
    (d) => { find(d, 'ScaledObject').spec.scaleTargetRef.name = 'relay-ocrr'; }, /scaleTargetRef relay-ocrr/],
  ['Deployment relay exiting after one job', deploymentExample,
    (d) => { const dep = find(d, 'Deployment', (x) => x.metadata.name === 'relay-ocr'); env(relayOf(dep.spec.template.spec), 'RELAY_MAX_JOBS').value = '1'; }, /RELAY_MAX_JOBS must be 0/],
  ['relays taking 4 jobs at once, KEDA aiming at 1 per pod', deploymentExample,
    (d) => { const dep = find(d, 'Deployment', (x) => x.metadata.name === 'relay-ocr'); env(relayOf(dep.spec.template.spec), 'RELAY_RELAY_CONCURRENCY').value = '4'; }, /target 1 must equal the relay's RELAY_RELAY_CONCURRENCY \(4\)/],
];

for (const [what, base, mutate, pattern] of mutations) {
  test(`caught: ${what}`, () => expectCaught(base, mutate, pattern));
}

// The chart's own templates with the two typos helm lint was seen to pass: lint still passes
// them (which is why these checks exist), and checkValues refuses both.
test('typos in the templates pass helm lint and are caught here', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relay-chart-'));
  try {
    fs.cpSync(chart, dir, { recursive: true });
    const pod = path.join(dir, 'templates/models/_pod.tpl');
    fs.writeFileSync(pod, fs.readFileSync(pod, 'utf8').replace('restartPolicy: Never', 'restartPolicyy: Never'));
    const sj = path.join(dir, 'templates/models/scaledjob.yaml');
    fs.writeFileSync(sj, fs.readFileSync(sj, 'utf8').replace('strategy: accurate', 'strategy: acurate'));
    const example = [path.join(examplesDir, 'two-gpu-models.yaml')];
    const lint = execFileSync(tool('helm'), ['lint', '--strict', dir, '-f', example[0]], { encoding: 'utf8' });
    assert.match(lint, /0 chart\(s\) failed/);
    const errors = await checkValues(example, dir);
    assert.ok(errors.some((e) => /unknown field .*restartPolicyy/.test(e)), errors.join('\n'));
    assert.ok(errors.some((e) => /strategy acurate is not one of/.test(e)), errors.join('\n'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('values.schema.json refuses misspelt and out-of-range values before anything renders', () => {
  for (const args of [['--set', 'gateway.replicaz=3'], ['--set', 'redis.mode=clustr'],
    ['--set', 'models[0].name=ocr', '--set', 'models[0].image.repository=x', '--set', 'models[0].mode=jobs'],
    ['--set', 'models[0].name=Bad Name', '--set', 'models[0].image.repository=x'],
    ['--set', 'relay.queuePopTimeout=5 minutes']]) {
    assert.throws(() => render([], args), /values don't meet the specifications|schema/, args.join(' '));
  }
});

test('a model of concurrency 4 gets relays taking 4 jobs at once and KEDA aiming at 4 per pod', async () => {
  const docs = render([path.join(examplesDir, 'ocr-deployment-mode.yaml')], ['--set', 'models[0].concurrency=4']);
  const dep = find(docs, 'Deployment', (x) => x.metadata.name === 'relay-ocr');
  assert.equal(env(relayOf(dep.spec.template.spec), 'RELAY_RELAY_CONCURRENCY').value, '4');
  assert.equal(String(find(docs, 'ScaledObject').spec.advanced.scalingModifiers.target), '4');
  assert.deepEqual(await allErrors(docs), []);
  // A job-mode pod runs one job: a concurrency there is a mistake, refused by name.
  assert.throws(() => render([path.join(examplesDir, 'two-gpu-models.yaml')], ['--set', 'models[0].concurrency=2']),
    /concurrency: only for mode: deployment/);
  assert.throws(() => render([path.join(examplesDir, 'ocr-deployment-mode.yaml')], ['--set', 'models[0].concurrency=0']),
    /values don't meet the specifications|schema/);
});

test('a model taking jobs ahead gets relays told so, and only in deployment mode', async () => {
  const plain = render([path.join(examplesDir, 'ocr-deployment-mode.yaml')]);
  assert.equal(env(relayOf(find(plain, 'Deployment', (x) => x.metadata.name === 'relay-ocr').spec.template.spec), 'RELAY_RELAY_TAKE_AHEAD'), undefined);
  const docs = render([path.join(examplesDir, 'ocr-deployment-mode.yaml')], ['--set', 'models[0].takeAhead=1s']);
  const dep = find(docs, 'Deployment', (x) => x.metadata.name === 'relay-ocr');
  assert.equal(env(relayOf(dep.spec.template.spec), 'RELAY_RELAY_TAKE_AHEAD').value, '1s');
  assert.deepEqual(await allErrors(docs), []);
  // "0s" turns the relay's default off: passed on, not taken for unset.
  const off = render([path.join(examplesDir, 'ocr-deployment-mode.yaml')], ['--set', 'models[0].takeAhead=0s']);
  assert.equal(env(relayOf(find(off, 'Deployment', (x) => x.metadata.name === 'relay-ocr').spec.template.spec), 'RELAY_RELAY_TAKE_AHEAD').value, '0s');
  assert.throws(() => render([path.join(examplesDir, 'two-gpu-models.yaml')], ['--set', 'models[0].takeAhead=1s']),
    /takeAhead: only for mode: deployment/);
  assert.throws(() => render([path.join(examplesDir, 'ocr-deployment-mode.yaml')], ['--set', 'models[0].takeAhead=one second']),
    /values don't meet the specifications|schema/);
});

// The gateway reads <variable>_FILE from the Secret mounted whole (not <variable> from the
// environment): the kubelet updates such a file in place. Returns the mount.
function assertSecretFile(pod, variable, secretName) {
  const gw = pod.containers[0];
  const file = env(gw, `${variable}_FILE`).value;
  assert.equal(env(gw, variable), undefined);
  const mount = gw.volumeMounts.find((m) => file.startsWith(`${m.mountPath}/`));
  assert.ok(mount, `${file} is on a mounted volume`);
  const volume = pod.volumes.find((v) => v.name === mount.name);
  assert.equal(volume.secret.secretName, secretName);
  assert.equal(`${mount.mountPath}/${volume.secret.items[0].path}`, file);
  assert.equal(mount.subPath, undefined, 'a subPath mount is never updated by the kubelet');
  return mount;
}

test('the API keys Secret is a file the gateways read again, or an environment variable when asked', async () => {
  const docs = render([path.join(examplesDir, 'two-gpu-models.yaml')]);
  const pod = gatewayDeployment(docs).spec.template.spec;
  const gw = pod.containers[0];
  assertSecretFile(pod, 'RELAY_AUTH_API_KEYS', 'relay-api-keys');
  assert.deepEqual(await allErrors(docs), []);
  const fixed = gatewayDeployment(render([path.join(examplesDir, 'two-gpu-models.yaml')], ['--set', 'auth.reloadKeys=false']));
  const c = fixed.spec.template.spec.containers[0];
  assert.equal(env(c, 'RELAY_AUTH_API_KEYS').valueFrom.secretKeyRef.name, 'relay-api-keys');
  assert.equal(env(c, 'RELAY_AUTH_API_KEYS_FILE'), undefined);
});

test('the dashboard\'s Secret is a file the gateways read again, or an environment variable when asked', async () => {
  const docs = render([path.join(examplesDir, 'two-gpu-models.yaml')], ['--set', 'dashboard.existingSecret=ops-keys']);
  const pod = gatewayDeployment(docs).spec.template.spec;
  const gw = pod.containers[0];
  const mount = assertSecretFile(pod, 'RELAY_ADMIN_API_KEYS', 'ops-keys');
  assert.notEqual(mount.mountPath, gw.volumeMounts.find((m) => m.name === 'api-keys').mountPath,
    'each Secret its own folder');
  assert.deepEqual(await allErrors(docs), []);
  const fixed = gatewayDeployment(render([path.join(examplesDir, 'two-gpu-models.yaml')],
    ['--set', 'dashboard.existingSecret=ops-keys', '--set', 'dashboard.reloadKeys=false']));
  const c = fixed.spec.template.spec.containers[0];
  assert.equal(env(c, 'RELAY_ADMIN_API_KEYS').valueFrom.secretKeyRef.name, 'ops-keys');
  assert.equal(env(c, 'RELAY_ADMIN_API_KEYS_FILE'), undefined);
  const none = gatewayDeployment(render([path.join(examplesDir, 'two-gpu-models.yaml')])).spec.template.spec;
  assert.equal(env(none.containers[0], 'RELAY_ADMIN_API_KEYS_FILE'), undefined, 'no Secret, no dashboard');
});

test('the gateways and the relays may each have a Redis user of their own; KEDA keeps the shared one', async () => {
  const own = ['--set', 'redis.existingSecret=redis-users', '--set', 'redis.username=keda',
    '--set', 'redis.gateway.username=relay-gateway', '--set', 'redis.gateway.passwordKey=gateway-password',
    '--set', 'redis.relays.username=relay', '--set', 'redis.relays.passwordKey=relay-password'];
  const docs = render([path.join(examplesDir, 'two-gpu-models.yaml')], own);
  const userOf = (c) => [env(c, 'RELAY_REDIS_USERNAME').value,
    env(c, 'RELAY_REDIS_PASSWORD').valueFrom.secretKeyRef.name, env(c, 'RELAY_REDIS_PASSWORD').valueFrom.secretKeyRef.key];
  assert.deepEqual(userOf(gatewayDeployment(docs).spec.template.spec.containers[0]),
    ['relay-gateway', 'redis-users', 'gateway-password']);
  const relays = docs.filter((d) => d.kind === 'ScaledJob').map((d) => relayOf(d.spec.jobTargetRef.template.spec));
  assert.ok(relays.length >= 2);
  for (const c of relays) assert.deepEqual(userOf(c), ['relay', 'redis-users', 'relay-password']);
  const auth = find(docs, 'TriggerAuthentication');
  assert.deepEqual(auth.spec.secretTargetRef.map((r) => r.key).sort(), ['redis-password', 'redis-username']);
  assert.deepEqual(await allErrors(docs), []);
  // Not set: one user for all, as before.
  const shared = render([path.join(examplesDir, 'two-gpu-models.yaml')],
    ['--set', 'redis.existingSecret=redis-users', '--set', 'redis.username=relay']);
  for (const c of [gatewayDeployment(shared).spec.template.spec.containers[0], relayOf(jobPod(shared))])
    assert.deepEqual(userOf(c), ['relay', 'redis-users', 'redis-password']);
});

test('sentinels with a password of their own get it from the Secret, the pods and KEDA alike', async () => {
  const sentinel = ['--set', 'redis.mode=sentinel', '--set-string', 'redis.url=redis://s1:26379\\,s2:26379\\,s3:26379',
    '--set', 'redis.sentinelMaster=mymaster', '--set', 'redis.existingSecret=redis-auth',
    '--set', 'redis.sentinelPasswordKey=sentinel-password', '--set', 'redis.sentinelUsername=watcher'];
  const docs = render([path.join(examplesDir, 'two-gpu-models.yaml')], sentinel);
  for (const c of [gatewayDeployment(docs).spec.template.spec.containers[0], relayOf(jobPod(docs))]) {
    assert.deepEqual(env(c, 'RELAY_REDIS_SENTINEL_PASSWORD').valueFrom.secretKeyRef,
      { name: 'redis-auth', key: 'sentinel-password' }, c.name);
    assert.equal(env(c, 'RELAY_REDIS_SENTINEL_USERNAME').value, 'watcher', c.name);
  }
  const auth = find(docs, 'TriggerAuthentication');
  const refs = Object.fromEntries(auth.spec.secretTargetRef.map((r) => [r.parameter, r.key]));
  assert.equal(refs.sentinelPassword, 'sentinel-password');
  assert.equal(refs.sentinelUsername, 'redis-sentinel-username');
  assert.equal(scaledJob(docs).spec.triggers[0].type, 'redis-sentinel');
  assert.deepEqual(await allErrors(docs), []);
  // Not set: no AUTH to the sentinels, and nothing in the manifests says otherwise.
  const plain = render([path.join(examplesDir, 'two-gpu-models.yaml')], sentinel.slice(0, 8));
  assert.equal(env(relayOf(jobPod(plain)), 'RELAY_REDIS_SENTINEL_PASSWORD'), undefined);
  assert.ok(!find(plain, 'TriggerAuthentication').spec.secretTargetRef.some((r) => r.parameter.startsWith('sentinel')));
  // A key without the Secret it would be in is refused at render time.
  assert.throws(() => render([path.join(examplesDir, 'two-gpu-models.yaml')],
    ['--set', 'redis.mode=sentinel', '--set', 'redis.sentinelMaster=m', '--set', 'redis.existingSecret=',
      '--set', 'redis.sentinelPasswordKey=k']),
    /redis.existingSecret holds the sentinels' password/);
});
