// Two pieces of Kubernetes semantics the deploy/ checks need, written out
// because no package in reach implements them offline:
// - smp: a strategic merge patch as kustomize applies one to the objects
//   used here (maps merge, `null` deletes a field, lists of objects with a
//   `name` merge by name, other lists are replaced);
// - checkRestricted: the "restricted" Pod Security Standard
//   (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
//   for one pod spec; returns the violations.

const isMap = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

export function smp(target, patch) {
  if (!isMap(target) || !isMap(patch)) return patch;
  const out = { ...target };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) {
      delete out[key];
    } else if (Array.isArray(value) && Array.isArray(out[key]) && value.every((v) => isMap(v) && 'name' in v)) {
      const merged = out[key].map((v) => ({ ...v }));
      for (const item of value) {
        const i = merged.findIndex((m) => m.name === item.name);
        if (i < 0) merged.push(smp({}, item));
        else merged[i] = smp(merged[i], item);
      }
      out[key] = merged;
    } else {
      out[key] = smp(out[key], value);
    }
  }
  return out;
}

const kAllowedVolumes = new Set(['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim',
  'projected', 'secret']);

export function checkRestricted(spec) {
  const problems = [];
  const pod = spec.securityContext || {};
  for (const host of ['hostNetwork', 'hostPID', 'hostIPC']) if (spec[host]) problems.push(`${host} is set`);
  for (const v of spec.volumes || []) {
    const type = Object.keys(v).find((k) => k !== 'name');
    if (!kAllowedVolumes.has(type)) problems.push(`volume ${v.name} is a ${type} volume`);
  }
  const containers = [...(spec.initContainers || []), ...(spec.containers || [])];
  for (const c of containers) {
    const sc = c.securityContext || {};
    const where = `container ${c.name}`;
    if (sc.privileged) problems.push(`${where} is privileged`);
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${where}: allowPrivilegeEscalation must be false`);
    const caps = sc.capabilities || {};
    if (!(caps.drop || []).includes('ALL')) problems.push(`${where}: capabilities must drop ALL`);
    for (const add of caps.add || []) if (add !== 'NET_BIND_SERVICE') problems.push(`${where} adds capability ${add}`);
    const nonRoot = sc.runAsNonRoot !== undefined ? sc.runAsNonRoot : pod.runAsNonRoot;
    if (nonRoot !== true) problems.push(`${where}: runAsNonRoot must be true`);
    const user = sc.runAsUser !== undefined ? sc.runAsUser : pod.runAsUser;
    if (user === 0) problems.push(`${where} runs as user 0`);
    const seccomp = (sc.seccompProfile || pod.seccompProfile || {}).type;
    if (!['RuntimeDefault', 'Localhost'].includes(seccomp)) problems.push(`${where}: seccompProfile must be RuntimeDefault`);
    for (const p of c.ports || []) if (p.hostPort) problems.push(`${where} uses hostPort ${p.hostPort}`);
  }
  return problems;
}
