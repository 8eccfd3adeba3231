// Offline checks of deploy/: every Kubernetes object of a built-in kind is
// validated against the API's OpenAPI schema (npm kubernetes-models), the
// inference-extension objects against the fields of their v1alpha2 CRDs,
// every kustomization is resolved the way `kubectl kustomize` would (files,
// patches, image names), and the Grafana dashboard is checked for structure.
// Usage: node validate_deploy.js DEPLOY_DIR
// The npm packages are ESM-only and live outside the repository (see run.sh,
// which passes their node_modules directory in NODE_MODULES_DIR), so they
// are imported by file path.
import fs from 'fs';
import path from 'path';
import { fileURLToPath, pathToFileURL } from 'url';

const nodeModules = process.env.NODE_MODULES_DIR;
const load = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
const YAML = (await load('yaml/dist/index.js')).default;
const __dirname = path.dirname(fileURLToPath(import.meta.url));

const deployDir = path.resolve(process.argv[2] || path.join(__dirname, '../../deploy'));
let failures = 0;
const fail = (where, msg) => { failures++; console.error(`FAIL ${where}: ${msg}`); };

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]);
}

// Built-in kinds, by apiVersion/kind -> the kubernetes-models class.
const apps = await load('kubernetes-models/apps/v1/index.js');
const core = await load('kubernetes-models/v1/index.js');
const autoscaling = await load('kubernetes-models/autoscaling/v2/index.js');
const models = {
  'apps/v1/Deployment': apps.Deployment,
  'v1/Service': core.Service,
  'v1/ConfigMap': core.ConfigMap,
  'v1/PersistentVolumeClaim': core.PersistentVolumeClaim,
  'autoscaling/v2/HorizontalPodAutoscaler': autoscaling.HorizontalPodAutoscaler,
};

// The v1alpha2 CRD fields these examples use (inference.networking.x-k8s.io).
function checkInferenceObject(where, doc) {
  const spec = doc.spec || {};
  if (doc.kind === 'InferencePool') {
    if (!Number.isInteger(spec.targetPortNumber)) fail(where, 'InferencePool.spec.targetPortNumber must be an integer');
    if (!spec.selector || typeof spec.selector !== 'object') fail(where, 'InferencePool.spec.selector is required');
    if (!spec.extensionRef || !spec.extensionRef.name) fail(where, 'InferencePool.spec.extensionRef.name is required');
    const allowed = new Set(['targetPortNumber', 'selector', 'extensionRef']);
    for (const k of Object.keys(spec)) if (!allowed.has(k)) fail(where, `unknown InferencePool field ${k}`);
  } else if (doc.kind === 'InferenceModel') {
    if (!spec.modelName) fail(where, 'InferenceModel.spec.modelName is required');
    if (!spec.poolRef || !spec.poolRef.name) fail(where, 'InferenceModel.spec.poolRef.name is required');
    if (spec.criticality && !['Critical', 'Standard', 'Sheddable'].includes(spec.criticality))
      fail(where, `bad criticality ${spec.criticality}`);
  } else {
    fail(where, `unknown kind ${doc.kind}`);
  }
}

const objects = [];  // {file, doc}
const k8sDir = path.join(deployDir, 'k8s');
for (const file of walk(k8sDir).filter((f) => /\.ya?ml$/.test(f))) {
  const rel = path.relative(deployDir, file);
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  docs.forEach((d, i) => {
    if (d.errors.length) return fail(rel, d.errors.map((e) => e.message).join('; '));
    const doc = d.toJS();
    if (!doc) return;
    const where = `${rel}#${i}`;
    if (doc.kind === 'Kustomization') return;  // resolved below
    if (path.basename(file) === 'values.yaml') return;  // Helm values, not an object
    if (!doc.apiVersion || !doc.kind || !doc.metadata || !doc.metadata.name)
      return fail(where, 'apiVersion, kind and metadata.name are required');
    objects.push({ file, where, doc });
    const key = `${doc.apiVersion}/${doc.kind}`;
    if (doc.apiVersion.startsWith('inference.networking.x-k8s.io/')) return checkInferenceObject(where, doc);
    const Model = models[key];
    if (!Model) return fail(where, `no schema for ${key}`);
    // A patch (kustomize strategic merge) is partial: validated after merging.
    if (file.includes(`${path.sep}cuda${path.sep}`) && path.basename(file).includes('patch')) return;
    try {
      new Model(doc).validate();
    } catch (e) {
      fail(where, e.message.split('\n').slice(0, 6).join(' | '));
    }
  });
}

// Kustomizations: resources and patches exist; image names are used.
const containerImages = new Set();
for (const o of objects)
  for (const c of (((o.doc.spec || {}).template || {}).spec || {}).containers || []) containerImages.add(c.image);
