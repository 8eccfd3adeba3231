// Offline checks of deploy/:
// - every kustomization (Kustomization or Component) is rendered the way
//   `kubectl kustomize` would for what these manifests use (resources,
//   components, strategic-merge patches, $patch: delete, image names);
// - every rendered object of a built-in kind is validated against the
//   Kubernetes OpenAPI schema (npm kubernetes-models), the ServiceMonitor
//   against the Prometheus Operator's (npm @kubernetes-models/prometheus-
//   operator), and the Gateway API / Inference Extension objects against
//   their CRDs' openAPIV3Schema (tests/data/k8s-crds, with ajv);
// - every pod template meets the "restricted" Pod Security Standard (the
//   hostPath lab overlay excepted, which must say so);
// - the ropeserve Deployment's operational settings, the endpoint picker's
//   RBAC and wiring, and the Grafana dashboard's structure and variables.
// Metric names (dashboard, endpoint picker) are checked against a live
// /metrics by tests/e2e/ops_e2e.py.
// Usage: node validate_deploy.mjs DEPLOY_DIR (NODE_MODULES_DIR: see run.sh)
import fs from 'fs';
import path from 'path';
import { fileURLToPath, pathToFileURL } from 'url';

import { checkRestricted, smp } from './k8s_rules.mjs';

const nodeModules = process.env.NODE_MODULES_DIR;
const load = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
const YAML = (await load('yaml/dist/index.js')).default;
const AjvModule = await load('ajv/dist/ajv.js');
const Ajv = AjvModule.default.default || AjvModule.default;
const __dirname = path.dirname(fileURLToPath(import.meta.url));

const deployDir = path.resolve(process.argv[2] || path.join(__dirname, '../../deploy'));
const crdDir = path.join(__dirname, '../data/k8s-crds');
let failures = 0;
const fail = (where, msg) => { failures++; console.error(`FAIL ${where}: ${msg}`); };
const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]);
const parseAll = (file) => YAML.parseAllDocuments(fs.readFileSync(file, 'utf8')).map((d) => {
  if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
  return d.toJS();
}).filter(Boolean);

// ---- schemas ----
const builtin = {};
for (const [group, file] of [['apps/v1', 'apps/v1'], ['v1', 'v1'], ['autoscaling/v2', 'autoscaling/v2'],
  ['policy/v1', 'policy/v1'], ['batch/v1', 'batch/v1'], ['rbac.authorization.k8s.io/v1', 'rbac.authorization.k8s.io/v1']]) {
  const mod = await load(`kubernetes-models/${file}/index.js`);
  for (const [kind, Model] of Object.entries(mod)) builtin[`${group}/${kind}`] = Model;
}
const promOp = await load('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js');
builtin['monitoring.coreos.com/v1/ServiceMonitor'] = promOp.ServiceMonitor;

const ajv = new Ajv({ strict: false, allErrors: true, logger: false });
// The OpenAPI formats the CRDs use.
const intFormat = (bits) => ({ type: 'number', validate: (x) => Number.isInteger(x) && Math.abs(x) <= 2 ** (bits - 1) });
ajv.addFormat('int32', intFormat(32));
ajv.addFormat('int64', intFormat(64));
ajv.addFormat('date-time', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/);
// kubectl's strict field validation (the default since 1.27) refuses fields
// a structural schema does not declare: the same here.
function strictFields(schema) {
  if (!schema || typeof schema !== 'object') return schema;
  if (schema.properties && schema.additionalProperties === undefined && !schema['x-kubernetes-preserve-unknown-fields'])
    schema.additionalProperties = false;
  for (const v of Object.values(schema)) if (v && typeof v === 'object') strictFields(v);
  return schema;
}
const crdValidators = {};
for (const file of fs.readdirSync(crdDir).filter((f) => f.endsWith('.yaml'))) {
  for (const crd of parseAll(path.join(crdDir, file))) {
    for (const v of crd.spec.versions) {
      crdValidators[`${crd.spec.group}/${v.name}/${crd.spec.names.kind}`] = ajv.compile(strictFields(v.schema.openAPIV3Schema));
    }
  }
}

