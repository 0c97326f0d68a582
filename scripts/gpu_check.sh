#!/usr/bin/env bash
# Builds keel on a GPU machine without internet, against the LibTorch of a
# given Python (default /opt/torch/.venv) and the deps packed by
# scripts/pack_offline_deps.sh, then runs the GPU tests (CTest label gpu), a
# short CUDA training run, the NCCL path on one GPU and the speed benchmarks.
# Results go to ${OUT:-gpu-results}; timings.txt has the time of each part.
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
t_start=$t0
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_TORCH_PYTHON="$py" \
      -DCMAKE_PREFIX_PATH="$deps" 2>&1 | grep -E "keel:|Error|error" | tee "$out/configure.txt"
cmake --build build-gpu -j"$(nproc)" > "$out/build.txt" 2>&1 || { tail -50 "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$out/timings.txt"
# A failure is reported and the rest still runs (one GPU session is short);
# the script's exit status says whether anything failed.
failed=()
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.txt" | tail -15 || failed+=(gpu-tests)
# The CPU tests run in CI on every change; CPU_TESTS=1 runs them here too
# (about 2 minutes on 16 cores), outside the 8-minute budget of the rest.
if [[ ${CPU_TESTS:-0} != 0 ]]; then
  ctest --test-dir build-gpu -LE gpu -j"$(nproc)" --timeout 300 2>&1 | tee "$out/ctest-cpu.txt" | tail -8 \
      || failed+=(cpu-tests)
fi
./build-gpu/keel train configs/default.yaml --set train.device=cuda --set run.out_dir="$out/runs" \
    --set run.name=default-cuda --set data.dir="$out/data" --set train.max_steps=300 2>&1 \
    | tee "$out/train-cuda.txt" | grep -E "device|step +(100|200|300)/|summary" || failed+=(train-cuda)
# The NCCL code path on one GPU: a data-parallel group of one through keel launch.
./build-gpu/keel launch --nproc 1 -- train configs/default.yaml --set train.device=cuda --set run.out_dir="$out/runs" \
    --set run.name=nccl-1gpu --set data.dir="$out/data" --set train.max_steps=100 2>&1 \
    | tee "$out/train-nccl.txt" | grep -E "data parallel|step +100/|summary" || failed+=(train-nccl)
# The trainer with train.cuda_graph (3 eager steps, capture, replays); its
# losses should track default-cuda's.
./build-gpu/keel train configs/default.yaml --set train.device=cuda --set train.cuda_graph=true \
    --set run.out_dir="$out/runs" --set run.name=cuda-graph --set data.dir="$out/data" --set train.max_steps=300 2>&1 \
    | tee "$out/train-cuda-graph.txt" | grep -E "step +(100|200|300)/|summary" || failed+=(train-cuda-graph)
# Speed (README "Speed"; about 4 minutes): the GPT-2-124M-class config at
# T = 1024, bf16, 64 sequences in micro-batches of 32, random tokens.
# keel bench with the phase breakdown and the monitoring cost; keel vs the
# PyTorch reference (bench/bench_pytorch.py) eager and torch.compile; and
# QK-Norm none / rms / l2. BENCH=0 skips this part.
if [[ ${BENCH:-1} != 0 ]]; then
  bench_set=(--set train.batch_size=64 --set train.micro_batch_size=32)
  t0=$(date +%s)
  ./build-gpu/keel bench configs/gpt2-124m.yaml "${bench_set[@]}" --random-data --steps 20 --warmup 5 \
      --json "$out/bench-keel-gpt2.json" 2>&1 | tee "$out/bench-keel-gpt2.txt" || echo "keel bench failed"
  # train.cuda_graph: the whole step as one graph replay, eager vs graphed,
  # on the default (small, launch-bound) model and on GPT-2-124M.
  for g in false true; do
    ./build-gpu/keel bench configs/default.yaml --random-data --steps 50 --warmup 10 --set train.cuda_graph=$g \
        --json "$out/bench-keel-default-graph-$g.json" 2>&1 | tee "$out/bench-keel-default-graph-$g.txt" \
        || echo "keel bench (cuda_graph $g) failed"
  done
  ./build-gpu/keel bench configs/gpt2-124m.yaml "${bench_set[@]}" --random-data --steps 20 --warmup 5 \
      --set train.cuda_graph=true --json "$out/bench-keel-gpt2-graph.json" 2>&1 \
      | tee "$out/bench-keel-gpt2-graph.txt" || echo "keel bench gpt2 (cuda_graph) failed"
  KEEL=./build-gpu/keel PYTHON="$py" STEPS=20 WARMUP=5 OUT="$out/bench-compare-gpt2" \
      timeout 420 bash scripts/bench_compare.sh configs/gpt2-124m.yaml 1 "${bench_set[@]}" 2>&1 \
      | tee "$out/bench-compare-gpt2.txt" || echo "bench_compare failed (see $out/bench-compare-gpt2/)"
  KEEL=./build-gpu/keel PYTHON="$py" STEPS=20 OUT="$out/bench-qknorm-gpt2" \
      timeout 240 bash scripts/bench_qknorm.sh configs/gpt2-124m.yaml 1 "${bench_set[@]}" --random-data 2>&1 \
      | tee "$out/bench-qknorm-gpt2.txt" || echo "bench_qknorm failed"
  echo "bench: $(( $(date +%s) - t0 )) s" | tee -a "$out/timings.txt"
fi
echo "total: $(( $(date +%s) - t_start )) s" | tee -a "$out/timings.txt"
if (( ${#failed[@]} )); then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "all GPU checks passed"
