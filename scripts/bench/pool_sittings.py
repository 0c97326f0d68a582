#!/usr/bin/env python3
"""Pools sittings of scripts/bench/bench_compare.sh (one config, one set of
kernel ISAs) into one estimate of keel/eager and keel/compile with an interval.

    scripts/bench/pool_sittings.py DIR DIR ... [--target eager=1.3] [--json PATH]

Each DIR is one sitting's records (the script's OUT: keel-N.json and
MODE-N.json). A sitting's ratio is bench_compare's: keel's median tokens/s
over the mode's. On a shared machine one sitting says as much about the hour
as about the code, so the pooled figure is the mean of the sittings' ratios
with a two-level percentile bootstrap: resample sittings, then rounds within
each, recompute each sitting's ratio of medians. Sittings of other configs,
parameter counts or kernel ISAs are refused (exit 2), as is a directory given
twice.
"""
import argparse
import json
import random
import statistics
import sys
from pathlib import Path

MAX_ROUNDS = 1000  # a sitting has a handful; more means the wrong directory
MAX_RECORD_BYTES = 16 << 20  # a bench record is a few KiB


def fail(msg):
    print(f"pool_sittings: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            fail(f"{path}: {path.stat().st_size} bytes, more than a bench record's {MAX_RECORD_BYTES}")
        rec = json.loads(path.read_text())
        tps = float(rec["tokens_per_s"])
        isa = (rec.get("host") or {}).get("kernel_isa") or rec.get("kernel_isa")
        return {"config": rec["config"], "parameters": int(rec["parameters"]), "tokens_per_s": tps, "isa": isa,
                "load": (rec.get("load_average") or [None])[0]}
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        fail(f"{path}: not a bench record ({type(e).__name__}: {e})")


def sitting(d, modes):
    d = Path(d)
    if not d.is_dir():
        fail(f"{d}: no such directory")
    rounds = sorted(d.glob("keel-*.json"), key=lambda p: p.stem)
    if not rounds:
        fail(f"{d}: no keel-N.json records (a bench_compare.sh OUT directory?)")
    if len(rounds) > MAX_ROUNDS:
        fail(f"{d}: {len(rounds)} rounds, more than {MAX_ROUNDS}")
    out = {"dir": str(d), "keel": [], **{m: [] for m in modes}}
    for p in rounds:
        n = p.stem.split("-", 1)[1]
        out["keel"].append(load(p))
        for m in modes:
            q = d / f"{m}-{n}.json"
            if not q.exists():
                fail(f"{q}: missing (round {n} of keel has no {m} round)")
            out[m].append(load(q))
    return out


def ratio_of_medians(keel, other):
    return statistics.median(keel) / statistics.median(other)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="bench_compare.sh OUT directories, one per sitting")
    ap.add_argument("--modes", default="eager compile", help='the PyTorch modes to pool (default "eager compile")')
    ap.add_argument("--target", action="append", default=[],
                    help="MODE=RATIO: count the sittings at or above it (default eager=1.3, compile=1.1, issue 55's)")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the pooled figures here")
    a = ap.parse_args(argv)
    modes = a.modes.split()
    if not 100 <= a.resamples <= 1_000_000:
        fail(f"--resamples {a.resamples}: give 100 to 1000000")
    targets = {"eager": 1.3, "compile": 1.1}
    for t in a.target:
        mode, _, value = t.partition("=")
        try:
            targets[mode] = float(value)
        except ValueError:
            fail(f"--target {t}: give MODE=RATIO, e.g. eager=1.3")
    seen = set()
    for d in a.dirs:
        key = Path(d).resolve()
        if key in seen:
            fail(f"{d}: given twice; a sitting counts once")
        seen.add(key)
    sittings = [sitting(d, modes) for d in a.dirs]

    # One config, model and kernel ISA per side across every sitting.
    first = sittings[0]
    for s in sittings:
        for side in ["keel", *modes]:
            for i, r in enumerate(s[side]):
                ref = first[side][0]
                for field in ("config", "parameters", "isa"):
                    if r[field] != ref[field]:
                        fail(f"{s['dir']}/{side}-{i + 1}.json: {field} {r[field]}, but "
                             f"{first['dir']}/{side}-1.json has {ref[field]}")

    rng = random.Random(a.seed)
    report = {"config": first["keel"][0]["config"], "parameters": first["keel"][0]["parameters"],
              "kernel_isa": {side: first[side][0]["isa"] for side in ["keel", *modes]},
              "sittings": [], "pooled": {}}
    tokens = [{side: [r["tokens_per_s"] for r in s[side]] for side in ["keel", *modes]} for s in sittings]
    for s, t in zip(sittings, tokens):
        loads = [r["load"] for side in ["keel", *modes] for r in s[side] if r["load"] is not None]
        row = {"dir": s["dir"], "rounds": len(s["keel"]), "load_1min": [min(loads), max(loads)] if loads else None}
        for m in modes:
            row[f"keel/{m}"] = ratio_of_medians(t["keel"], t[m])
            row[f"keel/{m} rounds"] = [x / y for x, y in zip(t["keel"], t[m])]
        report["sittings"].append(row)

    for m in modes:
        pairs = [(t["keel"], t[m]) for t in tokens]
        ratios = [row[f"keel/{m}"] for row in report["sittings"]]
        boot = []
        for _ in range(a.resamples):
            chosen = [pairs[rng.randrange(len(pairs))] for _ in pairs]
            vals = []
            for k, o in chosen:
                idx = [rng.randrange(len(k)) for _ in k]  # rounds stay paired: keel's and the mode's of one round
                vals.append(ratio_of_medians([k[i] for i in idx], [o[i] for i in idx]))
            boot.append(statistics.fmean(vals))
        boot.sort()
        lo, hi = boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]
        entry = {"mean_of_sittings": statistics.fmean(ratios), "ci95": [lo, hi]}
        if m in targets:
            entry["target"] = targets[m]
            entry["sittings_at_or_above"] = sum(r >= targets[m] for r in ratios)
        report["pooled"][f"keel/{m}"] = entry

    print(f"pool_sittings: {report['config']} ({report['parameters']:,} parameters), {len(sittings)} sittings, "
          f"{sum(r['rounds'] for r in report['sittings'])} rounds; kernel ISA {report['kernel_isa']['keel']}")
    print(f"  {'sitting':40s} {'rounds':>6s}  " + "  ".join(f"{'keel/' + m + ' (rounds)':>24s}" for m in modes))
    for row in report["sittings"]:
        cells = [f"{row[f'keel/{m}']:.3f} ({min(row[f'keel/{m} rounds']):.2f}-{max(row[f'keel/{m} rounds']):.2f})"
                 for m in modes]
        print(f"  {row['dir']:40s} {row['rounds']:6d}  " + "  ".join(f"{c:>24s}" for c in cells))
    print(f"  pooled: mean of the sittings' ratios, 95% interval of a two-level bootstrap "
          f"(sittings, then rounds; {a.resamples} resamples)")
    for m in modes:
        p = report["pooled"][f"keel/{m}"]
        met = (f"; {p['sittings_at_or_above']} of {len(sittings)} sittings at or above {p['target']}"
               if "target" in p else "")
        print(f"  keel/{m}: {p['mean_of_sittings']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}]{met}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
