#!/usr/bin/env bash
# Validates deploy/ offline: yamllint on every YAML file, `docker-compose
# config` on the compose file, and validate_deploy.mjs (Kubernetes schemas,
# kustomizations, dashboard). npm packages are installed once into the cache.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
yamllint -c "$HERE/yamllint.yaml" deploy/
docker-compose -f deploy/compose.yaml config -q
NPM_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/npm-deploy"
mkdir -p "$NPM_DIR"
if ! cmp -s "$HERE/package.json" "$NPM_DIR/package.json" || [[ ! -d "$NPM_DIR/node_modules" ]]; then
  cp "$HERE/package.json" "$NPM_DIR/package.json"
  (cd "$NPM_DIR" && npm install --silent --no-audit --no-fund)
fi
NODE_MODULES_DIR="$NPM_DIR/node_modules" node "$HERE/validate_deploy.mjs" deploy
