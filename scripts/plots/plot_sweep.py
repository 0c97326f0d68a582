#!/usr/bin/env python3
"""Plots of a keel sweep, called by `keel report SWEEP_DIR` (PNG and SVG).

    python scripts/plots/plot_sweep.py SWEEP_DIR OUT_DIR

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
  output_logit  largest output logit and mean log Z per variant (when the
                runs logged output-logit statistics)
  layer_update_ratio  per variant, at its largest LR (first seed): each
                block's update/weight RMS ratio (mean over its matrices)
                against step, colour by layer (monitor.param_stats)
  adam_eps_share  per variant, one curve per LR: the share of Adam's
                second-moment entries with sqrt(v_hat) under eps, over all
                matrices (Wortsman et al. 2023, section 3.4)

With a model-size axis (`sizes:` in the sweep file; Wortsman et al. 2023,
Fig. 1) also:

  loss_vs_lr_by_size        final loss against LR, one panel per condition,
                            one line per size
  best_lr_vs_size           best LR against d_model (or n_layers), per condition
  lr_sensitivity_vs_params  LR sensitivity against non-embedding parameters
                            (log x), one line per condition, bootstrap bars
  attn_logit_vs_params      largest layer-0 attention logit against
                            non-embedding parameters, one panel per LR
  edge_vs_width             (OUT_DIR/edge_width.csv) the stability edge per
                            criterion against d_model, its grid bracket and
                            fitted line; below, each condition's edge over
                            the first condition's
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
             "install it with: .venv/bin/pip install -r scripts/build/requirements.txt")

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
    """The records (objects with a whole "step") of a JSON-lines log.

    keel checks every log before it runs this script (check_run_logs): depth,
    line length, record shape. The guards here only keep a file that changed
    since from ending in a traceback: lines are split at "\\n" alone, as keel
    splits them (splitlines() also splits inside strings, at U+2028 and
    others), and a line that is not a record is skipped like one being
    written."""
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a line being written while we read, or torn by a crash
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                out.append(rec)
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


def draw_loss_vs_lr(ax, rows, l0, label, colour):
    """One line of final loss against LR: the mean over seeds with a band of
    one standard deviation, diverged points counted at l0 and marked x."""
    by_lr = {}
    for r in rows:
        if r["status"] not in ("completed", "diverged", "nonfinite", "logit_unstable"):
            continue
        loss = number(r["final_val_loss"])
        if not math.isfinite(loss):
            loss = number(r["final_loss"])
        diverged = r["diverged"] == "true" or not math.isfinite(loss)
        value = l0 if diverged else (min(loss, l0) if math.isfinite(l0) else loss)
        by_lr.setdefault(number(r["lr"]), []).append((value, diverged))
    xs = sorted(by_lr)
    if not xs:
        return
    ys = [sum(v for v, _ in by_lr[x]) / len(by_lr[x]) for x in xs]
    seeds = max(len(v) for v in by_lr.values())
    line, = ax.plot(xs, ys, "o-", label=label + (f" (mean of {seeds} seeds ± sd)" if seeds > 1 else ""),
                    color=colour, markersize=4)
    if seeds > 1:  # error band: the standard deviation over seeds at each LR (diverged ones at l0)
        sd = [statistics.stdev([v for v, _ in by_lr[x]]) if len(by_lr[x]) > 1 else 0.0 for x in xs]
        ax.fill_between(xs, [y - e for y, e in zip(ys, sd)], [y + e for y, e in zip(ys, sd)],
                        color=line.get_color(), alpha=0.2, linewidth=0)
    dx = [x for x in xs if any(d for _, d in by_lr[x])]
    if dx:
        ax.plot(dx, [l0 for _ in dx], "x", color=line.get_color(), markersize=10, markeredgewidth=2)


def finish_loss_vs_lr(ax, top, title):
    if top:
        ax.axhline(max(top), color="grey", linestyle="--", linewidth=0.8, label="ℓ₀ (init); × = diverged")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def median(values):
    values = [v for v in values if math.isfinite(v)]
    return statistics.median(values) if values else math.nan


def best_lr_vs_size(conditions, sens, plots):
    """The transfer reading (issue 33): best LR against d_model (or n_layers when
    the width is fixed), per condition, with the bootstrap interval over seeds."""
    widths = {number(v.get("d_model", "nan")) for v in sens}
    axis = "d_model" if len({w for w in widths if math.isfinite(w)}) > 1 else "n_layers"
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    drawn = False
    for i, condition in enumerate(conditions):
        pts = sorted((number(v.get(axis, "nan")), number(v["best_lr"]), number(v.get("best_lr_lo", "nan")),
                      number(v.get("best_lr_hi", "nan"))) for v in sens if v["condition"] == condition)
        pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
        if len(pts) < 2:
            continue
        drawn = True
        xs, ys, lo, hi = zip(*pts)
        ax.plot(xs, ys, "o-", color=f"C{i}", label=condition, markersize=5)
        bars = [(x, y, l, h) for x, y, l, h in pts if math.isfinite(l) and math.isfinite(h)]
        if bars:
            bx, by, bl, bh = zip(*bars)
            ax.errorbar(bx, by, yerr=[[max(0.0, y - l) for y, l in zip(by, bl)], [max(0.0, h - y) for y, h in zip(by, bh)]],
                        fmt="none", ecolor=f"C{i}", capsize=3)
    if not drawn:
        plt.close(fig)
        return
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(axis)
    ax.set_ylabel("best peak LR (95% bootstrap over seeds)")
    ax.set_title("best LR vs model size: flat means the LR transfers")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, plots, "best_lr_vs_size")


def edge_vs_width(path, plots):
    """Issue 51: the edge per criterion against width, bracket bars from the
    largest LR that passed to the smallest that failed (an arrow where the
    edge lies above the grid), and the least-squares line to the target width."""
    rows = list(csv.DictReader(path.open()))
    criteria = list(dict.fromkeys(r["criterion"] for r in rows))
    kinds = [k for k in ("edge", "ratio") if any(r["kind"] == k for r in rows)]
    if not criteria or not kinds:
        return
    fig, axes = plt.subplots(len(kinds), len(criteria), figsize=(3.6 * len(criteria), 3.2 * len(kinds)),
                             layout="constrained", squeeze=False)
    for row, kind in enumerate(kinds):
        labels = list(dict.fromkeys(r["condition"] for r in rows if r["kind"] == kind))
        for col, criterion in enumerate(criteria):
            ax = axes[row][col]
            for i, label in enumerate(labels):
                pts = sorted((number(r["width"]), number(r["lo"]), number(r["hi"]), number(r["point"]), r)
                             for r in rows if r["kind"] == kind and r["condition"] == label and r["criterion"] == criterion)
                if not pts:
                    continue
                c = f"C{i}"
                for w, lo, hi, point, _ in pts:
                    if lo > 0 and math.isfinite(hi):
                        ax.plot([w, w], [lo, hi], color=c, linewidth=5, alpha=0.3, solid_capstyle="butt")
                    elif lo > 0:  # above the grid: at least lo
                        ax.plot([w], [lo], "^", color=c, markersize=7, alpha=0.6)
                    elif math.isfinite(hi) and hi > 0:  # below the grid: under hi
                        ax.plot([w], [hi], "v", color=c, markersize=7, alpha=0.6)
                    if math.isfinite(point):
                        ax.plot([w], [point], "o", color=c, markersize=5)
                fit = pts[0][4]
                slope, target, at = number(fit["slope"]), number(fit["target_width"]), number(fit["at_target"])
                if math.isfinite(slope) and math.isfinite(at):
                    xs = [pts[0][0], target]
                    # the seeds' 95% bootstrap on the slope, where two or more seeds were resampled
                    lo, hi = number(fit.get("slope_seed_lo", "")), number(fit.get("slope_seed_hi", ""))
                    spread = f", seeds {lo:+.2f} to {hi:+.2f}" if math.isfinite(lo) and math.isfinite(hi) else ""
                    ax.plot(xs, [at * (x / target) ** slope for x in xs], "--", color=c, linewidth=1,
                            label=f"{label} ({slope:+.2f}/doubling{spread})")
                else:
                    ax.plot([], [], "o", color=c, label=f"{label} (no fit)")
            if any(y > 0 and math.isfinite(y) for line in ax.get_lines() for y in line.get_ydata()):
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
            else:  # nothing bounded to draw (every edge above the grid on both sides of a ratio)
                ax.text(0.5, 0.5, "no edge bounded by the grid", transform=ax.transAxes, ha="center", fontsize=8)
            ax.set_title(criterion.replace("_", " "), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            if row == len(kinds) - 1:
                ax.set_xlabel("d_model")
        axes[row][0].set_ylabel("edge (largest LR that passed)" if kind == "edge" else "edge / first condition's")
    save(fig, plots, "edge_vs_width")


def size_plots(rows, sens, init, attn_threshold, plots):
    """Wortsman et al. (2023), Fig. 1: the model-size axis."""
    conditions = list(dict.fromkeys(r["condition"] for r in rows))
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    size_colour = {s: plt.get_cmap("plasma")(0.85 * i / max(1, len(sizes) - 1)) for i, s in enumerate(sizes)}
    params = {}  # size -> non-embedding parameters
    for r in rows:
        n = number(r.get("non_embedding_parameters"))
        if math.isfinite(n):
            params[r["size"]] = n
    top = [v for v in init.values() if math.isfinite(v)]

    fig, axes = variant_grid(len(conditions))
    for ax, condition in zip(axes, conditions):
        for size in sizes:
            variant_rows = [r for r in rows if r["condition"] == condition and r["size"] == size]
            if variant_rows:
                n = params.get(size)
                label = f"{size} ({n / 1e6:.2f}M)" if n else size
                draw_loss_vs_lr(ax, variant_rows, init.get(variant_rows[0]["variant"], math.nan), label,
                                size_colour[size])
        finish_loss_vs_lr(ax, top, condition)
        ax.legend(fontsize=7)
    fig.suptitle("final loss vs LR per model size")
    save(fig, plots, "loss_vs_lr_by_size")

    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for i, condition in enumerate(conditions):
        pts = sorted((number(v["non_embedding_parameters"]), number(v["lr_sensitivity"]), number(v["lr_sensitivity_lo"]),
                      number(v["lr_sensitivity_hi"])) for v in sens if v["condition"] == condition)
        pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
        if not pts:
            continue
        xs, ys, lo, hi = zip(*pts)
        ax.plot(xs, ys, "o-", color=f"C{i}", label=condition, markersize=5)
        bars = [(x, y, l, h) for x, y, l, h in pts if math.isfinite(l) and math.isfinite(h)]
        if bars:
            bx, by, bl, bh = zip(*bars)
            ax.errorbar(bx, by, yerr=[[y - l for y, l in zip(by, bl)], [h - y for y, h in zip(by, bh)]], fmt="none",
                        ecolor=f"C{i}", capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("LR sensitivity")
    ax.set_title("LR sensitivity vs model size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, plots, "lr_sensitivity_vs_params")

    best_lr_vs_size(conditions, sens, plots)

    lrs = sorted({number(r["lr"]) for r in rows if math.isfinite(number(r["lr"]))})
    fig, axes = variant_grid(len(lrs))
    for ax, lr in zip(axes, lrs):
        for i, condition in enumerate(conditions):
            pts = []
            for size in sizes:
                values = [number(r["max_attn_logit_l0"]) for r in rows
                          if r["condition"] == condition and r["size"] == size and number(r["lr"]) == lr]
                if size in params and math.isfinite(median(values)):
                    pts.append((params[size], median(values)))
            if pts:
                ax.plot(*zip(*sorted(pts)), "o-", color=f"C{i}", label=condition, markersize=4)
        if math.isfinite(attn_threshold):
            ax.axhline(attn_threshold, color="red", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"LR {lr:g}")
        ax.set_xlabel("non-embedding parameters")
        ax.set_ylabel("max layer-0 attention logit")
        ax.grid(True, which="both", alpha=0.3)
    if axes:
        axes[0].legend(fontsize=7)
    fig.suptitle("layer-0 attention logit vs model size")
    save(fig, plots, "attn_logit_vs_params")


def block_of(name):
    """The block index of a parameter name (blocks.N.*), or None."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


