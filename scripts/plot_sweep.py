#!/usr/bin/env python3
"""Plots of a keel sweep, called by `keel report SWEEP_DIR` (PNG and SVG).

    python scripts/plot_sweep.py SWEEP_DIR OUT_DIR

Reads OUT_DIR/summary.csv and OUT_DIR/lr_sensitivity.csv (written by
`keel report` just before), SWEEP_DIR/sweep.json and each point's
metrics.jsonl and spikes.jsonl; writes OUT_DIR/plots/:

  loss_vs_lr    final validation loss against peak LR (log x), one line per
                variant; diverged points drawn as x at l0; with several seeds
                the mean and a band of one standard deviation
  loss_curves   training loss per variant, one curve per LR (colour: LR)
  attn_logit    layer-0 maximum attention logit per variant (log y) with
                the divergence threshold
  grad_norm     gradient norm per variant (log y), detected spikes marked
"""
import csv
import json
import math
import statistics
import sys
from pathlib import Path

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
except ImportError as e:  # keel report turns this into a note in report.md
    sys.exit(f"plot_sweep.py: matplotlib is not installed ({e}); "
             "install it with: .venv/bin/pip install -r scripts/requirements.txt")

# Byte-stable SVGs, so a regenerated report diffs only where the data changed.
plt.rcParams["svg.hashsalt"] = "keel"
plt.rcParams["font.size"] = 9


def number(text):
    try:
        v = float(text)
        return v if math.isfinite(v) else math.nan
    except (TypeError, ValueError):
        return math.nan


def read_jsonl(path):
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line being written while we read
    return out