function validate(where, doc) {
  if (!doc.apiVersion || !doc.kind || !doc.metadata || !doc.metadata.name)
    return fail(where, 'apiVersion, kind and metadata.name are required');
  const key = `${doc.apiVersion}/${doc.kind}`;
  if (crdValidators[key]) {
    if (!crdValidators[key](doc)) fail(where, ajv.errorsText(crdValidators[key].errors));
    return;
  }
  const Model = builtin[key];
  if (!Model) return fail(where, `no schema for ${key}`);
  try {
    new Model(doc).validate();
  } catch (e) {
    fail(where, e.message.split('\n').slice(0, 6).join(' | '));
  }
}

// ---- a small kustomize: what deploy/k8s uses ----
const kustomizationDirs = walk(path.join(deployDir, 'k8s')).filter((f) => path.basename(f) === 'kustomization.yaml')
  .map((f) => path.dirname(f));
const patchFiles = new Set();
function render(dir) {
  const rel = path.relative(deployDir, dir);
  const k = YAML.parse(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8'));
  let objects = [];
  for (const r of [...(k.resources || []), ...(k.components || [])]) {
    const p = path.join(dir, r);
    if (!fs.existsSync(p)) { fail(rel, `resource ${r} does not exist`); continue; }
    if (fs.statSync(p).isDirectory()) {
      if (!fs.existsSync(path.join(p, 'kustomization.yaml'))) { fail(rel, `${r} has no kustomization.yaml`); continue; }
      objects = objects.concat(render(p));
    } else {
      objects = objects.concat(parseAll(p).map((doc) => ({ doc, where: `${path.relative(deployDir, p)} (${rel})` })));
    }
  }
  for (const pt of k.patches || []) {
    const patch = pt.path ? YAML.parse(fs.readFileSync(path.join(dir, pt.path), 'utf8')) : YAML.parse(pt.patch);
    if (pt.path) patchFiles.add(path.join(dir, pt.path));
    const target = pt.target || { kind: patch.kind, name: patch.metadata.name };
    const i = objects.findIndex((o) => o.doc.kind === target.kind && o.doc.metadata.name === target.name);
    if (i < 0) { fail(rel, `patch target ${target.kind}/${target.name} not found`); continue; }
    if (patch.$patch === 'delete') objects.splice(i, 1);
    else objects[i] = { doc: smp(objects[i].doc, patch), where: `${objects[i].where} + ${pt.path || 'inline patch'}` };
  }
  const used = new Set();
  for (const img of k.images || []) {
    for (const o of objects) {
      const spec = ((o.doc.spec || {}).template || {}).spec || {};
      for (const c of [...(spec.containers || []), ...(spec.initContainers || [])]) {
        // An image is matched by its name, whatever tag an earlier level set.
        if (c.image.replace(/[:@].*$/, '') === img.name) {
          c.image = `${img.newName || img.name}:${img.newTag || 'latest'}`;
          used.add(img.name);
        }
      }
    }
    if (!used.has(img.name)) fail(rel, `images: no container uses image "${img.name}"`);
  }
  return objects;
}

const rendered = {};  // kustomization dir (relative) -> objects
for (const dir of kustomizationDirs) rendered[path.relative(path.join(deployDir, 'k8s'), dir) || '.'] = render(dir);
for (const [name, objects] of Object.entries(rendered)) {
  for (const o of objects) validate(`${o.where} [${name}]`, o.doc);
  // Pod Security: restricted everywhere but the hostPath lab overlay.
  for (const o of objects.filter((x) => ['Deployment', 'Job'].includes(x.doc.kind))) {
    const problems = checkRestricted(o.doc.spec.template.spec);
    if (name === 'models/hostpath' && o.doc.metadata.name === 'ropeserve') {
      if (!problems.some((p) => p.includes('hostPath'))) fail(o.where, 'the hostpath overlay should use a hostPath volume');
      continue;
    }
    for (const p of problems) fail(`${o.where} [${name}]`, `restricted Pod Security: ${p}`);
  }
}
// Every YAML object in k8s/ is part of some kustomization (or a patch).
const reachable = new Set(Object.values(rendered).flat().map((o) => o.where.split(' ')[0]));
for (const file of walk(path.join(deployDir, 'k8s')).filter((f) => /\.ya?ml$/.test(f))) {
  const rel = path.relative(deployDir, file);
  if (['kustomization.yaml', 'values.yaml'].includes(path.basename(file)) || patchFiles.has(file)) continue;
  if (!reachable.has(rel)) fail(rel, 'not referenced by any kustomization');
}

// ---- what the ropeserve Deployment must do ----
const all = rendered['.'] || [];
const find = (objects, kind, name) => objects.find((o) => o.doc.kind === kind && (!name || o.doc.metadata.name === name));
const dep = find(rendered.base || [], 'Deployment', 'ropeserve');
if (!dep) {
  fail('k8s/base', 'no ropeserve Deployment');
} else {
  const spec = dep.doc.spec.template.spec;
  const c = spec.containers[0];
  const env = Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
  if (c.readinessProbe.httpGet.path !== '/ready') fail(dep.where, 'readiness must probe /ready');
  if (c.livenessProbe.httpGet.path !== '/health') fail(dep.where, 'liveness must probe /health');
  for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe])
    if (!probe || probe.httpGet.port !== 'admin') fail(dep.where, 'startup, readiness and liveness probes must use the admin port');
  const shutdown = Number(env.ROPESERVE_SHUTDOWN_TIMEOUT || 30);
  if (!(spec.terminationGracePeriodSeconds > shutdown + 5))
    fail(dep.where, 'terminationGracePeriodSeconds must exceed the preStop pause plus --shutdown-timeout');
  if (c.ports.map((p) => p.containerPort).sort().join() !== '50051,8080,8081')
    fail(dep.where, 'container ports must be 8080, 8081 (admin) and 50051');
  if (env.ROPESERVE_DEMO !== '0' || !env.ROPESERVE_MODEL)
    fail(dep.where, 'a deployment must name its model and refuse the demo models (ROPESERVE_DEMO=0)');
  if (!c.securityContext || c.securityContext.readOnlyRootFilesystem !== true) fail(dep.where, 'root filesystem must be read-only');
  if (!(c.resources && c.resources.requests && c.resources.requests.cpu && c.resources.limits && c.resources.limits.memory))
    fail(dep.where, 'CPU request and memory limit are required');
  if (!(spec.topologySpreadConstraints || []).some((t) => t.topologyKey === 'kubernetes.io/hostname'))
    fail(dep.where, 'replicas must spread over nodes');
  // API keys from a Secret, as a file.
  const keyFile = env.ROPESERVE_API_KEY_FILE || '';
  const mount = (c.volumeMounts || []).find((m) => keyFile.startsWith(m.mountPath + '/'));
  const vol = mount && spec.volumes.find((v) => v.name === mount.name);
  if (!vol || !vol.secret || !vol.secret.secretName || vol.secret.optional)
    fail(dep.where, 'ROPESERVE_API_KEY_FILE must be a file of a (required) Secret volume');
  const pdb = find(rendered.base, 'PodDisruptionBudget');
  if (!pdb || pdb.doc.spec.selector.matchLabels.app !== 'ropeserve') fail('k8s/base', 'a PodDisruptionBudget must cover the pods');
  const hpa = find(rendered.base, 'HorizontalPodAutoscaler');
  if (!hpa || hpa.doc.spec.metrics[0].pods.metric.name !== 'ropeserve_num_requests_waiting')
    fail('k8s/base/hpa.yaml', 'the HPA must scale on ropeserve_num_requests_waiting');
  const svc = find(rendered.base, 'Service', 'ropeserve');
  const sm = find(rendered.servicemonitor || [], 'ServiceMonitor');
  if (!sm || !svc || sm.doc.spec.selector.matchLabels.app !== svc.doc.metadata.labels.app ||
      !svc.doc.spec.ports.some((p) => p.name === sm.doc.spec.endpoints[0].port && p.port === 8081))
    fail('k8s/servicemonitor', 'the ServiceMonitor must scrape the Service\'s admin port');
  // Provisioning (a): the Job writes the volume the Deployment reads.
  const job = find(rendered['models/download-job'] || [], 'Job');
  const claim = spec.volumes.find((v) => v.name === 'models').persistentVolumeClaim.claimName;
  if (!job || !job.doc.spec.template.spec.volumes.some((v) => (v.persistentVolumeClaim || {}).claimName === claim))
    fail('k8s/models/download-job', `the Job must fill the PVC ${claim}`);
  const imageDep = find(rendered['models/image'] || [], 'Deployment', 'ropeserve');
  if (!imageDep || !imageDep.doc.spec.template.spec.volumes.find((v) => v.name === 'models').emptyDir ||
      find(rendered['models/image'], 'PersistentVolumeClaim'))
    fail('k8s/models/image', 'the image overlay must replace the PVC with an emptyDir');
}

