#!/usr/bin/env bash
# Builds keel on a GPU machine without internet, against the LibTorch of a
# given Python (default /opt/torch/.venv) and the deps packed by
# scripts/pack_offline_deps.sh, then runs the GPU tests, the CPU tests, and a
# short CUDA training run. Results go to ${OUT:-gpu-results}.
#   scripts/gpu_check.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-/opt/torch/.venv/bin/python}
deps=$PWD/offline-deps
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
[ -d "$deps" ] || { echo "missing $deps: run scripts/pack_offline_deps.sh where the packages are"; exit 2; }
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_TORCH_PYTHON="$py" \
      -DCMAKE_PREFIX_PATH="$deps" 2>&1 | grep -E "keel:|Error|error" | tee "$out/configure.txt"
cmake --build build-gpu -j"$(nproc)" > "$out/build.txt" 2>&1 || { tail -50 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$out/timings.txt"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.txt" | tail -15
ctest --test-dir build-gpu -LE gpu -j"$(nproc)" --timeout 300 2>&1 | tee "$out/ctest-cpu.txt" | tail -8
./build-gpu/keel train configs/default.yaml --set train.device=cuda --set run.out_dir="$out/runs" \
    --set run.name=default-cuda --set data.dir="$out/data" --set train.max_steps=300 2>&1 \
    | tee "$out/train-cuda.txt" | grep -E "device|step +(100|200|300)/|summary"
