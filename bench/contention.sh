#!/usr/bin/env bash
# What a busy neighbour costs: batch-1 decode and one /v1/embeddings
# request of 256 short texts, at default settings (no --threads: the CPUs
# this process may use), quiet and then with a busy loop on one core beside
# them, alternating for ROUNDS rounds; prints each figure and the busy /
# quiet ratio (issue 56 asks >= 0.5). Figures, not assertions; not run in CI.
#   bench/contention.sh                        # decode bf16 + int4, embeddings
#   LLAMA_BENCH=/path/llama-bench GGUF=m.gguf bench/contention.sh  # + llama.cpp's decode, same loop
# Models are generated once into ~/.cache/ropeserve/bench/: the
# qwen2.5-0.5b preset (random weights) and a ModernBERT embedder (hidden
# EMBED_HIDDEN, default 384, EMBED_LAYERS 6, 6 heads).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/${BUILD_DIR:-build}/ropeserve"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/bench"
ROUNDS="${ROUNDS:-2}"
HIDDEN="${EMBED_HIDDEN:-384}"
LAYERS="${EMBED_LAYERS:-6}"
[[ -x "$BIN" ]] || "$ROOT/scripts/build"
DEC="$CACHE/qwen2.5-0.5b"
EMB="$CACHE/embed-modernbert-h$HIDDEN-l$LAYERS"
[[ -f "$DEC/config.json" ]] || "$BIN" make-model --preset qwen2.5-0.5b --out "$DEC"
[[ -f "$EMB/config.json" ]] || "$BIN" make-model --embedding --qa-arch modernbert --hidden-size "$HIDDEN" \
  --intermediate-size $((HIDDEN * 3 / 2)) --layers "$LAYERS" --heads 6 --out "$EMB"
unset ROPESERVE_THREADS

WORK="$(mktemp -d)"
busy=""
stop_busy() { [[ -z "$busy" ]] || { kill "$busy" 2>/dev/null || true; wait "$busy" 2>/dev/null || true; busy=""; }; }
server=""
trap 'stop_busy; [[ -z "$server" ]] || kill "$server" 2>/dev/null || true; rm -rf "$WORK"' EXIT
start_busy() { sh -c 'while :; do :; done' & busy=$!; sleep 0.5; }

decode() {  # quantization -> tok/s
  "$BIN" bench --model "$DEC" --dtype bf16 --quantization "$1" --json --num-requests 1 --concurrency 1 \
    --input-len 16 --output-len 1 --batch1-tokens 64 --max-model-len 512 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["batch1"]["decode_tok_s"])'
}

HTTP=18571
"$BIN" serve --encoder "$EMB" --http-port $HTTP --grpc-port -1 --admin-port -1 --host 127.0.0.1 \
  --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do
  curl -sf "localhost:$HTTP/ready" >/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done
/usr/bin/python3 -c '
import json
texts = ["sentence number %d about the council vote on bike lanes downtown" % i for i in range(256)]
print(json.dumps({"model": "embed", "input": texts}))' >"$WORK/embed.json"
MODEL_NAME="$(curl -sf "localhost:$HTTP/v1/models" | /usr/bin/python3 -c '
import json, sys
ids = [m["id"] for m in json.load(sys.stdin)["data"]]
print(next((i for i in ids if "embed" in i), ids[-1]))')"
sed -i "s/\"model\": \"embed\"/\"model\": \"$MODEL_NAME\"/" "$WORK/embed.json"
embed() {  # -> seconds for the request
  curl -sf -o /dev/null -w '%{time_total}' "localhost:$HTTP/v1/embeddings" -H 'Content-Type: application/json' \
    -d @"$WORK/embed.json"
}
embed >/dev/null  # warm

RESULTS="$WORK/results"
record() { echo "$1 $2 $3" | tee -a "$RESULTS"; }
for round in $(seq "$ROUNDS"); do
  echo "# round $round"
  for state in quiet busy; do
    [[ $state == busy ]] && start_busy
    record decode-bf16 "$state" "$(decode none)"
    record decode-int4 "$state" "$(decode int4)"
    record embeddings-256-s "$state" "$(embed)"
    if [[ -n "${LLAMA_BENCH:-}" ]]; then
      record llama.cpp-decode "$state" "$("$LLAMA_BENCH" -m "$GGUF" -p 0 -n 64 -r 1 -o json 2>/dev/null |
        /usr/bin/python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)[0]["avg_ts"])')"
    fi
    stop_busy
  done
done
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs, kernels $(curl -sf "localhost:$HTTP/v1/info" | /usr/bin/python3 -c 'import json, sys; k = json.load(sys.stdin)["kernels"]; print(k["isa"])')"
/usr/bin/python3 - "$RESULTS" <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    w, s, v = line.split()
    vals.setdefault((w, s), []).append(float(v))
print("workload            quiet      busy   busy/quiet (throughput; medians)")
for w in sorted({w for w, _ in vals}):
    q, b = statistics.median(vals[(w, "quiet")]), statistics.median(vals[(w, "busy")])
    ratio = q / b if w.endswith("-s") else b / q  # seconds: invert
    print("%-18s %8.2f %9.2f %9.2f" % (w, q, b, ratio))
PY