// ---- the endpoint pickers: wiring and RBAC ----
// The pool (../gateway) and its picker in overlay `name`; returns the
// picker's Deployment.
function checkPicker(name, grantsNeeded) {
  const objs = rendered[name] || [];
  const where = `k8s/${name}`;
  const pool = find(objs, 'InferencePool');
  const eppDep = find(objs, 'Deployment', 'ropeserve-epp');
  if (!pool || !eppDep) return fail(where, 'InferencePool and the ropeserve-epp Deployment are required');
  const eppSvc = find(objs, 'Service', pool.doc.spec.endpointPickerRef.name);
  if (!eppSvc || !eppSvc.doc.spec.ports.some((p) => p.port === pool.doc.spec.endpointPickerRef.port.number))
    fail(pool.where, 'endpointPickerRef must name the EPP Service and one of its ports');
  if (eppSvc && eppSvc.doc.spec.selector.app !== eppDep.doc.spec.template.metadata.labels.app)
    fail(eppSvc.where, 'the EPP Service must select the EPP pods');
  const rsDep = find(all, 'Deployment', 'ropeserve');
  const labels = rsDep ? rsDep.doc.spec.template.metadata.labels : {};
  for (const [k, v] of Object.entries(pool.doc.spec.selector.matchLabels))
    if (labels[k] !== v) fail(pool.where, `the pool selects ${k}=${v}, which the ropeserve pods do not carry`);
  const httpPort = rsDep && rsDep.doc.spec.template.spec.containers[0].ports.find((p) => p.name === 'http').containerPort;
  if (!pool.doc.spec.targetPorts.some((p) => p.number === httpPort)) fail(pool.where, 'targetPorts must be the API port');
  const args = eppDep.doc.spec.template.spec.containers[0].args;
  const arg = (flag) => args[args.indexOf(flag) + 1];
  if (arg('--pool-name') !== pool.doc.metadata.name) fail(eppDep.where, '--pool-name must name the pool');
  if (arg('--pool-group') !== 'inference.networking.k8s.io') fail(eppDep.where, '--pool-group must be the v1 API group');
  if (!args.includes('--pool-namespace')) fail(eppDep.where, '--pool-namespace is required');
  // RBAC: what upstream's chart grants the EPP's service account.
  const sa = eppDep.doc.spec.template.spec.serviceAccountName;
  if (!sa || !find(objs, 'ServiceAccount', sa)) fail(eppDep.where, 'the EPP needs its own ServiceAccount');
  const rules = objs.filter((o) => o.doc.kind === 'RoleBinding' && o.doc.subjects.some((s) => s.kind === 'ServiceAccount' && s.name === sa))
    .flatMap((b) => (find(objs, b.doc.roleRef.kind, b.doc.roleRef.name) || { doc: { rules: [] } }).doc.rules);
  const grants = (group, resource) => rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) &&
    ['get', 'list', 'watch'].every((v) => r.verbs.includes(v)));
  for (const [group, resource] of grantsNeeded)
    if (!grants(group, resource)) fail(eppDep.where, `the EPP must get/list/watch ${resource || group}`);
  for (const o of objs.filter((x) => x.doc.kind === 'InferenceObjective'))
    if (o.doc.spec.poolRef.name !== pool.doc.metadata.name) fail(o.where, 'poolRef must name the pool');
  const route = find(objs, 'HTTPRoute');
  const gw = find(objs, 'Gateway');
  if (!route || !gw || !route.doc.spec.parentRefs.some((p) => p.name === gw.doc.metadata.name) ||
      !route.doc.spec.rules.some((r) => r.backendRefs.some((b) => b.kind === 'InferencePool' && b.name === pool.doc.metadata.name)))
    fail(`${where} (../gateway)`, 'an HTTPRoute must attach to the Gateway and route to the pool');
  return eppDep;
}
const poolGrants = [['', 'pods'], ['inference.networking.k8s.io', 'inferencepools']];
checkPicker('inference-extension', [...poolGrants, ['inference.networking.x-k8s.io', 'inferenceobjectives']]);
const llmdEpp = checkPicker('llm-d', poolGrants);
if (llmdEpp) checkLlmdConfig(rendered['llm-d'], llmdEpp);

