#!/usr/bin/env bash
# Serving overhead: the same seeded workload through the engine in-process
# (`ropeserve bench`) and through a running `ropeserve serve` over REST (SSE)
# and gRPC (`ropeserve loadgen`), one after the other on this machine.
#   bench/serving_overhead.sh [preset] [num_requests] [concurrency] [input_len] [output_len]
# Models are generated once into ~/.cache/ropeserve/bench/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/${BUILD_DIR:-build}/ropeserve"
PRESET="${1:-qwen2.5-0.5b}"
N="${2:-32}"
C="${3:-8}"
IN="${4:-128}"
OUT="${5:-64}"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/bench/$PRESET"
[[ -x "$BIN" ]] || "$ROOT/scripts/build"
[[ -f "$DIR/config.json" ]] || "$BIN" make-model --preset "$PRESET" --out "$DIR"
work=(--num-requests "$N" --concurrency "$C" --input-len "$IN" --output-len "$OUT" --seed 7)

echo "== ropeserve bench (in-process engine)"
"$BIN" bench --model "$DIR" "${work[@]}" --dtype bfloat16 --batch1-tokens 0 --kv-cache-memory 2G --json

HTTP=18480
GRPC=18481
"$BIN" serve --summarizer "$DIR" --dtype bfloat16 --http-port $HTTP --grpc-port $GRPC --host 127.0.0.1 \
  --kv-cache-memory 2G --no-enable-prefix-caching > /tmp/ropeserve-overhead.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "localhost:$HTTP/ready" > /dev/null && break
  kill -0 $pid 2>/dev/null || { cat /tmp/ropeserve-overhead.log; exit 1; }
  sleep 0.2
done
echo "== ropeserve loadgen --protocol rest (SSE)"
"$BIN" loadgen --protocol rest --port $HTTP "${work[@]}" --json
echo "== ropeserve loadgen --protocol grpc (Generate stream)"
"$BIN" loadgen --protocol grpc --port $GRPC "${work[@]}" --json
kill -TERM $pid
wait $pid
