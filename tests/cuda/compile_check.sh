#!/bin/sh
# Compile-only check of kernels/cuda with nvcc for sm_80 (A100) and sm_90
# (H100/H200), on machines without a GPU. Exit 77 (ctest: skipped) when no
# nvcc is found. The LibTorch glue (kernels/cuda/torch_glue.cc), its GPU
# test (tests/cuda/kernels_test.cc), the decoder with its CUDA op set
# (server/models/{decoder,cuda_decoder_ops}.cc), the runner with its CUDA
# graphs (server/runner/model_runner.cc), its sampler (server/sampler/
# {sampler,device_sampling}.cc) and the service factory's
# device-memory KV sizing are syntax-checked too when
# the LibTorch headers and CUDA headers are there.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=${NVCC:-}
[ -n "$nvcc" ] || nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; } || true
if [ -z "$nvcc" ]; then
  echo "SKIPPED: no nvcc (PATH, \$NVCC or /usr/local/cuda/bin): kernels/cuda not compiled"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$nvcc" --version | tail -1
for f in "$root"/kernels/cuda/*.cu; do
  echo "nvcc sm_80 sm_90: ${f#"$root"/}"
  "$nvcc" -std=c++17 -I"$root" -Werror all-warnings -Xptxas -v \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -c "$f" -o "$out/$(basename "$f").o" >"$out/ptxas.txt" 2>&1 || { cat "$out/ptxas.txt"; exit 1; }
  cat "$out/ptxas.txt" >>"$out/ptxas.log"
done
# Register budgets (issue 57): a kernel named here must stay within its
# registers a thread with no spills; every kernel's figures are printed.
budgets="MmaPartitionKernel:128 Int4MmaKernel:160"
budget_status=0
awk -v budgets="$budgets" '
  BEGIN { n = split(budgets, b, " "); for (i = 1; i <= n; ++i) { split(b[i], kv, ":"); limit[kv[1]] = kv[2] } }
  /Compiling entry function/ { fn = $0; sub(/^.*function .\047?/, "", fn); sub(/\047 for .*$/, "", fn);
                               arch = $NF; gsub(/\047/, "", arch) }
  /spill stores/ { spills = $5 + $9 }
  /Used [0-9]+ registers/ {
    regs = $5; name = fn; printf "ptxas %s %3d registers, %d bytes spilled: %s\n", arch, regs, spills, name
    for (k in limit) if (index(name, k) && (regs > limit[k] || spills > 0)) {
      printf "FAIL: %s is over its budget of %d registers or spills\n", k, limit[k]; bad = 1 }
  }
  END { exit bad }' "$out/ptxas.log" >"$out/budgets.txt" || budget_status=1
if command -v c++filt >/dev/null; then c++filt <"$out/budgets.txt"; else cat "$out/budgets.txt"; fi
[ "$budget_status" = 0 ] || { echo "kernels/cuda: a kernel is over its register budget"; exit 1; }
cuda_inc=$(dirname "$(dirname "$nvcc")")/include
torch_inc=${TORCH_INCLUDE:-/usr/include}
if [ -f "$torch_inc/c10/cuda/CUDAStream.h" ] && [ -f "$cuda_inc/cuda_runtime_api.h" ]; then
  # (-isystem /usr/include would break the C++ headers' #include_next)
  extra=""
  [ "$torch_inc" = /usr/include ] || extra="-isystem $torch_inc"
  # Debian's CPU LibTorch ships c10/cuda without its CMake-generated macros
  # header; a CUDA LibTorch has it. Supply the one line it holds.
  # Debian 13's nvcc is /usr/bin/nvcc, its headers in /usr/include (same rule).
  cuda_isystem=""
  [ "$cuda_inc" = /usr/include ] || cuda_isystem="-isystem $cuda_inc"
  if [ ! -f "$torch_inc/c10/cuda/impl/cuda_cmake_macros.h" ]; then
    mkdir -p "$out/shim/c10/cuda/impl"
    echo "#define C10_CUDA_BUILD_SHARED_LIBS" > "$out/shim/c10/cuda/impl/cuda_cmake_macros.h"
    extra="$extra -isystem $out/shim"
  fi
  # shellcheck disable=SC2086
  # The decoder and its CUDA op set as a CUDA build compiles them.
  for f in kernels/cuda/torch_glue.cc tests/cuda/kernels_test.cc server/models/cuda_decoder_ops.cc \
           server/models/decoder.cc server/serving/service_factory.cc server/serving/decoder_worker.cc \
           bench/offline_bench.cc \
           server/models/encoder_parts.cc server/models/modernbert.cc server/models/roformer.cc \
           server/models/span_model_loader.cc server/runner/model_runner.cc \
           server/sampler/sampler.cc server/sampler/device_sampling.cc server/sampler/logits_summary.cc \
           tests/runner/model_runner_test.cc \
           tests/sampler/device_sampling_test.cc tests/models/decoder_paths_test.cc \
           tests/models/speculative_decoding_test.cc; do
    echo "g++ -fsyntax-only: $f"
    ${CXX:-g++} -std=c++20 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -DROPESERVE_HAVE_CUDA=1 -I"$root" $extra \
      -isystem "$torch_inc/torch/csrc/api/include" $cuda_isystem "$root/$f"
  done
else
  echo "note: LibTorch CUDA headers or CUDA headers missing: torch_glue.cc not checked"
fi
echo "kernels/cuda compile check: OK"
