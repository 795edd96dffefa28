// node deploy/check/check.js — every offline check of the Helm chart, for the default values and
// each example in deploy/examples: helm lint --strict, helm template, strict Kubernetes/KEDA
// schemas, project rules. Prints each problem; exits 1 if there is any.
import path from 'node:path';
import { checkValues, exampleFiles, knownEnv, repo } from './lib.js';

const sets = [['(default values)', []], ...exampleFiles().map((f) => [path.relative(repo, f), [f]])];
let failed = 0;
if (!knownEnv('relay') || !knownEnv('relay-gateway')) {
  console.log('note: no relay/relay-gateway build in $RELAY_BIN_DIR or build/bin: environment names not checked');
}
for (const [name, files] of sets) {
  const errors = await checkValues(files);
  console.log(`${errors.length ? 'FAIL' : 'ok  '} ${name}`);
  for (const e of errors) console.log(`     ${e}`);
  if (errors.length) failed++;
}
console.log(`${sets.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
