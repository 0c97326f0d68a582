#!/usr/bin/env bash
# keel's GPU check, in TWO calls on the lent GPU machine (one H200; 600 s a
# command, 15 minutes of device time a session, at most 8 files back).
# Part 1 checks correctness, part 2 measures speed. Both run binaries built
# on the development machine by scripts/gpu/gpu_pack.sh and carried as
# gpu-carry/, so no call spends its minutes building; docs/gpu.md has the
# exact calls and how to read what comes back.
#
#   bash scripts/gpu/gpu_pack.sh                                       # here, first
#   GPU_CHECK_PART=1 OUT=$OUT bash scripts/gpu/gpu_check.sh [PYTHON]   # there, carry ["gpu-carry"]
#   GPU_CHECK_PART=2 OUT=$OUT bash scripts/gpu/gpu_check.sh [PYTHON]   # PYTHON: /opt/torch/.venv/bin/python
#
# Part 1, correctness: preflight; the GPU test program; CUDA vs CPU loss
# curves; NCCL and data parallel on one GPU (two ranks, resume, a peer
# killed); training under a CUDA graph; bf16 with every QK-Norm type, with and
# without the attention softcap; whole vs chunked output logits.
# Part 2, speed: gpt2-124m keel vs PyTorch eager and torch.compile; keel's
# fused CUDA kernels vs the composite path; cuDNN vs flash attention; QK-Norm and monitoring cost; softcap at T = 1024 and
# 4096; Muon; CUDA graphs (kernel counts are in every bench record).
#
# $OUT gets three files:
#   summary.md    one page: each check passed / failed / skipped with its time and estimate; the figures
#   results.json  every figure: sections, preflight facts, bench records, training-run summaries,
#                 the loss comparison, the NCCL findings
#   logs.tar.gz   every log (sections, runs, benches)
# Exit status: 0 all passed (a skip is not a failure), 1 a check failed, 2 the preflight failed.
#
# Environment:
#   GPU_CHECK_PART=1|2|3 the part (default 1); 3 holds the speed figures that do not fit part 2,
#                        for a session with device time to spare
#   GPU_CHECK_BUDGET_S   seconds for the part (default 300, so that parts 1 and 2 and the machine's
#                        start fit 12 of a session's 15 minutes): a section whose estimate does not fit
#                        the time left is skipped and reported, a running one is cut at it
#   GPU_CHECK_ONLY=a,b   only these sections (the preflight always runs)
#   GPU_CHECK_PLAN=1     print the plan, "PART SECTION ESTIMATE_S" lines for both parts, run nothing
#   GPU_CHECK_DRY=1      CPU rehearsal (tests/python/test_gpu_check.py runs it in CI): every line that
#                        does not need CUDA, at tiny sizes, with $KEEL_BUILD_DIR/keel and
#                        tests/test_cuda (default build) and .venv's Python; cuda -> cpu, nccl -> gloo
#   GPU_CHECK_SCRATCH    runs, data and logs (default: a temp dir, removed at the end)
#   GPU_CHECK_CARRY      the carried folder (default gpu-carry)
#
# LD_LIBRARY_PATH is never exported: the carried keel finds its libraries
# through wrapper scripts that set it for keel (and test_cuda) alone.
# Exported, it would reach Python and the box's torch, and break them.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
repo=$PWD
dry=${GPU_CHECK_DRY:-0}
[[ $dry == 0 ]] && dry=""
plan_only=${GPU_CHECK_PLAN:-0}
[[ $plan_only == 0 ]] && plan_only=""
part=${GPU_CHECK_PART:-1}
budget=${GPU_CHECK_BUDGET_S:-300}
only=${GPU_CHECK_ONLY:-}
carry=${GPU_CHECK_CARRY:-$repo/gpu-carry}
if [[ $part != 1 && $part != 2 && $part != 3 ]]; then
  echo "gpu_check: GPU_CHECK_PART must be 1, 2 or 3, not '$part'" >&2
  exit 2
fi
t_start=$SECONDS
out=${OUT:-$repo/gpu-results}
if [[ -n $plan_only ]]; then
  scratch=/nonexistent-gpu-check-plan   # never created: the plan runs nothing
