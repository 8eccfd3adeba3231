#!/usr/bin/env bash
# ropeserve against llama.cpp on the same weights, on this machine, in one
# run: the workloads alternate (llama.cpp, then ropeserve) for ROUNDS
# rounds, so that both see the same moments of a noisy VM. Not run in CI.
#
#   bench/vs_llamacpp.sh LLAMA_CPP_DIR [MODEL_DIR]
#
# LLAMA_CPP_DIR: a llama.cpp source tree outside this repository (never
# vendored). Only llama-bench, llama-batched-bench and llama-quantize are
# built there (CPU only, into LLAMA_CPP_DIR/build) if they are missing.
# Without internet, node-llama-cpp's npm package carries a llama.cpp
# snapshot as a git bundle:
#   npm pack node-llama-cpp@3.22.1 && tar xzf node-llama-cpp-3.22.1.tgz \
#     package/llama/gitRelease.bundle && git clone package/llama/gitRelease.bundle llama.cpp
# LLAMA_BUILD (default LLAMA_CPP_DIR/build) is where they are built
# (GGML_NATIVE=ON, plus LLAMA_CMAKE_ARGS). LLAMA_BATCHED_BUILD (default
# LLAMA_BUILD) is a second build for the b16 / b32 rows only: on a CPU that
# reports AMX a native build takes llama.cpp's AMX path for Q4_0 (1.8x its
# AVX-512 path at one sequence on this machine), whose batched runs died
# here (SIGSEGV at ldtilecfg in ggml_backend_amx_mul_mat), so the batched
# rows need a build without it, e.g. LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF
# -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
# -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
# -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON" into another LLAMA_BUILD.
# MODEL_DIR: a Hugging Face checkpoint (default: the qwen2.5-0.5b bench
# preset, random weights, generated once into ~/.cache/ropeserve/bench/).
# Its BF16 GGUF (bench/gguf_from_checkpoint.py with that tree's gguf-py)
# and a Q8_0 GGUF (llama-quantize) go to ~/.cache/ropeserve/llamacpp/.
#
# ISA (default native): avx2 measures the AVX2 pair on any x86 CPU that has
# AVX2 (an AVX-512 developer machine included): ropeserve with
# --kernel-isa avx2 (ROPESERVE_KERNEL_ISA), llama.cpp built without
# GGML_NATIVE, with AVX / AVX2 / FMA / F16C / BMI2 and every AVX-512, VNNI
# and AMX option off, into LLAMA_CPP_DIR/build-avx2 (unless LLAMA_BUILD or
# LLAMA_CMAKE_ARGS say otherwise). F32=1 adds float32 batch-1 decode
# (ropeserve --dtype float32 vs llama.cpp's F32 GGUF).
#
# Workloads (THREADS threads, default 2; ROUNDS, default 2):
#   tg128      one sequence, decode tok/s: llama-bench -p 0 -n 128 vs
#              ropeserve bench --batch1-tokens 128 (after a 16-token prompt)
#   tg128 int8 the same, llama.cpp Q8_0 vs ropeserve --quantization int8
#   tg128 int4 the same, llama.cpp Q4_0 and Q4_K_M (llama-quantize's
#              defaults: its output/LM head at 6 bits) vs ropeserve
#              --quantization int4 (groups of 128, int8 LM head) and
#              int4-all (the LM head at 4 bits too)
#   pp512      one 512-token prompt, tok/s: llama-bench -p 512 -n 0 vs
#              ropeserve bench --prefill-tokens 512
#   b16, b32   16 / 32 sequences of 128 prompt + 128 generated tokens,
#              output tok/s end to end: llama-batched-bench -npp 128
#              -ntg 128 -npl N -fa on (B*TG / T) vs ropeserve bench
#              --num-requests N --concurrency N --input-len 128 --output-len 128
#   b16/b32 int4  the same, llama.cpp Q4_0 vs ropeserve --quantization int4
#   logit error  (once) max |logits - unquantized logits| / max |unquantized
#              logits| over the int4 run's prompt (its ids, every position):
#              ropeserve int8 / int4 against its bf16 model, and llama.cpp
#              Q8_0 / Q4_0 / Q4_K_M against its BF16 GGUF on the same ids
#              (bench/llamacpp_logits.cc, compiled against LLAMA_CPP_DIR and
#              the batched build's libllama)
# Prints one line per measurement, then a table of medians and ratios.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/${BUILD_DIR:-build}/ropeserve"
LLAMA="${1:?usage: bench/vs_llamacpp.sh LLAMA_CPP_DIR [MODEL_DIR]}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/ropeserve"
MODEL="${2:-$CACHE/bench/qwen2.5-0.5b}"
ROUNDS="${ROUNDS:-2}"
THREADS="${THREADS:-2}"
ISA="${ISA:-native}"
[[ -f "$LLAMA/CMakeLists.txt" && -d "$LLAMA/gguf-py" ]] || { echo "not a llama.cpp source tree: $LLAMA" >&2; exit 2; }
case "$ISA" in
  native) ;;
  avx2)
    export ROPESERVE_KERNEL_ISA=avx2
    LLAMA_BUILD="${LLAMA_BUILD:-$LLAMA/build-avx2}"
    LLAMA_CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF}"
    ;;
  *) echo "ISA: native or avx2" >&2; exit 2 ;;
