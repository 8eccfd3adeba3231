#!/usr/bin/env bash
# Validates deploy/ offline: yamllint on every YAML file, `docker-compose
# config` on the compose file, and validate_deploy.mjs (Kubernetes schemas,
# kustomizations, dashboard). npm packages (package-lock.json) are installed once into the cache.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
yamllint -c "$HERE/yamllint.yaml" deploy/
docker-compose -f deploy/compose.yaml config -q
NPM_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/npm-deploy"
"$HERE/../common/npm_ci.sh" "$HERE" "$NPM_DIR"
NODE_MODULES_DIR="$NPM_DIR/node_modules" node "$HERE/validate_deploy.mjs" deploy