else
  scratch=${GPU_CHECK_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/keel-gpu-check.XXXXXX")}
fi
logs=$scratch/logs
results=$scratch/results.tsv   # name, status, seconds, estimate, note
facts=$scratch/facts.tsv       # preflight facts: key, value
tool=$repo/scripts/gpu/gpu_check_tool.py   # loss curves, finite losses, a free port, the summary
rebuild_dir=$repo/build-gpu

if [[ -n $dry ]]; then
  py=${1:-$repo/.venv/bin/python}
  build=${KEEL_BUILD_DIR:-build}
  [[ $build == /* ]] || build=$repo/$build
  keel_bin=$build/keel
  test_bin=$build/tests/test_cuda
  dev=cpu
else
  py=${1:-/opt/torch/.venv/bin/python}
  [[ -x $py ]] || py=$(command -v python3 || echo "$py")
  keel_bin=$carry/bin/keel
  test_bin=$carry/bin/test_cuda
  dev=cuda
fi
keel=$scratch/bin/keel          # wrappers (write_wrappers): the binaries with their libraries
test_cuda=$scratch/bin/test_cuda

say() { printf '[gpu_check %4ds] %s\n' "$((SECONDS - t_start))" "$*"; }
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$results"; }
fact() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ')" >> "$facts"; }

# ------------------------------------------------------------- what to run
# The bench model: GPT-2-124M-class at T = 1024, bf16, 64 sequences in
# micro-batches of 32. The dry run shrinks the same configs to seconds.
if [[ -n $dry ]]; then
  gpt2_set=(--set train.device=cpu --set train.precision=fp32 --set model.d_model=64 --set model.n_layers=2
            --set model.n_heads=2 --set model.n_kv_heads=2 --set model.max_seq_len=32 --set model.vocab_size=512
            --set train.batch_size=4 --set train.micro_batch_size=2)
  train_set=(--set train.device=cpu --set model.n_layers=1 --set train.batch_size=4 --set model.max_seq_len=32
             --set model.vocab_size=512 --set train.warmup_steps=1 --set train.log_every=1 --set train.eval_batches=2)
  steps=(--steps 2 --warmup 1)
  short_steps=("${steps[@]}")
  long_set=(--set model.max_seq_len=64)
  nccl=gloo            # NCCL needs CUDA: the dry run takes the same lines with Gloo
  graph=false          # so do CUDA graphs: the same lines, eagerly
  compare_modes=eager  # torch.compile takes minutes on 2 cores
  train_steps=4 cmp_steps=4 cmp_log=1 dp_steps=6 dp_stop=3 bf16_steps=2
else
  gpt2_set=(--set train.batch_size=64 --set train.micro_batch_size=32)
  # warm-up under every run's step count (configs/default.yaml has 50; the check's runs are 20 to 300)
  train_set=(--set train.device=cuda --set train.warmup_steps=5)
  steps=(--steps 20 --warmup 5)
  short_steps=(--steps 5 --warmup 2)   # a peak-memory figure: a few steps reach it
  long_set=(--set model.max_seq_len=4096 --set train.batch_size=16 --set train.micro_batch_size=8)
  nccl=nccl
  graph=true
  compare_modes="eager compile"
  train_steps=300 cmp_steps=40 cmp_log=5 dp_steps=40 dp_stop=20 bf16_steps=20
fi
cmp_tol=0.05      # |loss(CUDA) - loss(CPU)| at each logged step, fp32 without TF32 on both
dp_timeout=30     # dist.timeout_s of the data-parallel runs: a dead peer must end the other within it
data_set=(--set data.dir="$scratch/data" --set run.out_dir="$scratch/runs")

# ---------------------------------------------------------------- sections
# section NAME ESTIMATE_S COMMAND...: runs COMMAND with its output in
# logs/NAME.log when the estimate fits the budget left, else records a skip.
# Estimates are seconds on the H200 (16 cores), guesses until a real run
# refines them; GPU_CHECK_PLAN=1 prints them and the CI test checks that each
# part's sum fits its budget.
# publish [final]: summary.md, results.json and logs.tar.gz in $OUT from what
# has finished so far. Called after every section, so a part killed by the
# call's time limit still returns every section it completed (the summary
# then says "interim" and which section was running); "final" at the end.
publish() {
  local st=0 stage=${1:-interim}
  (( ${#failed[@]} )) && st=1
  [[ -z ${preflight_ok-x} ]] && st=2
  cp "$results" "$facts" "$logs/" 2> /dev/null
  # The archive first, built in the scratch folder and renamed into $OUT; the
  # summary last: a summary.md in $OUT means the files beside it are as new.
  tar -C "$scratch" -czf "$scratch/logs.tar.gz.tmp" logs figures \
      $(cd "$scratch" && ls -d bench runs/*/*.log runs/*/summary.json runs/*/metrics.jsonl 2> /dev/null) \
    && cp "$scratch/logs.tar.gz.tmp" "$out/.logs.tar.gz.tmp" && mv -f "$out/.logs.tar.gz.tmp" "$out/logs.tar.gz"
  if ! "$py" "$tool" summarize "$scratch" "$out" "$part" "${dry:-0}" "$((SECONDS - t_start))" "$budget" "$st" "$only" \
       "$stage" > "$logs/summarize.log" 2>&1; then
    echo "summary failed:"; cat "$logs/summarize.log"
    [[ $stage == final ]] && status=1
  fi
}
failed=()
selected=()   # names GPU_CHECK_ONLY matched
kill_tree() {  # kill_tree PID SIGNAL: the process and all its descendants
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child" "$2"; done
  kill -"$2" "$1" 2> /dev/null || true
}
wanted() {  # is section $1 selected by GPU_CHECK_ONLY (everything when unset)?
  [[ -z $only ]] && return 0
  [[ ",$only," == *",$1,"* ]] && { selected+=("$1"); return 0; }
  return 1
}
section() {
  local name=$1 est=$2; shift 2
  [[ $name == build ]] || wanted "$name" || return 0   # the fallback build is never left out
  if [[ -n $plan_only ]]; then echo "$cur_part $name $est"; return 0; fi
  local left=$((budget - (SECONDS - t_start)))
  if (( est > left )); then
    say "$name: skipped (needs ~${est} s, ${left} s left)"
    record "$name" skipped 0 "$est" "needs ~${est} s, ${left} s left"
    publish
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
    record "$name" passed "$dt" "$est" ""
  else
    local why="exit $rc"
    [[ -n $cut ]] && why="cut at the budget ($left s left)"
    say "$name: FAILED ($why) in ${dt} s; last lines:"
    tail -n 15 "$logs/$name.log" | sed 's/^/    /'
    record "$name" failed "$dt" "$est" "$why"
    failed+=("$name")
  fi
  publish   # what finished so far reaches $OUT now: a part killed later still returns it
}

# ----------------------------------------------------------- the sections' bodies
ensure_data() {  # the default config's tokens, prepared once for every training section
  "$keel" prepare configs/default.yaml "${train_set[@]}" "${data_set[@]}" --quiet > "$logs/prepare.log" 2>&1 \
      || { cat "$logs/prepare.log"; return 1; }
}
bench() {  # bench NAME CONFIG [keel bench args]: one record in bench/NAME.json
  local name=$1 config=$2; shift 2
  "$keel" bench "$config" --random-data --json "$scratch/bench/$name.json" "$@"
}
train() {  # train NAME STEPS [keel train args]
  local name=$1 n=$2; shift 2
  "$keel" train configs/default.yaml "${train_set[@]}" "${data_set[@]}" --set run.name="$name" \
      --set train.max_steps="$n" "$@"
}

gpu_tests() {  # the GPU test program (tests/gpu), pointed at this checkout and the carried keel
  KEEL_SOURCE_DIR=$repo KEEL_BINARY=$keel "$test_cuda" --gtest_brief=1 \
      --gtest_output="json:$scratch/figures/gpu-tests.json"
}

train_cuda_vs_cpu() {  # the default config on CUDA and on the CPU, fp32, same seed: same loss curve
  ensure_data || return 1
  local cmp=(--set train.precision=fp32 --set train.tf32=false --set train.log_every="$cmp_log"
             --set train.eval_every=0 --set run.seed=1337)
  train cmp-cuda "$cmp_steps" "${cmp[@]}" --set train.device="$dev" || return 1
  train cmp-cpu "$cmp_steps" "${cmp[@]}" --set train.device=cpu || return 1
  "$py" "$tool" losses "$scratch/figures/train-cuda-vs-cpu.json" "$cmp_tol" \
      "$scratch/runs/cmp-cuda" "$scratch/runs/cmp-cpu"
}

# NCCL and data parallel on the one GPU. NCCL usually refuses two ranks on
# one device ("Duplicate GPU detected"): that is recorded as a finding, not a
# failure, and the two-rank checks then run with Gloo on CUDA tensors, next
# to a one-rank NCCL run (the NCCL code path: communicator, all-reduce on
# the GPU). Findings go to figures/nccl.tsv.
nccl_2ranks() {
  ensure_data || return 1
  local d=$logs/nccl-2ranks bad=0 dp_backend=$nccl two_ran=0
  local note=$scratch/figures/nccl.tsv
  mkdir -p "$d"
  finding() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ')" >> "$note"; echo "$1: $2"; }
  local dp=(configs/default.yaml "${train_set[@]}" "${data_set[@]}" --set train.precision=fp32 --set train.tf32=false
            --set train.max_steps="$dp_steps" --set train.log_every=1 --set checkpoint.every=0
            --set dist.timeout_s="$dp_timeout")
  local limit=$((2 * dp_timeout + 60))   # no launch may outlive this, whatever NCCL does
  finding backend_asked "$nccl"
  # keel refuses two NCCL ranks on one GPU before NCCL sees them (Dist::Dist,
  # kind "shared GPU"); NCCL's own "Duplicate GPU detected" if keel did not.
  local nccl_shared_gpu='keel: shared GPU: |duplicate gpu' shared

  # 1. Two ranks on one GPU with NCCL.
  if NCCL_DEBUG=WARN timeout -k 5 "$limit" "$keel" launch --nproc 2 -- train "${dp[@]}" \
       --set dist.backend="$nccl" --set run.name=dp-nccl-2ranks > "$d/nccl-2ranks.log" 2>&1; then
    finding two_ranks_one_gpu "ran with $nccl"
    two_ran=1
  elif shared=$(grep -m1 -iE "$nccl_shared_gpu" "$d/nccl-2ranks.log"); then
    finding two_ranks_one_gpu "refused: $(printf '%s' "$shared" | cut -c1-240)"
    dp_backend=gloo
  else
    finding two_ranks_one_gpu "FAILED: $(grep -v '^ *$' "$d/nccl-2ranks.log" | tail -n 1 | cut -c1-300)"
    bad=1
    dp_backend=gloo
  fi
  finding two_rank_backend "$dp_backend"

  # 2. One rank through the launcher with NCCL: the NCCL path without a second device.
  if timeout -k 5 "$limit" "$keel" launch --nproc 1 -- train "${dp[@]}" --set dist.backend="$nccl" \
       --set run.name=dp-nccl-1rank > "$d/nccl-1rank.log" 2>&1 \
     && "$py" "$tool" steps "$scratch/runs/dp-nccl-1rank" "$dp_steps"; then
    finding one_rank "passed: $(grep -m1 -o '[0-9]* ranks, [a-z]*' "$d/nccl-1rank.log")"
  else
    finding one_rank "FAILED: $(tail -n 1 "$d/nccl-1rank.log" | cut -c1-300)"
    bad=1
  fi

  # 3. Two ranks stopped at a step, then resumed (--resume auto): every step
  # logged once, and the losses of the one-rank run (same global batches).
  local two=(--set dist.backend="$dp_backend" --set run.name=dp-resume)
  if timeout -k 5 "$limit" "$keel" launch --nproc 2 -- train "${dp[@]}" "${two[@]}" \
       --stop-after-step "$dp_stop" > "$d/resume-first.log" 2>&1 \
     && timeout -k 5 "$limit" "$keel" launch --nproc 2 -- train "${dp[@]}" "${two[@]}" \
       --resume auto > "$d/resume-second.log" 2>&1 \
     && "$py" "$tool" steps "$scratch/runs/dp-resume" "$dp_steps" \
     && "$py" "$tool" losses "$scratch/figures/nccl-resume-losses.json" "$cmp_tol" \
          "$scratch/runs/dp-resume" "$scratch/runs/dp-nccl-1rank"; then
    finding resume "passed: 2 ranks ($dp_backend) stopped after step $dp_stop, resumed to $dp_steps"
  else
    finding resume "FAILED (logs/nccl-2ranks/resume-*.log)"
    bad=1
  fi

  # 3b. ZeRO-1 on two ranks: the gradients reduce-scattered to their owners
  # (c10d's uneven reduce_scatter: grouped reduces under NCCL), the optimizer
  # state sharded. The one-rank run's losses to cmp_tol, and the replicated
  # two-rank run's exactly (a sum of two is the same whichever rank adds).
  if timeout -k 5 "$limit" "$keel" launch --nproc 2 -- train "${dp[@]}" --set dist.backend="$dp_backend" \
       --set dist.zero=1 --set run.name=dp-zero1 > "$d/zero1.log" 2>&1 \
     && "$py" "$tool" steps "$scratch/runs/dp-zero1" "$dp_steps" \
     && "$py" "$tool" losses "$scratch/figures/nccl-zero1-losses.json" "$cmp_tol" \
          "$scratch/runs/dp-zero1" "$scratch/runs/dp-nccl-1rank"; then
    finding zero1 "passed: $(grep -m1 -o 'ZeRO-1: [^|]*' "$d/zero1.log" | cut -c1-160)"
    if (( two_ran )); then
      if "$py" "$tool" losses "$scratch/figures/nccl-zero1-vs-replicated.json" 0 \
           "$scratch/runs/dp-zero1" "$scratch/runs/dp-nccl-2ranks"; then
        finding zero1_vs_replicated "passed: the replicated two-rank losses bit for bit"
      else
        finding zero1_vs_replicated "FAILED (figures/nccl-zero1-vs-replicated.json)"
        bad=1
      fi
    fi
  else
    finding zero1 "FAILED (logs/nccl-2ranks/zero1.log)"
    bad=1
  fi

  # 4. A peer killed (kill -9) mid-run: the other must exit non-zero within
  # dist.timeout_s with a peer-failure message. The ranks are started by
  # hand, as torchrun does: keel launch would stop the survivor itself.
  local port pid0 pid1 rc0=0 t_kill waited metrics=$scratch/runs/dp-killed/metrics.jsonl
  # keel's own message (Gloo, or NCCL caught in wait), or NCCL's watchdog when it ends the process first
  local peer_failure='Another worker probably died|Watchdog caught|timed out|Connection (reset|closed)|NCCL error'

  port=$("$py" "$tool" port)
  local args=(train "${dp[@]}" --set dist.backend="$dp_backend" --set run.name=dp-killed
              --set train.max_steps=1000000 --set train.eval_every=0)
  RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$keel" "${args[@]}" > "$d/killed-rank0.log" 2>&1 &
  pid0=$!
  RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$keel" "${args[@]}" > "$d/killed-rank1.log" 2>&1 &
  pid1=$!
  local deadline=$((SECONDS + 90))   # training is under way once rank 0 logged two steps
  while (( SECONDS < deadline )) && kill -0 "$pid0" 2> /dev/null \
        && [[ $(cat "$metrics" 2> /dev/null | wc -l) -lt 2 ]]; do sleep 0.2; done
  kill -9 "$pid1" 2> /dev/null
  wait "$pid1" 2> /dev/null
  t_kill=$SECONDS
  deadline=$((SECONDS + dp_timeout + 20))
  while kill -0 "$pid0" 2> /dev/null && (( SECONDS < deadline )); do sleep 0.2; done
  waited=$((SECONDS - t_kill))
  if kill -0 "$pid0" 2> /dev/null; then
    kill -9 "$pid0"
    wait "$pid0" 2> /dev/null
    finding peer_killed "FAILED: rank 0 still running ${waited} s after rank 1 was killed"
    bad=1
  else
    wait "$pid0" || rc0=$?
    local msg
    msg=$(grep -m1 -E "$peer_failure" "$d/killed-rank0.log" | cut -c1-300)
    local hint
    hint=$(grep -m1 'Another worker probably died' "$d/killed-rank0.log" | cut -c1-200)
    [[ -n $hint && $hint != "$msg" ]] && msg="$msg | $hint"
    finding peer_killed_rank0_exit "$rc0"
    finding peer_killed_rank0_seconds "$waited"
    finding peer_killed_rank0_message "$msg"
    if (( rc0 != 0 && waited <= dp_timeout + 10 )) && [[ -n $msg ]]; then
      finding peer_killed "passed: rank 0 exited $rc0 ${waited} s after rank 1 was killed (dist.timeout_s $dp_timeout)"
    else
      finding peer_killed "FAILED: rank 0 exited $rc0 after ${waited} s"
      bad=1
    fi
  fi
  return $bad
}

train_graph() {  # the default config trained under a CUDA graph (eagerly in the dry run)
  ensure_data || return 1
  train cuda-graph "$train_steps" --set train.cuda_graph=$graph || return 1
  "$py" "$tool" finite "$scratch/figures/train-cuda-graph.json" "$scratch/runs/cuda-graph"
}

bf16_variants() {  # bf16 autocast with each QK-Norm type, softcap off and 50: exit 0 and a finite loss
  ensure_data || return 1
  local qk cap name bad=0 runs=()
  mkdir -p "$logs/bf16-variants"
  # Each QK-Norm type once, the softcap on for half of them: the two are
  # separate code paths (the norm before the scores, the cap on them), so four
  # runs cover what eight did, in the time part 1 has.
  local pair
  for pair in none:none rms:50 layernorm:none l2:50; do
    qk=${pair%%:*} cap=${pair##*:}
    {
      name=bf16-qk-$qk-softcap-$cap
      local extra=()
      [[ $cap != none ]] && extra=(--set model.attn_softcap="$cap")
      if train "$name" "$bf16_steps" --set train.precision=bf16 --set model.qk_norm.type="$qk" "${extra[@]}" \
           > "$logs/bf16-variants/$name.log" 2>&1; then
        echo "$name: exit 0"
      else
        echo "$name: FAILED (exit $?): $(tail -n 1 "$logs/bf16-variants/$name.log")"
        bad=1
      fi
      runs+=("$scratch/runs/$name")
    }
  done
  "$py" "$tool" finite "$scratch/figures/bf16-variants.json" "${runs[@]}" || bad=1
  return $bad
}

gpt2_logits() {  # the chunked output head + loss (train.loss_chunk_tokens, default 8192) against whole logits
  bench gpt2 configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" || return 1
  bench gpt2-whole-logits configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" --set train.loss_chunk_tokens=0
}
compare() {  # keel vs PyTorch eager and torch.compile, one round
  KEEL=$keel PYTHON=$py MODES=$compare_modes STEPS=${steps[1]} WARMUP=${steps[3]} OUT="$scratch/bench/compare" \
      bash scripts/bench/bench_compare.sh configs/gpt2-124m.yaml 1 "${gpt2_set[@]}"
}
qknorm() {  # QK-Norm none / rms / l2 and the monitoring cost, one round
  KEEL=$keel PYTHON=$py STEPS=${steps[1]} WARMUP=${steps[3]} OUT="$scratch/bench/qknorm" \
      bash scripts/bench/bench_qknorm.sh configs/gpt2-124m.yaml 1 "${gpt2_set[@]}" --random-data
}
ckpt_bench() {  # activation checkpointing's peak memory and step time, beside keel plan's prediction of both modes
  bench gpt2-ckpt-full configs/gpt2-124m.yaml "${gpt2_set[@]}" "${short_steps[@]}" --breakdown-steps 0 \
      --set train.activation_checkpointing=full || return 1
  local mode
  for mode in none full; do
    "$keel" plan configs/gpt2-124m.yaml "${gpt2_set[@]}" --set train.activation_checkpointing=$mode --json \
        > "$scratch/figures/plan-gpt2-$mode.json" || return 1
  done
}

fused_bench() {  # keel's CUDA kernels (KEEL_CUDA_FUSED=1) against compare's keel record, which runs without them
  KEEL_CUDA_FUSED=1 bench gpt2-fused configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}"
}

graph_bench() {  # the small default model, where launch overhead dominates: eager, then one CUDA graph
  bench default-eager configs/default.yaml "${train_set[@]}" "${steps[@]}" || return 1
  bench default-graph configs/default.yaml "${train_set[@]}" "${steps[@]}" --set train.cuda_graph=$graph
}

# -------------------------------------------------------------------- parts
# Within each part the sections that matter most come first: when time runs
# short, the end of the list is what is skipped.
preflight_est=15   # estimate: nvidia-smi, one Python with torch, keel --version
part1() {
  section gpu-tests 40 gpu_tests
  section train-cuda-vs-cpu 40 train_cuda_vs_cpu
  section nccl-2ranks 90 nccl_2ranks
  section train-cuda-graph 25 train_graph
  section bf16-variants 45 bf16_variants
  section bench-gpt2-whole-logits 40 gpt2_logits
}
part2() {
  section compare-pytorch 150 compare
  # keel's fused CUDA kernels against the composite path (compare's keel record); gpu-tests checks their values.
  section bench-gpt2-fused 20 fused_bench
  # train.attention_backend: auto (compare's keel record) prefers cuDNN attention on Hopper; FlashAttention-2.
  section bench-gpt2-flash 20 bench gpt2-flash configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
      --set train.attention_backend=flash
  section bench-qknorm 60 qknorm
  # Gemma's attention softcap on the blockwise attention, T = 1024.
  section bench-gpt2-softcap 25 bench gpt2-softcap configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
      --set model.attn_softcap=50
}
part3() {  # what part 2 has no time for: run when a session has device time to spare
  # Activation checkpointing on CUDA (issue 37): full recompute's peak and step time, keel plan beside them.
  section bench-gpt2-ckpt 40 ckpt_bench
  # The softcap at T = 4096, where the blockwise attention's T^2 work dominates.
  section bench-gpt2-softcap-4k 90 bench gpt2-softcap-4k configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
      --set model.attn_softcap=50 "${long_set[@]}"
  # Muon's step cost (issue 21): Newton-Schulz in bf16, batched per shape group.
  section bench-gpt2-muon 35 bench gpt2-muon configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}" \
      --set train.optimizer=muon
  section bench-default-graph 40 graph_bench
  # part 3 has no compare record: its own gpt2 record is the baseline of the ratios
  section bench-gpt2 30 bench gpt2 configs/gpt2-124m.yaml "${gpt2_set[@]}" "${steps[@]}"
}