def param_plots(variants, curves, colour, norm, cmap, plots):
    """monitor.param_stats: per-layer update/weight ratios and Adam's eps share."""
    # Per-layer update ratio at each variant's largest LR (the run nearest its edge).
    fig, axes = variant_grid(len(variants))
    layer_cmap = plt.get_cmap("plasma")
    for ax, variant in zip(axes, variants):
        points = [(number(r["lr"]), r.get("seed", ""), recs) for r, recs, _ in curves.values()
                  if r["variant"] == variant and any(x.get("params") for x in recs)]
        if not points:
            continue
        lr, _, recs = max(points, key=lambda p: (p[0], str(p[1])))
        by_layer = {}
        for x in recs:
            for name, st in (x.get("params") or {}).items():
                b = block_of(name)
                if b is not None and isinstance(st.get("update_ratio"), (int, float)):
                    by_layer.setdefault(b, {}).setdefault(x["step"], []).append(st["update_ratio"])
        n = max(by_layer) + 1 if by_layer else 1
        for b, steps in sorted(by_layer.items()):
            pts = sorted((step, statistics.fmean(v)) for step, v in steps.items())
            ax.plot(*zip(*pts), color=layer_cmap(b / max(1, n - 1) * 0.85), linewidth=1, marker=".", markersize=3,
                    label=f"block {b}")
        ax.set_yscale("log")
        ax.set_title(f"{variant}, LR {lr:g}")
        ax.set_xlabel("step")
        ax.set_ylabel("update / weight RMS")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("per-layer update size relative to the weights (mean over each block's matrices)")
    save(fig, plots, "layer_update_ratio")

    # The share of Adam's second moment under eps, over all matrices with moments.
    fig, axes = variant_grid(len(variants))
    for ax, variant in zip(axes, variants):
        for r, recs, _ in curves.values():
            if r["variant"] != variant:
                continue
            pts = []
            for x in recs:
                shares = [st["v_below_eps"] for st in (x.get("params") or {}).values()
                          if isinstance(st.get("v_below_eps"), (int, float))]
                if shares:
                    pts.append((x["step"], statistics.fmean(shares)))
            if pts:
                ax.plot(*zip(*pts), color=colour(number(r["lr"])), linewidth=1, marker=".", markersize=3)
        ax.set_title(variant)
        ax.set_xlabel("step")
        ax.set_ylabel("share of sqrt(v_hat) < eps")
        ax.grid(True, alpha=0.3)
    if norm:
        sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=axes, label="peak LR", aspect=30)
    fig.suptitle("Adam's second moment under eps (mean over tensors)")
    save(fig, plots, "adam_eps_share")


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
        draw_loss_vs_lr(ax, [r for r in rows if r["variant"] == variant], init.get(variant, math.nan), variant,
                        f"C{i}")
    finish_loss_vs_lr(ax, top, f"{manifest.get('name', '')}: final loss vs LR")
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

    # Output logits (Wortsman et al. 2023, section 3.2): their largest value and
    # log Z drift without weight decay or z-loss.
    if any(x.get("output") for _, recs, _ in curves.values() for x in recs):
        fig, axes = plt.subplots(2, len(variants), figsize=(3.6 * len(variants), 5.6), squeeze=False, sharex=True,
                                 sharey="row", layout="constrained")
        for col, variant in enumerate(variants):
            for point, (r, recs, spikes) in curves.items():
                if r["variant"] != variant:
                    continue
                for row, key in enumerate(("max_logit", "mean_log_z")):
                    pts = [(x["step"], x["output"][key]) for x in recs
                           if isinstance(x.get("output"), dict) and isinstance(x["output"].get(key), (int, float))]
                    if pts:
                        axes[row][col].plot(*zip(*pts), color=colour(number(r["lr"])), linewidth=1)
            axes[0][col].set_title(variant)
            axes[1][col].set_xlabel("step")
            for row in range(2):
                axes[row][col].grid(True, alpha=0.3)
        axes[0][0].set_ylabel("largest |output logit|")
        axes[1][0].set_ylabel("mean log Z")
        if norm:
            sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
            fig.colorbar(sm, ax=axes, label="peak LR", aspect=30)
        fig.suptitle("output logits")
        save(fig, plots, "output_logit")

    if any(x.get("params") for _, recs, _ in curves.values() for x in recs):
        param_plots(variants, curves, colour, norm, cmap, plots)

    if any(r.get("size") for r in rows):
        sens = list(csv.DictReader((out_dir / "lr_sensitivity.csv").open()))
        size_plots(rows, sens, init, attn_threshold, plots)
    if (out_dir / "edge_width.csv").exists():
        edge_vs_width(out_dir / "edge_width.csv", plots)

    cooldown_plot(manifest, curves, plots)


