#!/usr/bin/env bash
# What a running batch costs interactive requests: the same seeded
# interactive workload (`ropeserve loadgen`, streaming /v1/completions) on
# one server, alternately alone and while a Batch API batch runs (lines at
# the engine's lowest priority, --batch-max-in-flight at once), two rounds
# each; then the batch's own throughput. Figures, not assertions.
#   bench/batch_interference.sh [preset] [batch_max_in_flight] [num_requests] [concurrency]
# Models are generated once into ~/.cache/ropeserve/bench/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/${BUILD_DIR:-build}/ropeserve"
PRESET="${1:-qwen2.5-0.5b}"
IN_FLIGHT="${2:-4}"
N="${3:-16}"
C="${4:-2}"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve/bench/$PRESET"
[[ -x "$BIN" ]] || "$ROOT/scripts/build"
[[ -f "$DIR/config.json" ]] || "$BIN" make-model --preset "$PRESET" --out "$DIR"
WORK="$(mktemp -d)"
HTTP=18490
"$BIN" serve --model "$DIR" --dtype bfloat16 --http-port $HTTP --grpc-port -1 --admin-port -1 --host 127.0.0.1 \
  --kv-cache-memory 2G --data-dir "$WORK/data" --batch-max-in-flight "$IN_FLIGHT" > "$WORK/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 600); do
  curl -sf "localhost:$HTTP/ready" > /dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done

# 2,000 summaries-like lines: one shared instruction (the prefix cache
# serves it), a different item each, 64 tokens out: more than the rounds
# take, so the batch runs throughout.
/usr/bin/python3 - "$WORK/batch.jsonl" <<'EOF'
import json, sys
instruction = "Summarize the following support ticket in one sentence for the weekly report. " * 4
with open(sys.argv[1], "w") as f:
    for i in range(2000):
        f.write(json.dumps({"custom_id": f"t{i}", "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": f"{instruction}\nTicket {i}: the printer on floor {i % 7} jams "
                                               f"when printing more than {i % 50 + 2} pages.",
                                     "max_tokens": 64, "temperature": 0, "ignore_eos": True}}) + "\n")
EOF
FILE=$(curl -sf -F purpose=batch -F "file=@$WORK/batch.jsonl" "localhost:$HTTP/v1/files" |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
counts() {
  curl -sf "localhost:$HTTP/v1/batches/$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["request_counts"]["completed"])'
}
interactive=(--port $HTTP --num-requests "$N" --concurrency "$C" --input-len 128 --output-len 32 --json)
for round in 1 2; do
  echo "== round $round: interactive alone"
  # Each round its own prompts (seed): none is in the prefix cache.
  "$BIN" loadgen "${interactive[@]}" --seed "$round" | tee "$WORK/alone-$round.json"
  BATCH=$(curl -sf "localhost:$HTTP/v1/batches" -H 'Content-Type: application/json' \
    -d "{\"input_file_id\":\"$FILE\",\"endpoint\":\"/v1/completions\",\"completion_window\":\"24h\"}" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  sleep 5  # the batch's lines fill their slots
  before=$(counts "$BATCH")
  start=$(date +%s.%N)
  echo "== round $round: interactive while batch $BATCH runs ($IN_FLIGHT lines at once)"
  "$BIN" loadgen "${interactive[@]}" --seed "$((round + 100))" | tee "$WORK/batch-$round.json"
  after=$(counts "$BATCH")
  end=$(date +%s.%N)
  /usr/bin/python3 -c "print(f'batch lines done during the round: {$after - $before} in {$end - $start:.1f} s ({($after - $before) / ($end - $start):.2f} lines/s, {64 * ($after - $before) / ($end - $start):.1f} output tokens/s)')"
  curl -sf -X POST "localhost:$HTTP/v1/batches/$BATCH/cancel" -d '' > /dev/null
  for _ in $(seq 1 300); do
    [[ "$(curl -sf "localhost:$HTTP/v1/batches/$BATCH" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')" == cancelled ]] && break
    sleep 0.2
  done
done
/usr/bin/python3 - "$WORK" <<'EOF'
import json, os, sys
work = sys.argv[1]
def load(name):
    return json.load(open(os.path.join(work, name)))
def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2
print("\nmedians of the two rounds (interactive requests; ms, output_tok_s in tokens/s):")
print(f"{'':26}{'alone':>10}{'with batch':>12}{'ratio':>8}")
alone = [load(f"alone-{r}.json") for r in (1, 2)]
batch = [load(f"batch-{r}.json") for r in (1, 2)]
for key in sorted(alone[0]):
    if not key.endswith("_ms") and key != "output_tok_s":
        continue
    a, b = median([x[key] for x in alone]), median([x[key] for x in batch])
    print(f"{key:26}{a:10.1f}{b:12.1f}{(b / a if a else 0):8.2f}")
EOF
kill -TERM $pid
wait $pid || true
