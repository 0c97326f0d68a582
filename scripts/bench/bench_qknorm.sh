#!/usr/bin/env bash
# What QK-Norm and monitoring cost: `keel bench` with model.qk_norm.type
# none / rms / l2 (per head, before RoPE), alternating, RUNS rounds; prints
# the median ms/step of each, the overhead against none, and the cost of the
# default monitoring (the statistics forward every monitor.every steps,
# amortised; `keel bench` times it separately).
#   scripts/bench/bench_qknorm.sh CONFIG [RUNS] [keel bench options ...]
# Environment: KEEL (default build/keel), PYTHON (for the table, default
# python3), STEPS (default 20), WARMUP (3),
# OUT (default runs/bench/qknorm-<config>).
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:?usage: scripts/bench/bench_qknorm.sh CONFIG [RUNS] [keel bench options ...]}
shift
runs=3
if [[ $# -gt 0 && $1 != --* ]]; then runs=$1; shift; fi
keel=${KEEL:-build/keel}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
name=$(basename "$config" .yaml)
out=${OUT:-runs/bench/qknorm-$name}
mkdir -p "$out"
rm -f "$out"/*.json
echo "bench_qknorm: $config, $runs rounds of qk_norm none/rms/l2, $steps steps; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  for qk in none rms l2; do
    "$keel" bench "$config" --set model.qk_norm.type=$qk --steps "$steps" --warmup "$warmup" \
        --breakdown-steps 0 "$@" --json "$out/$qk-$r.json" > "$out/$qk-$r.log" 2>&1 || { cat "$out/$qk-$r.log"; exit 1; }
    echo "  round $r $qk: $(grep -E '^  step' "$out/$qk-$r.log" | sed 's/^ *step *//')"
  done
done
"${PYTHON:-python3}" - "$out" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]
rec = {qk: [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{qk}-*.json"))] for qk in ("none", "rms", "l2")}
ms = {qk: statistics.median(r["step_ms"]["median"] for r in v) for qk, v in rec.items()}
print(f"\n{'qk_norm':8s} {'ms/step':>10s} {'vs none':>9s}")
for qk in ms:
    print(f"{qk:8s} {ms[qk]:10.2f} {100 * (ms[qk] / ms['none'] - 1):+8.2f}%")
mon = [r["monitor"] for v in rec.values() for r in v if r["monitor"].get("stats_ms") is not None]
if mon:
    pct = statistics.median(m["percent_of_step"] for m in mon)
    print(f"monitoring (every {mon[0]['every']} steps, {mon[0]['sequences']} sequences): "
          f"{statistics.median(m['stats_ms'] for m in mon):.2f} ms per statistics forward, "
          f"{pct:.2f}% of the step amortised")
loads = [r["load_average"][0] for v in rec.values() for r in v]
print(f"1-min load during the runs: {min(loads):.2f}-{max(loads):.2f}")
json.dump({"step_ms": ms, "overhead_percent": {k: 100 * (ms[k] / ms["none"] - 1) for k in ms},
           "monitor_percent": statistics.median(m["percent_of_step"] for m in mon) if mon else None},
          open(f"{out}/summary.json", "w"), indent=2)
EOF
