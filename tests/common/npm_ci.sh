#!/usr/bin/env bash
# Installs the npm packages pinned by SRC/package.json and its lockfile
# SRC/package-lock.json into the cache folder DEST with `npm ci` (exactly
# the locked versions, integrity-checked), again only when the lockfile
# changed or the last install did not finish.
#   tests/common/npm_ci.sh tests/clients ~/.cache/ropeserve/npm-clients
set -euo pipefail
SRC="$1"
DEST="$2"
mkdir -p "$DEST"
if ! cmp -s "$SRC/package-lock.json" "$DEST/.installed-lock.json" || [[ ! -d "$DEST/node_modules" ]]; then
  rm -f "$DEST/.installed-lock.json"
  cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
  (cd "$DEST" && npm ci --silent --no-audit --no-fund)
  cp "$SRC/package-lock.json" "$DEST/.installed-lock.json"
fi