// llm-d-router's EndpointPickerConfig: a well-formed plugin graph, and the
// settings that must agree with the ropeserve pods of the same overlay.
function checkLlmdConfig(objs, eppDep) {
  const where = 'k8s/llm-d/epp.yaml';
  const pod = eppDep.doc.spec.template.spec;
  const args = pod.containers[0].args;
  const configFile = args[args.indexOf('--config-file') + 1] || '';
  const mount = (pod.containers[0].volumeMounts || []).find((m) => configFile.startsWith(m.mountPath + '/'));
  const volume = mount && pod.volumes.find((v) => v.name === mount.name);
  const cm = volume && volume.configMap && find(objs, 'ConfigMap', volume.configMap.name);
  const text = cm && cm.doc.data[path.basename(configFile)];
  if (!text) return fail(where, '--config-file must be a key of a ConfigMap mounted in the picker');
  const config = YAML.parse(text);
  if (config.apiVersion !== 'llm-d.ai/v1alpha1' || config.kind !== 'EndpointPickerConfig')
    fail(where, 'the config must be an llm-d.ai/v1alpha1 EndpointPickerConfig');
  // Plugin types of llm-d-router v0.10.0 that this config may use.
  const known = new Set(['token-producer', 'endpoint-notification-source', 'metrics-data-source', 'core-metrics-extractor',
    'single-profile-handler', 'decode-filter', 'precise-prefix-cache-producer', 'prefix-cache-scorer',
    'kv-cache-utilization-scorer', 'queue-scorer', 'max-score-picker', 'no-hit-lru-scorer', 'load-aware-scorer']);
  const plugins = {};
  for (const p of config.plugins || []) {
    if (!known.has(p.type)) fail(where, `unknown plugin type ${p.type}`);
    const name = p.name || p.type;
    if (plugins[name]) fail(where, `two plugins named ${name}`);
    plugins[name] = p;
  }
  const refs = [...(config.schedulingProfiles || []).flatMap((s) => s.plugins.map((p) => p.pluginRef)),
    ...((config.dataLayer || {}).sources || []).flatMap((s) => [s.pluginRef, ...(s.extractors || []).map((e) => e.pluginRef)])];
  for (const r of refs) if (!plugins[r]) fail(where, `pluginRef ${r} names no plugin`);
  const byType = (t) => Object.values(plugins).find((p) => p.type === t) || { parameters: {} };
  const producer = byType('precise-prefix-cache-producer');
  const scorer = byType('prefix-cache-scorer');
  const producerName = Object.keys(plugins).find((n) => plugins[n] === producer);
  if (!producerName || scorer.parameters.prefixMatchInfoProducerName !== producerName)
    fail(where, 'the prefix-cache scorer must read the precise-prefix-cache-producer');
  if (!((config.dataLayer || {}).sources || []).some((s) => plugins[s.pluginRef] && plugins[s.pluginRef].type ===
      'endpoint-notification-source' && (s.extractors || []).some((e) => e.pluginRef === producerName)))
    fail(where, 'the producer must hear of endpoints (it subscribes to each pod\'s events)');
  const tokens = byType('token-producer').parameters;
  if (tokens.backend !== 'vllm') fail(where, 'the token-producer must render (backend vllm): estimated tokens never match');
  // Agreement with the ropeserve pods of this overlay.
  const rs = find(objs, 'Deployment', 'ropeserve');
  const c = rs.doc.spec.template.spec.containers[0];
  const env = Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
  const served = (c.args || []).includes('--served-model-name') ? c.args[c.args.indexOf('--served-model-name') + 1]
    : path.basename(env.ROPESERVE_MODEL || '');
  if (tokens.modelName !== served) fail(where, `token-producer modelName must be the served model name (${served})`);
  const svc = find(objs, 'Service', 'ropeserve');
  const adminPort = svc && svc.doc.spec.ports.find((p) => p.targetPort === 'admin');
  if (!adminPort || (tokens.vllm || {}).url !== `http://${svc.doc.metadata.name}:${adminPort.port}`)
    fail(where, 'the token-producer must render on the ropeserve Service\'s admin port (no API key there)');
  const ev = producer.parameters.kvEventsConfig || {};
  const port = Number((env.ROPESERVE_KV_EVENTS_ENDPOINT || '').replace(/^tcp:\/\/\*:/, ''));
  if (!ev.discoverPods || (ev.podDiscoveryConfig || {}).socketPort !== port || !c.ports.some((p) => p.containerPort === port))
    fail(where, 'the picker must dial the port the pods bind their events on (ROPESERVE_KV_EVENTS_ENDPOINT tcp://*:PORT)');
  const topic = env.ROPESERVE_KV_EVENTS_TOPIC || '';
  if (!topic.startsWith(ev.topicFilter || 'kv@') || !topic.endsWith(`@${served}`))
    fail(where, 'the pods\' topic must pass the picker\'s topicFilter and end with @<served model name>');
  const tp = producer.parameters.tokenProcessorConfig || {};
  if (tp.blockSize !== Number(env.ROPESERVE_BLOCK_SIZE || 16) || tp.hashSeed !== env.PYTHONHASHSEED)
    fail(where, 'blockSize and hashSeed must be the pods\' --block-size and PYTHONHASHSEED');
}

