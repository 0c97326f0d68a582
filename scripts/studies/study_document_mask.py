#!/usr/bin/env python3
"""The document-mask study's attention table and plots (issue 36).

keel report gives the losses with their intervals; this adds what the report
does not tabulate: per point, the final validation loss, the layer-0 max
attention logit, the attention entropy and the attention mass on the
window's first token (both averaged over layers), each the mean of the last
four monitoring steps (monitor.every: 50 on the batch's first
monitor.sequences sequences), as mean ± sd over seeds and as the paired
difference masked − packed (same seed: same initialisation and data order).

  .venv/bin/python scripts/studies/study_document_mask.py runs/sweeps/document-mask-cpu docs/results/document-mask-cpu
"""
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

NAME = re.compile(r"^(?P<variant>[a-z]+)_size=(?P<size>t\d+)_lr=(?P<lr>[0-9.e+-]+)_seed=(?P<seed>\d+)$")
LAST_MONITORS = 4


def read_run(run: Path) -> dict:
    monitors, curve = [], []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "attn" in rec:
            attn = rec["attn"]
            monitors.append({
                "step": rec["step"],
                "l0_max_logit": attn[0]["max_logit"],
                "entropy": statistics.fmean(a["entropy"] for a in attn),
                "first_token_mass": statistics.fmean(a["first_token_mass"] for a in attn),
                "l0_first_token_mass": attn[0]["first_token_mass"],
            })
        if "val_loss" in rec:
            curve.append((rec["step"], rec["val_loss"]))
    summary = json.loads((run / "summary.json").read_text())
    last = monitors[-LAST_MONITORS:]
    out = {k: statistics.fmean(m[k] for m in last) for k in last[0] if k != "step"}
    out["val_loss"] = summary["final_val_loss"]
    out["diverged"] = summary["diverged"]
    out["monitors"] = monitors
    out["val_curve"] = curve
    return out


def mean_sd(values):
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.fmean(values):.4g} ± {statistics.stdev(values):.2g}"


def main(sweep: Path, out: Path) -> None:
    runs = {}
    for d in sorted(sweep.iterdir()):
        m = NAME.match(d.name)
        if m and (d / "summary.json").exists():
            runs[(m["size"], float(m["lr"]), m["variant"], int(m["seed"]))] = read_run(d)
    if not runs:
        sys.exit(f"{sweep}: no finished runs")
    out.mkdir(parents=True, exist_ok=True)
    metrics = [("val_loss", "final val loss"), ("l0_max_logit", "layer-0 max logit"),
               ("entropy", "entropy (nats)"), ("first_token_mass", "first-token mass"),
               ("l0_first_token_mass", "layer-0 first-token mass")]
    points = defaultdict(dict)
    for (size, lr, variant, seed), r in runs.items():
        points[(size, lr, variant)][seed] = r
    lines = ["# Document masking: attention statistics", "",
             f"Made by `scripts/studies/study_document_mask.py {sweep} {out}` from the runs of "
             "`configs/sweeps/document-mask-cpu.yaml`. Attention statistics: the mean of the last "
             f"{LAST_MONITORS} monitoring steps (every 50 steps, the batch's first 2 sequences), entropy and "
             "first-token mass averaged over the 4 layers. Mean ± sd over seeds.", "",
             "| T | LR | variant | seeds | " + " | ".join(label for _, label in metrics) + " |",
             "|---|---|---|---|" + "---|" * len(metrics)]
    for (size, lr, variant) in sorted(points, key=lambda p: (int(p[0][1:]), p[1], p[2] != "packed")):
        seeds = points[(size, lr, variant)]
        cells = [mean_sd([r[k] for r in seeds.values()]) for k, _ in metrics]
        diverged = sum(r["diverged"] for r in seeds.values())
        tag = f" ({diverged} diverged)" if diverged else ""
        lines.append(f"| {size[1:]} | {lr:g} | {variant}{tag} | {len(seeds)} | " + " | ".join(cells) + " |")
    lines += ["", "Paired differences, masked − packed, per seed (same initialisation and data order):", "",
              "| T | LR | " + " | ".join(label for _, label in metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for (size, lr) in sorted({(s, l) for s, l, _ in points}, key=lambda p: (int(p[0][1:]), p[1])):
        packed, masked = points.get((size, lr, "packed"), {}), points.get((size, lr, "masked"), {})
        common = sorted(set(packed) & set(masked))
        if not common:
            continue
        cells = []
        for k, _ in metrics:
            diffs = [masked[s][k] - packed[s][k] for s in common]
            cells.append(", ".join(f"{d:+.3g}" for d in diffs))
        lines.append(f"| {size[1:]} | {lr:g} | " + " | ".join(cells) + " |")
    (out / "attention.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(points, out)


def plot(points, out: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots")
        return
    sizes = sorted({p[0] for p in points}, key=lambda s: int(s[1:]))
    lrs = sorted({p[1] for p in points})
    fig, axes = plt.subplots(2, len(sizes), figsize=(5 * len(sizes), 7), squeeze=False)
    colours = {"packed": "tab:blue", "masked": "tab:orange"}
    for j, size in enumerate(sizes):
        for (sz, lr, variant), seeds in points.items():
            if sz != size:
                continue
            style = "-" if lr == lrs[0] else "--"
            for i, (seed, r) in enumerate(sorted(seeds.items())):
                label = f"{variant}, LR {lr:g}" if i == 0 else None
                steps = [m["step"] for m in r["monitors"]]
                axes[0][j].plot(steps, [m["first_token_mass"] for m in r["monitors"]], style,
                                color=colours[variant], label=label, alpha=0.8)
                vs, vl = zip(*r["val_curve"])
                axes[1][j].plot(vs, vl, style, color=colours[variant], label=label, alpha=0.8)
        axes[0][j].set_title(f"T = {size[1:]}: attention mass on the window's first token")
        axes[0][j].set_xlabel("step")
        axes[0][j].set_ylabel("mean over layers")
        axes[1][j].set_title(f"T = {size[1:]}: validation loss")
        axes[1][j].set_xlabel("step")
        axes[1][j].set_ylim(top=6)
        for ax in axes[:, j]:
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "attention.png", dpi=110)
    print(f"wrote {out / 'attention.png'}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