if [[ -n $plan_only ]]; then
  echo "# part section estimate_s (seconds on the H200, estimates); budget $budget s per part"
  for cur_part in 1 2 3; do
    [[ -n ${GPU_CHECK_PART:-} && $cur_part != "$part" ]] && continue
    echo "$cur_part preflight $preflight_est"
    "part$cur_part"
  done
  exit 0
fi
cur_part=$part
mkdir -p "$out" "$logs" "$scratch/bench" "$scratch/runs" "$scratch/figures" "$scratch/bin"
: > "$results"
: > "$facts"


# ---------------------------------------------------------------- preflight
# Within seconds: what the box has, whether the carried binaries load there,
# and a clear stop when something the checks need is missing.
write_wrappers() {  # bin/keel and bin/test_cuda: the binaries with LD_LIBRARY_PATH for them alone
  local name bin
  for name in keel test_cuda; do
    bin=$keel_bin
    [[ $name == test_cuda ]] && bin=$test_bin
    printf '#!/usr/bin/env bash\n# %s with its libraries: LD_LIBRARY_PATH is set for it (and its children) only\n%s\n' \
        "$name" "exec env LD_LIBRARY_PATH=$(printf %q "$run_libs")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} $(printf %q "$bin") \"\$@\"" \
        > "$scratch/bin/$name"
    chmod +x "$scratch/bin/$name"
  done
}
need_rebuild=""
preflight() {
  local missing=()
  if [[ -z $dry ]]; then
    if command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
         --format=csv,noheader > "$scratch/smi.txt" 2>&1; then
      cat "$scratch/smi.txt"
      fact gpu "$(head -n 1 "$scratch/smi.txt" | cut -d, -f1,3)"
      fact driver "$(head -n 1 "$scratch/smi.txt" | cut -d, -f2 | tr -d ' ')"
    else
      missing+=("a working nvidia-smi")
    fi
    local nvcc
    nvcc=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; })
    if [[ -n $nvcc ]]; then fact nvcc "$("$nvcc" --version | grep -m1 -o 'release [0-9.]*')"
    else fact nvcc "missing (needed only to rebuild keel here)"; fi
  else
    echo "dry run: no GPU or nvcc needed; binaries from $build"
  fi
  fact glibc "$(ldd --version 2>&1 | head -n 1)"
  # One Python for every torch fact: version, CUDA, cuDNN, the library
  # folders keel's wrapper needs, nccl.h, and the LD_LIBRARY_PATH Python sees.
  if [[ ! -x $py ]]; then
    missing+=("python at $py")
  elif "$py" "$tool" torch_facts "$([[ -n $dry ]] && echo 0 || echo 1)" > "$scratch/torch.txt" 2>&1
  then
    local k v
    while IFS=$'\t' read -r k v; do
      if [[ $k == run_libs ]]; then run_libs=$v; else fact "$k" "$v"; fi
      echo "$k: $v"
    done < "$scratch/torch.txt"
  else
    cat "$scratch/torch.txt"
    missing+=("PyTorch$([[ -z $dry ]] && echo ' with CUDA') in $py")
  fi
  # The carried binaries and their libraries (gpu_pack.sh's lib/), before the box's torch.
  if [[ -z $dry ]]; then
    [[ -f $carry/MANIFEST.txt ]] && fact carry_manifest "$(grep -m1 '^built' "$carry/MANIFEST.txt")"
    run_libs=$carry/lib${run_libs:+:$run_libs}
  fi
  write_wrappers
  local why=""
  if [[ ! -x $keel_bin ]]; then why="$keel_bin is missing (run scripts/gpu/gpu_pack.sh and carry gpu-carry)"
  elif ! "$keel" --version > "$scratch/version.txt" 2>&1; then why="$keel_bin does not load here: $(head -n 1 "$scratch/version.txt")"
  elif [[ ! -x $test_bin ]]; then why="$test_bin is missing"
  elif ! "$test_cuda" --gtest_list_tests > "$scratch/tests.txt" 2>&1; then
    why="$test_bin does not load here: $(head -n 1 "$scratch/tests.txt")"
  fi
  if [[ -z $why ]]; then
    fact keel "$(head -n 1 "$scratch/version.txt")"
    fact binaries "$([[ -n $dry ]] && echo "the build dir $build (dry run)" || echo "carried: $carry/bin")"
  elif [[ -n $dry ]]; then
    missing+=("$why")
  else
    # Fall back to building here (build_on_box, the first section): it needs
    # a compiler, CMake, Ninja, nvcc and the packed headers and libraries.
    echo "the carried binaries cannot run: $why"
    need_rebuild=$why
    local prog
    for prog in cmake ninja g++; do command -v "$prog" > /dev/null || missing+=("$prog (to rebuild keel)"); done
    [[ -n $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null) ]] || missing+=("nvcc (to rebuild keel)")
    [[ -d $carry/prefix/include || -d $repo/offline-deps/include ]] \
        || missing+=("gpu-carry/prefix or offline-deps (to rebuild keel)")
    fact binaries "rebuilt on the box because $why"
  fi
  if (( ${#missing[@]} )); then
    echo "missing: ${missing[*]}"
    return 2
  fi
}
build_on_box() {  # the fallback: keel and test_cuda built here against the box's torch, without Parquet
  local prefix=()
  if [[ -d $carry/prefix/include ]]; then prefix=(-DCMAKE_PREFIX_PATH="$carry/prefix")
  elif [[ -d $repo/offline-deps/include ]]; then prefix=(-DCMAKE_PREFIX_PATH="$repo/offline-deps"); fi
  if [[ ! -f $rebuild_dir/build.ninja ]]; then
    cmake -S . -B "$rebuild_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_TORCH_PYTHON="$py" -DKEEL_PARQUET=OFF \
        -DKEEL_CUDA_ARCHITECTURES=90a "${prefix[@]}" || return 1
  fi
  cmake --build "$rebuild_dir" -j"$(nproc)" --target keel test_cuda
}

run_libs=""
say "part $part, out $out, scratch $scratch, python $py${dry:+, DRY RUN on the CPU}, budget ${budget} s${only:+, only $only}"
t0=$SECONDS
if preflight > "$logs/preflight.log" 2>&1; then
  sed 's/^/    /' "$logs/preflight.log"
  record preflight passed $((SECONDS - t0)) "$preflight_est" "${need_rebuild:+rebuilding: }$need_rebuild"
  preflight_ok=1
else
  sed 's/^/    /' "$logs/preflight.log"
  say "preflight failed: nothing else runs"
  record preflight failed $((SECONDS - t0)) "$preflight_est" "$(tail -n 1 "$logs/preflight.log")"
  failed+=(preflight)
  preflight_ok=""
fi

ready=$preflight_ok   # the binaries run
if [[ -n $preflight_ok && -n $need_rebuild ]]; then
  say "REBUILDING on the box because $need_rebuild"
  section build 240 build_on_box   # estimate: the old on-box build
  keel_bin=$rebuild_dir/keel test_bin=$rebuild_dir/tests/test_cuda
  for d in "$carry/prefix" "$repo/offline-deps"; do
    [[ -d $d/include ]] && { run_libs=$d/lib/x86_64-linux-gnu:$d/lib:$run_libs; break; }
  done
  write_wrappers
  if ! "$keel" --version > "$scratch/version.txt" 2>&1; then
    say "the rebuilt keel does not run either: $(head -n 1 "$scratch/version.txt"); nothing else runs"
    ready=""
    [[ " ${failed[*]} " == *" build "* ]] || failed+=(build)
  else
    fact keel "$(head -n 1 "$scratch/version.txt") (rebuilt)"
  fi
fi
if [[ -n $ready ]]; then
  "part$part"
fi
if [[ -n $only ]]; then  # a name that matched nothing is a typo, not a pass
  for name in ${only//,/ }; do
    if [[ " ${selected[*]} " != *" $name "* ]]; then
      say "GPU_CHECK_ONLY: part $part has no section '$name'"
      record "$name" failed 0 0 "GPU_CHECK_ONLY names no section of part $part"
      failed+=("$name")
    fi
  done
fi

# ------------------------------------------------------------------ results
status=0
(( ${#failed[@]} )) && status=1
[[ -z $preflight_ok ]] && status=2
publish final
if [[ -f $out/summary.md ]]; then sed -n '/^| check/,/^$/p' "$out/summary.md"; fi
say "done in $((SECONDS - t_start)) s; results in $out: $(ls "$out" | tr '\n' ' ')"
[[ -z ${GPU_CHECK_SCRATCH:-} ]] && rm -rf "$scratch"
if (( status == 2 )); then say "preflight FAILED"; exit 2; fi
if (( status == 1 )); then say "FAILED: ${failed[*]:-summary}"; exit 1; fi
say "all checks passed"
