#!/usr/bin/env bash
# keel's GPU check, made to fit ONE call on the lent GPU machine (one H200,
# 600 s a command, at most 8 files back). It builds only what it runs (keel
# and the GPU test program), runs the GPU tests, CUDA training runs (eager,
# CUDA graph, the NCCL path on one GPU) and the speed benchmarks (keel bench,
# keel vs PyTorch eager / torch.compile, QK-Norm and monitoring cost), and
# leaves exactly three files in $OUT:
#   summary.md    a table: each check passed / failed / skipped and its time; every figure
#   bench.json    every bench record, as written by keel bench and bench/bench_pytorch.py
#   logs.tar.gz   every log (build, tests, runs, benches)
# Runs, data and logs live in a scratch folder outside $OUT (GPU_CHECK_SCRATCH).
# Each section prints its elapsed time; a section whose estimate does not fit
# the time left (GPU_CHECK_BUDGET_S, default 420 s) is skipped, and a running
# one is cut at the time left, so the script always gets to write its results.
# Exit status 1 if any check failed, 2 if the preflight found something missing.
#
#   OUT=... bash scripts/gpu_check.sh [PYTHON]     # PYTHON default /opt/torch/.venv/bin/python
#   GPU_CHECK_DRY=1 OUT=... bash scripts/gpu_check.sh
#       CPU rehearsal (tests/python/test_gpu_check.py runs it in CI): every
#       line that does not need CUDA, on the CPU at tiny sizes, against the
#       existing build ($KEEL_BUILD_DIR, default build) and .venv's Python.
#
# Why build on the GPU machine rather than carry binaries built here: its
# OS and glibc are not known in advance, the carry limit is 64 MiB, and the
# build against /opt/torch is itself one of the things this checks. Only the
# Debian dependencies travel, packed by scripts/pack_offline_deps.sh into
# offline-deps/ (carry it).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dry=${GPU_CHECK_DRY:-0}
[[ $dry == 0 ]] && dry=""
budget=${GPU_CHECK_BUDGET_S:-420}
t_start=$SECONDS
out=${OUT:-$repo/gpu-results}
scratch=${GPU_CHECK_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/keel-gpu-check.XXXXXX")}
logs=$scratch/logs
mkdir -p "$out" "$logs" "$scratch/bench" "$scratch/runs"
results=$scratch/results.tsv   # name, status, seconds, note
: > "$results"

if [[ -n $dry ]]; then
  py=${1:-$repo/.venv/bin/python}
  build=${KEEL_BUILD_DIR:-build}
  dev=cpu
else
  py=${1:-/opt/torch/.venv/bin/python}
  build=${KEEL_BUILD_DIR:-build-gpu}
  dev=cuda
fi
deps=$repo/offline-deps
keel=$build/keel

say() { printf '[gpu_check %4ds] %s\n' "$((SECONDS - t_start))" "$*"; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; }

# section NAME ESTIMATE_S COMMAND...: runs COMMAND with its output in
# logs/NAME.log when the estimate fits the budget left, else records a skip.
failed=()
kill_tree() {  # kill_tree PID SIGNAL: the process and all its descendants
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child" "$2"; done
  kill -"$2" "$1" 2> /dev/null || true
}
section() {
  local name=$1 est=$2; shift 2
  local left=$((budget - (SECONDS - t_start)))
  if (( est > left )); then
    say "$name: skipped (needs ~${est} s, ${left} s left)"
    record "$name" skipped 0 "needs ~${est} s, ${left} s left"
    return 0
  fi
  local t0=$SECONDS rc=0 cut=""
  say "$name: running (~${est} s)"
  # A shell function cannot run under timeout(1): a watchdog ends the
  # section's process tree at the deadline (TERM, then KILL 10 s later).
  ( "$@" ) > "$logs/$name.log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    if (( SECONDS - t0 >= left )); then
      cut=1
      kill_tree "$pid" TERM
      local grace=$((SECONDS + 10))
      while kill -0 "$pid" 2> /dev/null && (( SECONDS < grace )); do sleep 0.2; done
      kill_tree "$pid" KILL
      break
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  [[ -n $cut ]] && rc=124
  local dt=$((SECONDS - t0))
  if (( rc == 0 )); then
    say "$name: passed in ${dt} s"
    record "$name" passed "$dt" ""
  else
    local why="exit $rc"
    [[ -n $cut ]] && why="cut at the budget ($left s left)"
    say "$name: FAILED ($why) in ${dt} s; last lines:"
    tail -n 15 "$logs/$name.log" | sed 's/^/    /'
    record "$name" failed "$dt" "$why"
    failed+=("$name")
  fi
}

# ---------------------------------------------------------------- preflight
# Within seconds: everything the rest needs, or a clear stop.
preflight() {
  local missing=()
  if [[ -z $dry ]]; then
    if command -v nvidia-smi > /dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || missing+=("a working nvidia-smi")
    else
      missing+=(nvidia-smi)
    fi
    if command -v nvcc > /dev/null; then nvcc --version | tail -n 2
    elif [[ -x /usr/local/cuda/bin/nvcc ]]; then /usr/local/cuda/bin/nvcc --version | tail -n 2
    else missing+=(nvcc); fi
    [[ -d $deps/include ]] || missing+=("offline-deps/ (run scripts/pack_offline_deps.sh here and carry it)")
  else
    echo "dry run: no GPU, nvcc or offline-deps needed; build dir $build"
  fi
  local tool
  for tool in cmake ninja g++ tar; do
    if command -v "$tool" > /dev/null; then echo "$tool: $("$tool" --version | head -n 1)"; else missing+=("$tool"); fi
  done
  if [[ -x $py ]]; then
    local want_cuda=1
    [[ -n $dry ]] && want_cuda=0
    "$py" - "$want_cuda" <<'EOF' || missing+=("PyTorch with CUDA in $py")
import sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"cuda available {torch.cuda.is_available()}")
if sys.argv[1] == "1" and not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device")
EOF
  else
    missing+=("python at $py")
  fi
  if (( ${#missing[@]} )); then
    echo "missing: ${missing[*]}"
    return 2
  fi
}
say "out $out, scratch $scratch, build $build, python $py${dry:+, DRY RUN on the CPU}, budget ${budget} s"
t0=$SECONDS
if preflight > "$logs/preflight.log" 2>&1; then
  sed 's/^/    /' "$logs/preflight.log"
  record preflight passed $((SECONDS - t0)) ""
  preflight_ok=1
else
  sed 's/^/    /' "$logs/preflight.log"
  say "preflight failed: nothing else runs"
  record preflight failed $((SECONDS - t0)) "$(tail -n 1 "$logs/preflight.log")"
  failed+=(preflight)
  preflight_ok=""
fi

# -------------------------------------------------------------------- build
build_keel() {
  if [[ ! -f $build/build.ninja ]]; then
    local prefix=()
    [[ -d $deps ]] && prefix=(-DCMAKE_PREFIX_PATH="$deps")
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_TORCH_PYTHON="$py" "${prefix[@]}" || return 1
  fi
  cmake --build "$build" -j"$(nproc)" --target keel test_cuda
}
[[ -d $deps ]] && export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

# ------------------------------------------------------------- what to run
# The bench model: GPT-2-124M-class at T = 1024, bf16, 64 sequences in
# micro-batches of 32. The dry run shrinks the same config to seconds.
if [[ -n $dry ]]; then
  gpt2_set=(--set train.device=cpu --set train.precision=fp32 --set model.d_model=64 --set model.n_layers=2
            --set model.n_heads=2 --set model.n_kv_heads=2 --set model.max_seq_len=32 --set model.vocab_size=512
            --set train.batch_size=4 --set train.micro_batch_size=2)
  train_set=(--set train.device=cpu --set model.n_layers=1 --set train.batch_size=4 --set model.max_seq_len=32
             --set train.warmup_steps=1 --set train.log_every=2 --set train.eval_batches=2)
  steps=(--steps 2 --warmup 1)
  long_set=(--set model.max_seq_len=64)
  train_steps=4
  graph=false   # CUDA graphs need CUDA: the dry run takes the same lines eagerly
  compare_modes=eager
else
  gpt2_set=(--set train.batch_size=64 --set train.micro_batch_size=32)
  train_set=(--set train.device=cuda)
  steps=(--steps 20 --warmup 5)
  long_set=(--set model.max_seq_len=4096 --set train.batch_size=16 --set train.micro_batch_size=8)
  train_steps=300
  graph=true
  compare_modes="eager compile"
fi
data_set=(--set data.dir="$scratch/data" --set run.out_dir="$scratch/runs")
bench() {  # bench NAME CONFIG [keel bench args]: one record in bench/NAME.json
  local name=$1 config=$2; shift 2
  "$keel" bench "$config" --random-data --json "$scratch/bench/$name.json" "$@"
}
train() {  # train NAME STEPS [keel train args]
  local name=$1 n=$2; shift 2
  "$keel" train configs/default.yaml "${train_set[@]}" "${data_set[@]}" --set run.name="$name" \
      --set train.max_steps="$n" "$@"
}
launch_train() {  # the NCCL code path (Gloo in the dry run): a data-parallel group of one
  "$keel" launch --nproc 1 -- train configs/default.yaml "${train_set[@]}" "${data_set[@]}" \
      --set run.name=nccl-1gpu --set train.max_steps="$((train_steps / 3 + 1))"
}
compare() {  # keel vs PyTorch eager and torch.compile, one round
  KEEL=$keel PYTHON=$py MODES=$compare_modes STEPS=${steps[1]} WARMUP=${steps[3]} OUT="$scratch/bench/compare" \
      bash scripts/bench_compare.sh configs/gpt2-124m.yaml 1 "${gpt2_set[@]}"
}
qknorm() {  # QK-Norm none / rms / l2 and the monitoring cost, one round
  KEEL=$keel PYTHON=$py STEPS=${steps[1]} WARMUP=${steps[3]} OUT="$scratch/bench/qknorm" \
      bash scripts/bench_qknorm.sh configs/gpt2-124m.yaml 1 "${gpt2_set[@]}" --random-data
}

# Sections in order of what matters most; estimates are for the H200 with
# 16 cores (the first real run refines them: see docs/results/gpu/).
if [[ -n $preflight_ok ]]; then
  section build 200 build_keel
  if [[ -x $keel ]]; then
    section gpu-tests 40 "$build/tests/test_cuda" --gtest_brief=1
    section train-cuda 45 train default-cuda "$train_steps"
    section bench-gpt2 45 bench gpt2 configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}"
    # The chunked output head + loss (train.loss_chunk_tokens, default 8192) against whole logits.
    section bench-gpt2-whole-logits 40 bench gpt2-whole-logits configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set train.loss_chunk_tokens=0
    section compare-pytorch 150 compare
    section train-cuda-graph 45 train cuda-graph "$train_steps" --set train.cuda_graph=$graph
    section bench-gpt2-graph 40 bench gpt2-graph configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set train.cuda_graph=$graph
    # Muon's step cost (issue 21): Newton-Schulz in bf16, batched per shape group, against AdamW's bench-gpt2.
    section bench-gpt2-muon 45 bench gpt2-muon configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set train.optimizer=muon
    section bench-qknorm 70 qknorm
    # train.attention_backend: auto prefers cuDNN attention on Hopper; FlashAttention-2 for comparison.
    section bench-gpt2-flash 40 bench gpt2-flash configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set train.attention_backend=flash
    # Gemma's attention softcap on the blockwise attention, at T = 1024 and 4096 (SDPA without it: bench-gpt2).
    section bench-gpt2-softcap 45 bench gpt2-softcap configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set model.attn_softcap=50
    section bench-gpt2-softcap-4k 60 bench gpt2-softcap-4k configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
        --set model.attn_softcap=50 "${long_set[@]}"
    section train-nccl 35 launch_train
    section bench-default-eager 20 bench default-eager configs/default.yaml "${train_set[@]}" "${steps[@]}"
    section bench-default-graph 20 bench default-graph configs/default.yaml "${train_set[@]}" "${steps[@]}" \
        --set train.cuda_graph=$graph
  fi
fi

# ------------------------------------------------------------------ results
# summary.md and bench.json from what the sections left; the logs as one archive.
cp "$results" "$logs/results.tsv"
"$py" - "$scratch" "$out" "${dry:-0}" "$((SECONDS - t_start))" "$budget" <<'EOF' > "$logs/summarize.log" 2>&1 \
    || { echo "summary failed:"; cat "$logs/summarize.log"; failed+=(summary); }
import glob, json, os, platform, sys
scratch, out, dry, elapsed, budget = sys.argv[1], sys.argv[2], sys.argv[3] != "0", sys.argv[4], sys.argv[5]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

rows = [line.rstrip("\n").split("\t") for line in open(f"{scratch}/results.tsv")]
records = {}
for path in sorted(glob.glob(f"{scratch}/bench/**/*.json", recursive=True)):
    rec = load(path)
    if rec is not None:
        records[os.path.relpath(path, f"{scratch}/bench")] = rec
json.dump(records, open(f"{out}/bench.json", "w"), indent=1)

def num(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) else "-"

md = ["# keel GPU check" + (" (DRY RUN on the CPU: no GPU figure here)" if dry else ""), "",
      f"Host {platform.node()}, {os.cpu_count()} cores; {elapsed} s of a {budget} s budget; "
      f"command: `bash scripts/gpu_check.sh`" + (" with GPU_CHECK_DRY=1" if dry else ""), "",
      "| check | result | seconds | note |", "|---|---|---|---|"]
md += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3] if len(r) > 3 else ''} |" for r in rows]
md += ["", "## Training runs", "", "| run | steps | final loss | final val loss | tokens/s | stopped because |",
       "|---|---|---|---|---|---|"]
