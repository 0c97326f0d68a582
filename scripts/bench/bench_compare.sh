#!/usr/bin/env bash
# keel vs PyTorch on the same machine: runs `keel bench` and the PyTorch
# reference (bench/bench_pytorch.py, eager and torch.compile) alternately,
# RUNS rounds, all on uniform random tokens with the same config file, then
# prints the median tokens/s of each and the ratios keel/eager, keel/compile
# (of the medians, and the range of round-by-round ratios).
#   scripts/bench/bench_compare.sh CONFIG [RUNS] [--set k=v ...]
# Environment: KEEL (binary, default build/keel), PYTHON (default
# .venv/bin/python), STEPS (timed steps, default 10), WARMUP (default 3),
# MODES (default "eager compile"), OUT (records, default runs/bench/compare-<config>).
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:?usage: scripts/bench/bench_compare.sh CONFIG [RUNS] [--set k=v ...]}
shift
runs=3
if [[ $# -gt 0 && $1 != --* ]]; then runs=$1; shift; fi
sets=()
while [[ $# -gt 0 ]]; do
  [[ $1 == --set && $# -ge 2 ]] || { echo "unexpected argument: $1" >&2; exit 2; }
  sets+=(--set "$2"); shift 2
done
keel=${KEEL:-build/keel}
py=${PYTHON:-.venv/bin/python}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
modes=${MODES:-eager compile}
name=$(basename "$config" .yaml)
out=${OUT:-runs/bench/compare-$name}
mkdir -p "$out"
rm -f "$out"/*.json
[[ -x $keel ]] || { echo "no keel binary at $keel (set KEEL=...)" >&2; exit 2; }

echo "bench_compare: $config, $runs rounds of keel + ($modes), $steps steps after $warmup warm-up; load $(cut -d' ' -f1-3 /proc/loadavg)"
# What lowers the kernels' instruction set below the CPU's, for both sides
# (docs/speed.md, "AVX2 on an AVX-512 machine").
for v in ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA MKL_ENABLE_INSTRUCTIONS KEEL_CPU_CAPABILITY; do
  [[ -n ${!v:-} ]] && echo "  $v=${!v}"
done
# Inductor's cache does not key its compiled kernels by ATEN_CPU_CAPABILITY:
# with kernels cached under AVX-512, an avx2 run of torch.compile died of a
# bus error in them (PyTorch 2.11). Each capability gets a cache of its own.
if [[ -n ${ATEN_CPU_CAPABILITY:-} && -z ${TORCHINDUCTOR_CACHE_DIR:-} ]]; then
  export TORCHINDUCTOR_CACHE_DIR=${TMPDIR:-/tmp}/torchinductor_$(id -un)_$ATEN_CPU_CAPABILITY
  echo "  TORCHINDUCTOR_CACHE_DIR=$TORCHINDUCTOR_CACHE_DIR"
fi
for r in $(seq 1 "$runs"); do
  "$keel" bench "$config" "${sets[@]}" --random-data --steps "$steps" --warmup "$warmup" \
      --breakdown-steps 0 --monitor-repeats 0 --json "$out/keel-$r.json" > "$out/keel-$r.log" 2>&1 \
      || { cat "$out/keel-$r.log"; exit 1; }
  echo "  round $r keel:    $(grep -E 'tokens/s' "$out/keel-$r.log" | sed 's/^ *//')"
  for mode in $modes; do
    "$py" bench/bench_pytorch.py "$config" "${sets[@]}" --mode "$mode" --steps "$steps" --warmup "$warmup" \
        --json "$out/$mode-$r.json" > "$out/$mode-$r.log" 2>&1 || { cat "$out/$mode-$r.log"; exit 1; }
    echo "  round $r $mode: $(grep -E '^pytorch' "$out/$mode-$r.log" | sed 's/.*median/median/')"
  done
done

"$py" - "$out" "$modes" <<'EOF'
import glob, json, statistics, sys
out, modes = sys.argv[1], sys.argv[2].split()
def load(tool):
    recs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{tool}-*.json"))]
    return recs
rows = {"keel": load("keel")}
for m in modes:
    rows[m] = load(m)
med = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in rows.items() if v}
ms = {k: statistics.median(r["step_ms"]["median"] for r in v) for k, v in rows.items() if v}
loads = [r["load_average"][0] for v in rows.values() for r in v]
print(f"\n{'':10s} {'tokens/s':>12s} {'ms/step':>10s} {'keel / this':>12s}   (median of {len(rows['keel'])} runs)")
# Round r of keel against round r of each mode: the rounds ran minutes
# apart, so their spread shows how much of the ratio the machine's hour decides.
paired = {k: [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(rows["keel"], rows[k])] for k in med if k != "keel"}
for k in med:
    ratio = med["keel"] / med[k]
    spread = f"   rounds {min(paired[k]):.3f}-{max(paired[k]):.3f}" if k in paired else ""
    print(f"{k:10s} {med[k]:12.0f} {ms[k]:10.2f} {ratio:12.3f}{spread}")
params = {k: v[0]["parameters"] for k, v in rows.items() if v}
print(f"parameters: {params}; 1-min load during the runs: {min(loads):.2f}-{max(loads):.2f}")
isa = {k: v[0].get("host", {}).get("kernel_isa") or v[0].get("kernel_isa") for k, v in rows.items() if v}
print(f"kernel ISA: {isa}")
summary = {"tokens_per_s": med, "step_ms": ms, "ratios": {f"keel/{k}": med["keel"] / med[k] for k in med if k != "keel"},
           "round_ratios": {f"keel/{k}": v for k, v in paired.items()},
           "parameters": params, "kernel_isa": isa, "load_1min": [min(loads), max(loads)], "runs": len(rows["keel"])}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"records: {out}/")
EOF