def save(fig, out_dir, name):
    fig.savefig(out_dir / f"{name}.png", dpi=130, metadata={"Software": None})
    fig.savefig(out_dir / f"{name}.svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)


def variant_grid(n):
    cols = min(n, 2) if n <= 4 else 3
    rows = (n + cols - 1) // cols
    # Shared axes: the variants are compared at a glance.
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.0 * rows), squeeze=False, sharex=True,
                             sharey=True, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sweep_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    rows = list(csv.DictReader((out_dir / "summary.csv").open()))
    init = {r["variant"]: number(r["init_loss"]) for r in csv.DictReader((out_dir / "lr_sensitivity.csv").open())}
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    attn_threshold = number(manifest.get("config", {}).get("monitor.diverge_attn_logit", "1e4"))

    lrs = sorted({number(r["lr"]) for r in rows if math.isfinite(number(r["lr"]))})
    norm = LogNorm(vmin=min(lrs), vmax=max(lrs)) if len(lrs) > 1 else None
    cmap = plt.get_cmap("viridis")

    def colour(lr):
        return cmap(norm(lr)) if norm else cmap(0.5)

    # 1. Final loss against LR.
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    top = [v for v in init.values() if math.isfinite(v)]
    for i, variant in enumerate(variants):
        pts = [r for r in rows if r["variant"] == variant and r["status"] in ("completed", "diverged", "nonfinite")]
        l0 = init.get(variant, math.nan)
        by_lr = {}
        for r in pts:
            lr = number(r["lr"])
            loss = number(r["final_val_loss"])
            if not math.isfinite(loss):
                loss = number(r["final_loss"])
            diverged = r["diverged"] == "true" or not math.isfinite(loss)
            value = l0 if diverged else (min(loss, l0) if math.isfinite(l0) else loss)
            by_lr.setdefault(lr, []).append((value, diverged))
        xs = sorted(by_lr)
        ys = [sum(v for v, _ in by_lr[x]) / len(by_lr[x]) for x in xs]
        seeds = max((len(v) for v in by_lr.values()), default=1)
        label = variant + (f" (mean of {seeds} seeds ± sd)" if seeds > 1 else "")
        line, = ax.plot(xs, ys, "o-", label=label, color=f"C{i}", markersize=4)
        if seeds > 1:  # error band: the standard deviation over seeds at each LR (diverged ones at l0)
            sd = [statistics.stdev([v for v, _ in by_lr[x]]) if len(by_lr[x]) > 1 else 0.0 for x in xs]
            ax.fill_between(xs, [y - e for y, e in zip(ys, sd)], [y + e for y, e in zip(ys, sd)],
                            color=line.get_color(), alpha=0.2, linewidth=0)
        dx = [x for x in xs if any(d for _, d in by_lr[x])]
        dy = [l0 for _ in dx]
        if dx:
            ax.plot(dx, dy, "x", color=line.get_color(), markersize=10, markeredgewidth=2)
    if top:
        ax.axhline(max(top), color="grey", linestyle="--", linewidth=0.8, label="ℓ₀ (init); × = diverged")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss")
    ax.set_title(f"{manifest.get('name', '')}: final loss vs LR")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, plots, "loss_vs_lr")

    # Curves of every point, grouped by variant.
    curves = {}
    for r in rows:
        recs = read_jsonl(sweep_dir / r["point"] / "metrics.jsonl")
        spikes = read_jsonl(sweep_dir / r["point"] / "spikes.jsonl")
        curves[r["point"]] = (r, recs, spikes)

    def per_variant(name, title, draw, ylabel, logy=False, hline=None, ymax=None):
        fig, axes = variant_grid(len(variants))
        for ax, variant in zip(axes, variants):
            for point, (r, recs, spikes) in curves.items():
                if r["variant"] == variant and recs:
                    draw(ax, r, recs, spikes, colour(number(r["lr"])))
            if hline is not None and math.isfinite(hline):
                ax.axhline(hline, color="red", linestyle="--", linewidth=0.8)
            if logy:
                ax.set_yscale("log")
            if ymax is not None and math.isfinite(ymax):
                ax.set_ylim(top=ymax)
            ax.set_title(variant)
            ax.set_xlabel("step")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
        if norm:
            sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
            fig.colorbar(sm, ax=axes, label="peak LR", aspect=30)
        fig.suptitle(title)
        save(fig, plots, name)

    def draw_loss(ax, r, recs, spikes, c):
        pts = [(x["step"], x["loss"]) for x in recs if isinstance(x.get("loss"), (int, float))]
        if pts:
            ax.plot(*zip(*pts), color=c, linewidth=1)
            if r["diverged"] == "true":
                ax.plot(*pts[-1], "x", color=c, markersize=8, markeredgewidth=2)

    def draw_attn(ax, r, recs, spikes, c):
        pts = [(x["step"], x["attn"][0]["max_logit"]) for x in recs
               if x.get("attn") and isinstance(x["attn"][0].get("max_logit"), (int, float))]
        if pts:
            ax.plot(*zip(*pts), color=c, linewidth=1, marker=".", markersize=3)

    def draw_grad(ax, r, recs, spikes, c):
        pts = [(x["step"], x["grad_norm"]) for x in recs if isinstance(x.get("grad_norm"), (int, float))]
        if pts:
            ax.plot(*zip(*pts), color=c, linewidth=1)
        sp = [(s["step"], s["value"]) for s in spikes
              if s.get("signal") == "grad_norm" and isinstance(s.get("value"), (int, float))]
        if sp:
            ax.plot(*zip(*sp), "o", color="red", markersize=4)

    # A diverged run's loss can climb far above l0; the interesting range is below it.
    per_variant("loss_curves", "training loss (× = diverged, run stopped)", draw_loss, "loss",
                ymax=max(top) + 0.5 if top else None)
    per_variant("attn_logit", "layer-0 max attention logit (dashed: divergence threshold)", draw_attn,
                "max |logit|", logy=True, hline=attn_threshold)
    per_variant("grad_norm", "gradient norm (red: detected spikes)", draw_grad, "grad norm", logy=True)


if __name__ == "__main__":
    main()