for (const file of walk(k8sDir).filter((f) => path.basename(f) === 'kustomization.yaml')) {
  const rel = path.relative(deployDir, file);
  const k = YAML.parse(fs.readFileSync(file, 'utf8'));
  const dir = path.dirname(file);
  for (const r of k.resources || []) {
    const p = path.join(dir, r);
    if (!fs.existsSync(p)) fail(rel, `resource ${r} does not exist`);
    else if (fs.statSync(p).isDirectory() && !fs.existsSync(path.join(p, 'kustomization.yaml')))
      fail(rel, `resource directory ${r} has no kustomization.yaml`);
  }
  for (const pt of k.patches || []) {
    const p = path.join(dir, pt.path);
    if (!fs.existsSync(p)) { fail(rel, `patch ${pt.path} does not exist`); continue; }
    const patch = YAML.parse(fs.readFileSync(p, 'utf8'));
    const target = objects.find((o) => o.doc.kind === pt.target.kind && o.doc.metadata.name === pt.target.name &&
                                       !o.file.includes(`${path.sep}cuda${path.sep}`));
    if (!target) { fail(rel, `patch target ${pt.target.kind}/${pt.target.name} not found`); continue; }
    // Strategic merge of the containers by name, then validate the result.
    const merged = JSON.parse(JSON.stringify(target.doc));
    const mspec = merged.spec.template.spec;
    const pspec = patch.spec.template.spec;
    for (const [key, val] of Object.entries(pspec)) if (key !== 'containers') mspec[key] = val;
    for (const pc of pspec.containers || []) {
      const c = mspec.containers.find((x) => x.name === pc.name);
      if (!c) { fail(rel, `patch container ${pc.name} not in the target`); continue; }
      Object.assign(c, pc);
    }
    try {
      new models['apps/v1/Deployment'](merged).validate();
    } catch (e) {
      fail(`${rel} (patched ${pt.target.name})`, e.message.split('\n').slice(0, 6).join(' | '));
    }
    const gpu = (mspec.containers[0].resources.limits || {})['nvidia.com/gpu'];
    if (!gpu) fail(rel, 'the CUDA variant must limit nvidia.com/gpu');
  }
  for (const img of k.images || [])
    if (!containerImages.has(img.name)) fail(rel, `images: no container uses image "${img.name}"`);
}

// The Deployment's probes and drain settings (what the issue asks for).
const dep = objects.find((o) => o.doc.kind === 'Deployment' && o.doc.metadata.name === 'ropeserve');
if (!dep) {
  fail('k8s', 'no ropeserve Deployment');
} else {
  const spec = dep.doc.spec.template.spec;
  const c = spec.containers[0];
  if (c.readinessProbe.httpGet.path !== '/ready') fail(dep.where, 'readiness must probe /ready');
  if (c.livenessProbe.httpGet.path !== '/health') fail(dep.where, 'liveness must probe /health');
  // Probes on the admin port, answered whatever the API port's load.
  for (const probe of [c.readinessProbe, c.livenessProbe])
    if (probe.httpGet.port !== 'admin') fail(dep.where, 'probes must use the admin port');
  const scrape = dep.doc.spec.template.metadata.annotations['prometheus.io/port'];
  if (scrape !== '8081') fail(dep.where, 'Prometheus must scrape the admin port (8081)');
  const shutdown = Number((c.env.find((e) => e.name === 'ROPESERVE_SHUTDOWN_TIMEOUT') || {}).value || 30);
  if (!(spec.terminationGracePeriodSeconds > shutdown + 5))
    fail(dep.where, 'terminationGracePeriodSeconds must exceed the preStop pause plus --shutdown-timeout');
  const ports = c.ports.map((p) => p.containerPort).sort();
  if (ports.join() !== '50051,8080,8081') fail(dep.where, 'container ports must be 8080, 8081 (admin) and 50051');
}
const hpa = objects.find((o) => o.doc.kind === 'HorizontalPodAutoscaler');
if (!hpa || hpa.doc.spec.metrics[0].pods.metric.name !== 'ropeserve_num_requests_waiting')
  fail('k8s/base/hpa.yaml', 'the HPA must scale on ropeserve_num_requests_waiting');

// Grafana dashboard: structure (metric names are checked against a live
// /metrics by tests/e2e/serve_e2e.py).
const dashFile = path.join(deployDir, 'grafana/dashboards/ropeserve.json');
try {
  const dash = JSON.parse(fs.readFileSync(dashFile, 'utf8'));
  if (!dash.uid || !dash.title || !Array.isArray(dash.panels) || dash.panels.length === 0)
    fail('dashboard', 'uid, title and panels are required');
  const ids = new Set();
  for (const p of dash.panels) {
    if (ids.has(p.id)) fail('dashboard', `duplicate panel id ${p.id}`);
    ids.add(p.id);
    if (!p.type || !p.title || !p.gridPos || !Array.isArray(p.targets) || p.targets.length === 0)
      fail('dashboard', `panel ${p.id} lacks type, title, gridPos or targets`);
    for (const t of p.targets || []) if (!t.expr || !t.refId) fail('dashboard', `panel ${p.id}: target without expr/refId`);
  }
} catch (e) {
  fail('dashboard', e.message);
}

if (failures) {
  console.error(`${failures} problem(s) in ${deployDir}`);
  process.exit(1);
}
console.log(`deploy/ OK: ${objects.length} Kubernetes objects validated, kustomizations resolved, dashboard well-formed`);
