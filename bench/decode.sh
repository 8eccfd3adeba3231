#!/usr/bin/env bash
# Single-sequence decode speed of the contiguous-KV-cache path on a random
# model of a real model's shape. Prints one line per configuration.
#   bench/decode.sh [preset] [prompt_tokens] [new_tokens]
# Models are generated once into ~/.cache/ropeserve/bench/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/${BUILD_DIR:-build}/ropeserve"
PRESET="${1:-qwen2.5-0.5b}"
PROMPT="${2:-128}"
NEW="${3:-64}"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/bench/$PRESET"
[[ -x "$BIN" ]] || "$ROOT/scripts/build"
[[ -f "$DIR/config.json" ]] || "$BIN" make-model --preset "$PRESET" --out "$DIR"
ids=$(seq -s, 1 "$PROMPT")
printf '%-14s %-9s %-8s %14s %16s\n' preset dtype threads prefill_tok/s decode_tok/s
for dtype in bfloat16 float32; do
  for threads in 1 "$(nproc)"; do
    out=$("$BIN" --threads "$threads" generate --model "$DIR" --prompt-ids "$ids" --max-tokens "$NEW" \
          --ignore-eos --dtype "$dtype" --json)
    /usr/bin/env python3 - "$out" "$PRESET" "$dtype" "$threads" "$PROMPT" <<'PY'
import json, sys
t = json.loads(sys.argv[1])["timing"]
print("%-14s %-9s %-8s %14.1f %16.2f" % (sys.argv[2], sys.argv[3], sys.argv[4],
      int(sys.argv[5]) / t["prefill_seconds"], t["decode_tokens_per_second"]))
PY
  done
done
