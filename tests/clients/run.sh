#!/usr/bin/env bash
# Real clients against a running ropeserve: installs the pinned npm packages
# (package-lock.json, with npm ci) once into the cache, then clients_e2e.py starts the servers
# and runs clients.test.mjs with `node --test`.
#   tests/clients/run.sh build/ropeserve
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BINARY="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
NPM_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/npm-clients"
"$HERE/../common/npm_ci.sh" "$HERE" "$NPM_DIR"
NODE_MODULES_DIR="$NPM_DIR/node_modules" exec /usr/bin/python3 "$HERE/clients_e2e.py" --binary "$BINARY"