for path in sorted(glob.glob(f"{scratch}/runs/*/summary.json")):
    s = load(path) or {}
    md.append(f"| {os.path.basename(os.path.dirname(path))} | {s.get('steps', s.get('step', '-'))} | "
              f"{num(s.get('final_loss'), '.4f')} | {num(s.get('final_val_loss'), '.4f')} | "
              f"{num(s.get('tokens_per_s'), ',.0f')} | {s.get('stopped_by', '-')} |")
md += ["", "## Benchmarks (keel bench and bench/bench_pytorch.py records)", "",
       "| record | tool | device | precision | graph | attention | kernels/step | tokens/step | ms/step (median) | tokens/s | MFU | peak memory (GiB) |",
       "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for name, r in records.items():
    if not isinstance(r.get("step_ms"), dict) or not isinstance(r.get("tokens_per_s"), (int, float)):
        continue  # a summary of several records, shown below
    batch = r.get("batch") or {}
    mem = r.get("peak_memory_bytes")
    tool = r.get("tool", "-") + (" " + r["mode"] if r.get("mode") else "")
    attention = (r.get("attention") or {}).get("kernel", "-")
    kernels = (r.get("ops_per_step") or {}).get("kernels", "-")
    md.append(f"| {name} | {tool} | {r.get('device_name', r.get('device', '-'))} | "
              f"{r.get('precision', '-')} | {r.get('cuda_graph', '-')} | {attention} | {kernels} | "
              f"{batch.get('tokens_per_step', '-')} | "
              f"{num(r['step_ms'].get('median'), '.2f')} | {num(r.get('tokens_per_s'), ',.0f')} | "
              f"{num(r.get('mfu'), '.1%')} | {num(mem / 2**30 if isinstance(mem, (int, float)) else None, '.2f')} |")
for name in ("compare/summary.json", "qknorm/summary.json"):
    if name in records:
        md += ["", f"`{name}`:", "", "```", json.dumps(records[name], indent=1), "```"]
open(f"{out}/summary.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
if [[ -f $out/summary.md ]]; then sed -n '/^| check/,/^$/p' "$out/summary.md"; fi
tar -C "$scratch" -czf "$out/logs.tar.gz" logs $(cd "$scratch" && ls -d bench runs/*/*.log runs/*/summary.json 2>/dev/null)
say "done in $((SECONDS - t_start)) s; results in $out: $(ls "$out" | tr '\n' ' ')"
[[ -z ${GPU_CHECK_SCRATCH:-} ]] && rm -rf "$scratch"
if [[ -z $preflight_ok ]]; then exit 2; fi
if (( ${#failed[@]} )); then say "FAILED: ${failed[*]}"; exit 1; fi
say "all checks passed"