esac
[[ "$ROUNDS" =~ ^[1-9][0-9]?$ && "$THREADS" =~ ^[1-9][0-9]?$ ]] || { echo "ROUNDS and THREADS: 1-99" >&2; exit 2; }

[[ -x "$BIN" ]] || "$ROOT/scripts/build"
if [[ ! -f "$MODEL/config.json" ]]; then
  [[ $# -lt 2 ]] || { echo "no config.json in $MODEL" >&2; exit 2; }
  "$BIN" make-model --preset qwen2.5-0.5b --out "$MODEL"
fi
/usr/bin/python3 -c 'import numpy' 2>/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-numpy >/dev/null
LLAMA_BUILD="${LLAMA_BUILD:-$LLAMA/build}"
LB="$LLAMA_BUILD/bin"
if [[ ! -x "$LB/llama-bench" || ! -x "$LB/llama-batched-bench" || ! -x "$LB/llama-quantize" ]]; then
  # shellcheck disable=SC2086  # LLAMA_CMAKE_ARGS: words on purpose
  cmake -S "$LLAMA" -B "$LLAMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    ${LLAMA_CMAKE_ARGS:-} >/dev/null
  ninja -C "$LLAMA_BUILD" llama-bench llama-batched-bench llama-quantize >/dev/null
fi
LBB="${LLAMA_BATCHED_BUILD:-$LLAMA_BUILD}/bin"
[[ -x "$LBB/llama-batched-bench" ]] || { echo "no llama-batched-bench in $LBB" >&2; exit 2; }
# Against the batched build's libllama: it runs many tokens per batch too.
LOGITS="$LBB/ropeserve-llamacpp-logits"
if [[ ! -x "$LOGITS" || "$ROOT/bench/llamacpp_logits.cc" -nt "$LOGITS" ]]; then
  g++ -O2 -std=c++17 -I"$LLAMA/include" -I"$LLAMA/ggml/include" "$ROOT/bench/llamacpp_logits.cc" -L"$LBB" -lllama \
    -Wl,-rpath,"$LBB" -o "$LOGITS"
fi

NAME="$(basename "$MODEL")"
mkdir -p "$CACHE/llamacpp"
BF16="$CACHE/llamacpp/$NAME-bf16.gguf"
Q8="$CACHE/llamacpp/$NAME-q8_0.gguf"
Q4_0="$CACHE/llamacpp/$NAME-q4_0.gguf"
Q4_K_M="$CACHE/llamacpp/$NAME-q4_k_m.gguf"
if [[ ! -f "$BF16" || "$MODEL/config.json" -nt "$BF16" ]]; then
  PYTHONPATH="$LLAMA/gguf-py" /usr/bin/python3 "$ROOT/bench/gguf_from_checkpoint.py" "$MODEL" "$BF16.tmp"
  mv "$BF16.tmp" "$BF16"
  rm -f "$Q8" "$Q4_0" "$Q4_K_M"
fi
[[ -f "$Q8" ]] || "$LB/llama-quantize" "$BF16" "$Q8" Q8_0 "$THREADS" >/dev/null 2>&1
[[ -f "$Q4_0" ]] || "$LB/llama-quantize" "$BF16" "$Q4_0" Q4_0 "$THREADS" >/dev/null 2>&1
[[ -f "$Q4_K_M" ]] || "$LB/llama-quantize" "$BF16" "$Q4_K_M" Q4_K_M "$THREADS" >/dev/null 2>&1
F32_GGUF="$CACHE/llamacpp/$NAME-f32.gguf"
[[ "${F32:-0}" != 1 || -f "$F32_GGUF" ]] || "$LB/llama-quantize" "$BF16" "$F32_GGUF" F32 "$THREADS" >/dev/null 2>&1

RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT
record() { echo "$1 $2 $3" | tee -a "$RESULTS"; }  # workload system value
llama_bench() {  # GGUF -p N -n N -> tok/s
  "$LB/llama-bench" -m "$1" -t "$THREADS" -p "$2" -n "$3" -r 1 -o json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
rs_bench() {  # ropeserve bench ARGS... -> the JSON object
  ROPESERVE_THREADS="$THREADS" "$BIN" bench --model "$MODEL" --dtype bf16 --json "$@" 2>/dev/null
}
field() { /usr/bin/python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

for round in $(seq "$ROUNDS"); do
  echo "# round $round"
  record tg128 llama.cpp-bf16 "$(llama_bench "$BF16" 0 128)"
  out="$(rs_bench --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 --batch1-tokens 128 \
         --prefill-tokens 512 --max-model-len 1024)"
  record tg128 ropeserve-bf16 "$(field 'd["batch1"]["decode_tok_s"]' <<<"$out")"
  record roofline-fraction ropeserve-bf16 "$(field 'd["batch1"]["bandwidth_fraction"]' <<<"$out")"
  record pp512 ropeserve-bf16 "$(field 'd["prefill"]["tok_s"]' <<<"$out")"
  record pp512 llama.cpp-bf16 "$(llama_bench "$BF16" 512 0)"
  if [[ "${F32:-0}" == 1 ]]; then
    record tg128-f32 llama.cpp-f32 "$(llama_bench "$F32_GGUF" 0 128)"
    record tg128-f32 ropeserve-f32 "$(field 'd["batch1"]["decode_tok_s"]' <<<"$(ROPESERVE_THREADS="$THREADS" "$BIN" bench \
           --model "$MODEL" --dtype float32 --json --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 \
           --batch1-tokens 128 --max-model-len 1024 2>/dev/null)")"
  fi
  record tg128-int8 llama.cpp-q8_0 "$(llama_bench "$Q8" 0 128)"
  out="$(rs_bench --quantization int8 --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 \
         --batch1-tokens 128 --max-model-len 1024)"
  record tg128-int8 ropeserve-int8 "$(field 'd["batch1"]["decode_tok_s"]' <<<"$out")"
  [[ $round == 1 ]] && out8="$out"
  record tg128-int8 ropeserve-bf16-same-round "$(field 'd["batch1"]["decode_tok_s"]' \
         <<<"$(rs_bench --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 --batch1-tokens 128 \
               --max-model-len 1024)")"
  record tg128-int4 llama.cpp-q4_0 "$(llama_bench "$Q4_0" 0 128)"
  record tg128-int4 llama.cpp-q4_k_m "$(llama_bench "$Q4_K_M" 0 128)"
  out="$(rs_bench --quantization int4 --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 \
         --batch1-tokens 128 --max-model-len 1024)"
  record tg128-int4 ropeserve-int4 "$(field 'd["batch1"]["decode_tok_s"]' <<<"$out")"
  [[ $round == 1 ]] && out4="$out"
  out="$(rs_bench --quantization int4-all --num-requests 1 --concurrency 1 --input-len 16 --output-len 1 \
         --batch1-tokens 128 --max-model-len 1024)"
  record tg128-int4 ropeserve-int4-all "$(field 'd["batch1"]["decode_tok_s"]' <<<"$out")"
  [[ $round == 1 ]] && out4all="$out"
  for n in 16 32; do
    for q in bf16 int4; do
      gguf="$BF16" ours=()
      [[ $q == int4 ]] && gguf="$Q4_0" ours=(--quantization int4)
      "$LBB/llama-batched-bench" -m "$gguf" -c $((n * 256)) -b 2048 -ub 512 -npp 128 -ntg 128 -npl "$n" \
        -t "$THREADS" -fa on --output-format jsonl 2>/dev/null | grep '^{' >"$RESULTS.l"
      record "b$n-$q" "llama.cpp-$([[ $q == int4 ]] && echo q4_0 || echo bf16)" \
        "$(field 'd["pl"] * d["tg"] / d["t"]' <"$RESULTS.l")"
      rm -f "$RESULTS.l"
      record "b$n-$q" "ropeserve-$q" "$(rs_bench "${ours[@]}" --num-requests "$n" --concurrency "$n" \
        --input-len 128 --output-len 128 --batch1-tokens 0 --max-model-len 512 | field 'd["throughput_tok_s"]')"
    done
  done
done

# Quantization error on the int4 run's prompt, both implementations.
record logit-error ropeserve-int8 "$(field 'd["relative_logit_error"]["vs_unquantized"]' <<<"$out8")"
record logit-error ropeserve-int4 "$(field 'd["relative_logit_error"]["vs_unquantized"]' <<<"$out4")"
record logit-error ropeserve-int4-all "$(field 'd["relative_logit_error"]["vs_unquantized"]' <<<"$out4all")"
ids="$(field '",".join(map(str, d["relative_logit_error"]["prompt_ids"]))' <<<"$out4")"
"$LOGITS" "$BF16" "$THREADS" "$ids" >"$RESULTS.bf16"
for gguf in "$Q8" "$Q4_0" "$Q4_K_M"; do
  q="${gguf##*-}" && q="${q%.gguf}"  # q8_0, q4_0, q4_k_m
  "$LOGITS" "$gguf" "$THREADS" "$ids" >"$RESULTS.q"
  record logit-error "llama.cpp-$q" "$(/usr/bin/python3 -c 'import numpy as np, sys
a, b = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
print(float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))' "$RESULTS.q" "$RESULTS.bf16")"
done
rm -f "$RESULTS.bf16" "$RESULTS.q"

echo "# ISA $ISA, ${THREADS} threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
/usr/bin/python3 - "$RESULTS" <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    w, s, v = line.split()
    vals.setdefault((w, s), []).append(float(v))
med = {k: statistics.median(v) for k, v in vals.items()}
print("\nworkload       ropeserve     llama.cpp     ratio  (medians; ratio per round)")
for w, ours, theirs in [("tg128", "ropeserve-bf16", "llama.cpp-bf16"), ("pp512", "ropeserve-bf16", "llama.cpp-bf16"),
                        ("tg128-int8", "ropeserve-int8", "llama.cpp-q8_0"),
                        ("tg128-int4", "ropeserve-int4", "llama.cpp-q4_0"),
                        ("tg128-int4", "ropeserve-int4", "llama.cpp-q4_k_m"),
                        ("tg128-int4", "ropeserve-int4-all", "llama.cpp-q4_0"),
                        ("tg128-int4", "ropeserve-int4-all", "llama.cpp-q4_k_m"),
                        ("b16-bf16", "ropeserve-bf16", "llama.cpp-bf16"), ("b32-bf16", "ropeserve-bf16", "llama.cpp-bf16"),
                        ("b16-int4", "ropeserve-int4", "llama.cpp-q4_0"), ("b32-int4", "ropeserve-int4", "llama.cpp-q4_0"),
                        ("tg128-f32", "ropeserve-f32", "llama.cpp-f32")]:
    if (w, ours) not in vals:
        continue
    a, b = vals[(w, ours)], vals[(w, theirs)]
    rounds = " ".join("%.2f" % (x / y) for x, y in zip(a, b))
    label = w + ("-all" if ours.endswith("-all") else "")
    print("%-14s %7.1f %13.1f %9.2fx  (%s; vs %s)" % (label, med[(w, ours)], med[(w, theirs)], med[(w, ours)] / med[(w, theirs)],
                                                        rounds, theirs))
i8, bf = vals[("tg128-int8", "ropeserve-int8")], vals[("tg128-int8", "ropeserve-bf16-same-round")]
print("int8 / bf16 batch-1 (ropeserve, same round): %s" % " ".join("%.2fx" % (x / y) for x, y in zip(i8, bf)))
print("bf16 batch-1 / read-bandwidth roofline: %s" % " ".join("%.2f" % x for x in vals[("roofline-fraction", "ropeserve-bf16")]))
print("relative logit error vs the unquantized model, int4 run's prompt: ropeserve int8 %.3g, int4 %.3g, "
      "int4-all %.3g; llama.cpp Q8_0 %.3g, Q4_0 %.3g, Q4_K_M %.3g" % tuple(
          vals[("logit-error", s)][0] for s in ("ropeserve-int8", "ropeserve-int4", "ropeserve-int4-all",
                                                 "llama.cpp-q8_0", "llama.cpp-q4_0", "llama.cpp-q4_k_m")))
PY