def point_config(manifest, name):
    """A point's resolved config as the manifest keeps it: the first point's, with this one's differences."""
    config = dict(manifest.get("config", {}))
    for p in manifest.get("points", []):
        if p.get("name") == name:
            config.update(p.get("differs", {}))
    return config


def cooldown_plot(manifest, curves, plots):
    """Cooldown branches (train.cooldown_steps): loss against tokens for each trunk and its branches."""
    branches = {}
    for point, (r, recs, _) in curves.items():
        cfg = point_config(manifest, point)
        if number(cfg.get("train.cooldown_steps", "0")) > 0 and cfg.get("train.cooldown_from", "").strip('"'):
            branches.setdefault(cfg["train.cooldown_from"].strip('"'), []).append((point, cfg, recs))
    if not branches:
        return
    fig, axes = plt.subplots(1, len(branches), figsize=(6.4 * len(branches), 4.4), squeeze=False, layout="constrained")
    for ax, (trunk, points) in zip(axes[0], sorted(branches.items())):
        trunk_recs = read_jsonl(Path(trunk) / "metrics.jsonl")
        pts = [(x["tokens"], x["loss"]) for x in trunk_recs if isinstance(x.get("loss"), (int, float)) and "tokens" in x]
        if pts:
            ax.plot(*zip(*pts), color="0.4", linewidth=1.2, label="trunk")
        vals = [(x["tokens"], x["val_loss"]) for x in trunk_recs if isinstance(x.get("val_loss"), (int, float))]
        if vals:
            ax.plot(*zip(*vals), "o", color="0.4", markersize=4)
        ats = sorted({number(c["train.cooldown_at"]) for _, c, _ in points})
        for point, cfg, recs in sorted(points, key=lambda p: (number(p[1]["train.cooldown_at"]), p[0])):
            c = plt.get_cmap("plasma")(0.15 + 0.7 * ats.index(number(cfg["train.cooldown_at"])) / max(1, len(ats) - 1))
            pts = [(x["tokens"], x["loss"]) for x in recs if isinstance(x.get("loss"), (int, float)) and "tokens" in x]
            if pts:
                ax.plot(*zip(*pts), color=c, linewidth=1,
                        label=f"from {int(number(cfg['train.cooldown_at']))}, {int(number(cfg['train.cooldown_steps']))} "
                              f"steps {cfg.get('train.cooldown_shape', '').strip(chr(34))}")
            vals = [(x["tokens"], x["val_loss"]) for x in recs if isinstance(x.get("val_loss"), (int, float))]
            if vals:
                ax.plot(*vals[-1], "o", color=c, markersize=5)
        ax.set_title(f"trunk {Path(trunk).name} and its cooldown branches")
        ax.set_xlabel("tokens")
        ax.set_ylabel("training loss (dots: validation)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, plots, "cooldown")


if __name__ == "__main__":
    main()