// ---- Grafana dashboard ----
try {
  const dash = JSON.parse(fs.readFileSync(path.join(deployDir, 'grafana/dashboards/ropeserve.json'), 'utf8'));
  if (!dash.uid || !dash.title || !Array.isArray(dash.panels) || dash.panels.length === 0)
    fail('dashboard', 'uid, title and panels are required');
  const vars = new Set(((dash.templating || {}).list || []).map((v) => v.name));
  for (const v of ['datasource', 'model_name', 'pod']) if (!vars.has(v)) fail('dashboard', `no $${v} variable`);
  const ids = new Set();
  for (const p of dash.panels) {
    if (ids.has(p.id)) fail('dashboard', `duplicate panel id ${p.id}`);
    ids.add(p.id);
    if (!p.type || !p.title || !p.gridPos || !Array.isArray(p.targets) || p.targets.length === 0)
      fail('dashboard', `panel ${p.id} lacks type, title, gridPos or targets`);
    for (const t of [p, ...(p.targets || [])])
      if (!t.datasource || t.datasource.uid !== '${datasource}') fail('dashboard', `panel ${p.id}: datasource must be $datasource`);
    for (const t of p.targets || []) {
      if (!t.expr || !t.refId) fail('dashboard', `panel ${p.id}: target without expr/refId`);
      else if (!t.expr.includes('$pod')) fail('dashboard', `panel ${p.id}: query ignores $pod: ${t.expr}`);
    }
  }
} catch (e) {
  fail('dashboard', e.message);
}

if (failures) {
  console.error(`${failures} problem(s) in ${deployDir}`);
  process.exit(1);
}
const count = Object.values(rendered).reduce((n, o) => n + o.length, 0);
console.log(`deploy/ OK: ${Object.keys(rendered).length} kustomizations rendered, ${count} objects validated, ` +
  'restricted Pod Security, EPP RBAC and wiring, dashboard checked');
