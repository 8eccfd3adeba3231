// What the client test files share: the pinned npm packages (installed by
// run.sh into NODE_MODULES_DIR), the servers' addresses from clients_e2e.py,
// and checks against docs/openapi.json's schemas (ajv, JSON Schema 2020-12).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const nodeModules = process.env.NODE_MODULES_DIR;
export const require = createRequire(path.join(nodeModules, 'noop.js'));
export const load = (p) => import(pathToFileURL(path.join(nodeModules, p)).href);
export const HTTP = process.env.RS_HTTP;
export const ROOT = process.env.RS_ROOT;

// The OpenAPI document, an ajv instance holding it as 'openapi', and
// conforms(schemaName, value): an assertion that `value` matches
// components/schemas/<schemaName>.
export function openApi() {
  const doc = JSON.parse(fs.readFileSync(path.join(ROOT, 'docs/openapi.json'), 'utf8'));
  const Ajv2020 = require('ajv/dist/2020').default;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  ajv.addSchema(doc, 'openapi');
  const conforms = (schemaName, value) => {
    const validate = ajv.getSchema(`openapi#/components/schemas/${schemaName}`);
    assert.ok(validate, `no schema ${schemaName}`);
    assert.ok(validate(value), `${schemaName}: ${JSON.stringify(validate.errors)}\n${JSON.stringify(value).slice(0, 500)}`);
  };
  return { doc, ajv, conforms };
}
