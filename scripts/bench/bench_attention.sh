#!/usr/bin/env bash
# What a softcap, a clamp or QK-clip costs now that they run on the blockwise
# attention (src/model/blockwise_attention.h) instead of SDPA: `keel bench`
# at each sequence length with softcap off (SDPA), model.attn_softcap: 50 and
# train.qk_clip_tau: 100 (both blockwise), one process each, so each record's
# peak RSS is its own. Prints peak memory and tokens/s against SDPA's.
#   scripts/bench/bench_attention.sh CONFIG "T1 T2 ..." [keel bench options ...]
# Environment: KEEL (default build/keel), PYTHON (python3), STEPS (8),
# WARMUP (2), OUT (default runs/bench/attention-<config>), VARIANTS (default
# "sdpa softcap qkclip"; with OLD_KEEL set, "explicit" runs softcap on that
# binary, e.g. a build from before the blockwise path).
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:?usage: scripts/bench/bench_attention.sh CONFIG "T1 T2 ..." [keel bench options ...]}
lengths=${2:?usage: scripts/bench/bench_attention.sh CONFIG "T1 T2 ..." [keel bench options ...]}
shift 2
keel=${KEEL:-build/keel}
steps=${STEPS:-8}
warmup=${WARMUP:-2}
variants=${VARIANTS:-sdpa softcap qkclip}
name=$(basename "$config" .yaml)
out=${OUT:-runs/bench/attention-$name}
mkdir -p "$out"
rm -f "$out"/*.json
echo "bench_attention: $config, T in {$lengths}, $steps steps; load $(cut -d' ' -f1-3 /proc/loadavg)"
for T in $lengths; do
  for v in $variants; do
    bin=$keel
    case $v in
      sdpa) extra=() ;;
      softcap) extra=(--set model.attn_softcap=50) ;;
      qkclip) extra=(--set train.qk_clip_tau=100) ;;
      explicit) bin=${OLD_KEEL:?explicit needs OLD_KEEL}; extra=(--set model.attn_softcap=50) ;;
      *) echo "unknown variant $v"; exit 2 ;;
    esac
    "$bin" bench "$config" --random-data --set model.max_seq_len="$T" "${extra[@]}" --steps "$steps" \
        --warmup "$warmup" --breakdown-steps 0 --monitor-repeats 0 --no-op-count "$@" \
        --json "$out/$v-$T.json" > "$out/$v-$T.log" 2>&1 || { cat "$out/$v-$T.log"; exit 1; }
    echo "  T $T $v: $(grep -E '^  step' "$out/$v-$T.log" | sed 's/^ *step *//')"
  done
done
"${PYTHON:-python3}" - "$out" "$lengths" "$variants" <<'EOF'
import json, os, sys
out, lengths, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print(f"\n| T | variant | attention | peak RSS (MiB) | vs SDPA | tokens/s | SDPA / this |")
print("|---|---|---|---|---|---|---|")
for T in lengths:
    rec = {v: json.load(open(f"{out}/{v}-{T}.json")) for v in variants if os.path.exists(f"{out}/{v}-{T}.json")}
    base = rec.get("sdpa")
    for v, r in rec.items():
        mem, tps = r["peak_memory_bytes"] / 2**20, r["tokens_per_s"]
        kernel = (r.get("attention") or {}).get("kernel", "explicit (old build)")
        rel_mem = f"{mem / (base['peak_memory_bytes'] / 2**20):.2f}x" if base else "-"
        rel_tps = f"{base['tokens_per_s'] / tps:.2f}x" if base else "-"
        print(f"| {T} | {v} | {kernel} | {mem:,.0f} | {rel_mem} | {tps:,.0f} | {rel_tps} |")
host = next(iter(json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out)) if f.endswith(".json")))
print(f"\nmachine: {host.get('host', {}).get('cpu_model', '?')} [{host.get('host', {}).get('cpu_isa', '?')}], "
      f"{host.get('host', {}).get('cores', '?')} cores; {host.get('device_name', '?')}")
EOF
