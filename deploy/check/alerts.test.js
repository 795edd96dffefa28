// node --test deploy/check — what the chart ships for monitoring, as it renders it: Relay's
// alerting rules (files/relay-alerts.yaml) embedded whole in the PrometheusRule, valid for
// promtool, each alert firing, and staying quiet, where alerts.test.yaml says (promtool test
// rules, Debian's prometheus package); and the Grafana dashboard's ConfigMap.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import YAML from 'yaml';
import { chart, examplesDir, render } from './lib.js';

const here = path.dirname(new URL(import.meta.url).pathname);
const rulesFile = path.join(chart, 'files/relay-alerts.yaml');
const find = (docs) => docs.find((d) => d.kind === 'PrometheusRule');

function promtool(args, cwd) {
  try {
    return execFileSync('promtool', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.code === 'ENOENT') throw new Error('promtool missing: ./scripts/bootstrap installs Debian\'s prometheus');
    throw new Error(`promtool ${args.join(' ')}:\n${e.stdout}${e.stderr}`);
  }
}

test('no PrometheusRule unless asked for', () => {
  assert.equal(find(render([])), undefined);
});

test('the PrometheusRule carries the rule file whole, with the labels asked for', () => {
  const rule = find(render([path.join(examplesDir, 'two-gpu-models.yaml')]));
  assert.ok(rule, 'the example turns the rules on');
  assert.equal(rule.apiVersion, 'monitoring.coreos.com/v1');
  assert.equal(rule.metadata.labels.release, 'prometheus');
  assert.deepEqual(rule.spec, YAML.parse(fs.readFileSync(rulesFile, 'utf8')));
});

test('promtool: the rendered rules are valid and fire where the tests say', () => {
  const rule = find(render([], ['--set', 'gateway.prometheusRule.enabled=true']));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relay-alerts-'));
  try {
    fs.writeFileSync(path.join(dir, 'relay-alerts.rendered.yaml'), YAML.stringify(rule.spec));
    fs.copyFileSync(path.join(here, 'alerts.test.yaml'), path.join(dir, 'alerts.test.yaml'));
    const checked = promtool(['check', 'rules', 'relay-alerts.rendered.yaml'], dir);
    const count = Number(/(\d+) rules found/.exec(checked)?.[1]);
    assert.equal(count, rule.spec.groups.flatMap((g) => g.rules).length);
    // Every alert has a test of its own in alerts.test.yaml.
    const tested = new Set(YAML.parse(fs.readFileSync(path.join(here, 'alerts.test.yaml'), 'utf8'))
      .tests.flatMap((t) => t.alert_rule_test.map((a) => a.alertname)));
    for (const r of rule.spec.groups.flatMap((g) => g.rules)) assert.ok(tested.has(r.alert), `${r.alert} has no test`);
    promtool(['test', 'rules', 'alerts.test.yaml'], dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the Grafana dashboard ConfigMap carries the dashboard whole, labelled for the sidecar', () => {
  const docs = render([path.join(examplesDir, 'two-gpu-models.yaml')]);
  const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name.endsWith('-grafana-dashboard'));
  assert.ok(cm, 'the example turns the dashboard on');
  assert.equal(cm.metadata.labels.grafana_dashboard, '1');
  const file = fs.readFileSync(path.join(chart, 'files/relay-dashboard.json'), 'utf8');
  assert.deepEqual(JSON.parse(cm.data['relay-dashboard.json']), JSON.parse(file));
  assert.equal(render([]).find((d) => d.kind === 'ConfigMap' && d.metadata.name.endsWith('-grafana-dashboard')), undefined);
});
