#!/usr/bin/env python3
"""Plots of `keel compare RUN_DIR... --out OUT_DIR` (PNG and SVG).

    python scripts/plots/plot_runs.py OUT_DIR

Reads OUT_DIR/runs.json (written by keel compare just before: each run's
directory and its label, the config keys it differs in) and each run's
metrics.jsonl and spikes.jsonl; writes OUT_DIR/plots/:

  loss           training loss per run (x = run diverged)
  val_loss       validation loss per run, perplexity on the right axis
  attn_logit     layer-0 maximum attention logit (log y)
  grad_norm      gradient norm (log y), detected spikes marked
  output_logits  maximum output logit and mean log Z of the output softmax
  update_ratio   (monitor.param_stats) the largest per-matrix update/weight
                 ratio, over the model (solid) and over block 0 (dashed)
  adam_eps_share (monitor.param_stats) the mean share of Adam's second-moment
                 entries with sqrt(v_hat) under eps
  tasks          (eval.tasks) each task's accuracy against tokens, one panel
                 per task, the band +- its standard error
"""
import json
import math
import sys
from pathlib import Path

from plot_sweep import plt, read_jsonl, save  # one set of helpers for sweeps and runs


def series(recs, value):
    """(steps, values) of the records where value(record) is a finite number."""
    pts = []
    for r in recs:
        try:
            v = value(r)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(v, (int, float)) and math.isfinite(v) and isinstance(r.get("step"), int):
            pts.append((r["step"], v))
    return tuple(zip(*pts)) if pts else ((), ())


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def task_entries(rec):
    """The {task name: metrics} of a record's "tasks", the entries that are objects."""
    tasks = rec.get("tasks")
    return {k: v for k, v in tasks.items() if isinstance(v, dict)} if isinstance(tasks, dict) else {}


def task_series(recs, task):
    """(tokens, acc, acc_stderr) at the records that scored `task`; stderr 0 where not recorded."""
    pts = []
    for r in recs:
        t = task_entries(r).get(task, {})
        if finite(r.get("tokens")) and finite(t.get("acc")):
            pts.append((r["tokens"], t["acc"], t["acc_stderr"] if finite(t.get("acc_stderr")) else 0.0))
    return tuple(zip(*pts)) if pts else ((), (), ())


def task_plot(data, plots):
    """One panel per task any run scored: accuracy per run, the band +- stderr. No file without one."""
    names = sorted({name for _, recs, _ in data for r in recs for name in task_entries(r)})
    curves = {name: [(label, f"C{i}", task_series(recs, name)) for i, (label, recs, _) in enumerate(data)]
              for name in names}
    names = [n for n in names if any(xs for _, _, (xs, _, _) in curves[n])]  # an accuracy to draw
    if not names:
        return
    cols = min(len(names), 3)
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        for label, c, (xs, ys, es) in curves[name]:
            if not xs:
                continue
            ax.plot(xs, ys, "o-", color=c, markersize=3, linewidth=1, label=label)
            ax.fill_between(xs, [y - e for y, e in zip(ys, es)], [y + e for y, e in zip(ys, es)], color=c,
                            alpha=0.2, linewidth=0)
        ax.set_title(f"{name}: accuracy (band: ± stderr)")
        ax.set_xlabel("tokens")
        ax.set_ylabel("acc")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, plots, "tasks")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = Path(sys.argv[1])
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    runs = json.loads((out_dir / "runs.json").read_text())
    data = [(r["label"], read_jsonl(Path(r["dir"]) / "metrics.jsonl"), read_jsonl(Path(r["dir"]) / "spikes.jsonl"))
            for r in runs]

    def figure(name, title, ylabel, draw, logy=False, finish=None):
        fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
        for i, (label, recs, spikes) in enumerate(data):
            draw(ax, label, recs, spikes, f"C{i}")
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        if finish:
            finish(ax)
        save(fig, plots, name)

    def draw_loss(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: r["loss"])
        ax.plot(xs, ys, color=c, linewidth=1, label=label)

    def draw_val(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: r["val_loss"])
        ax.plot(xs, ys, "o-", color=c, markersize=3, linewidth=1, label=label)

    def draw_attn(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: r["attn"][0]["max_logit"])
        ax.plot(xs, ys, ".-", color=c, markersize=3, linewidth=1, label=label)

    def draw_grad(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: r["grad_norm"])
        ax.plot(xs, ys, color=c, linewidth=1, label=label)
        sx, sy = series([s for s in spikes if s.get("signal") == "grad_norm"], lambda s: s["value"])
        if sx:
            ax.plot(sx, sy, "o", color=c, markersize=4, markeredgecolor="red")

    def draw_output(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: r["output"]["max_logit"])
        ax.plot(xs, ys, ".-", color=c, markersize=3, linewidth=1, label=f"{label}: max logit")
        xs, ys = series(recs, lambda r: r["output"]["mean_log_z"])
        ax.plot(xs, ys, ".--", color=c, markersize=3, linewidth=1, label=f"{label}: mean log Z")

    def perplexity_axis(ax):  # perplexity = exp(loss), beside the loss it is read from
        lo, hi = ax.get_ylim()
        right = ax.twinx()
        right.set_yscale("log")
        right.set_ylim(math.exp(lo), math.exp(hi))
        right.set_ylabel("perplexity")

    figure("loss", "training loss", "loss", draw_loss)
    figure("val_loss", "validation loss (right: perplexity)", "validation loss", draw_val, finish=perplexity_axis)
    figure("attn_logit", "layer-0 max attention logit", "max |logit|", draw_attn, logy=True)
    figure("grad_norm", "gradient norm (red edge: detected spikes)", "grad norm", draw_grad, logy=True)
    figure("output_logits", "output logits: max (solid) and mean log Z (dashed)", "logit", draw_output)

    def params_max(r, key, prefix=""):
        vals = [st[key] for name, st in r["params"].items()
                if name.startswith(prefix) and isinstance(st.get(key), (int, float))]
        return max(vals) if vals else None

    def draw_update(ax, label, recs, spikes, c):
        xs, ys = series(recs, lambda r: params_max(r, "update_ratio"))
        ax.plot(xs, ys, ".-", color=c, markersize=3, linewidth=1, label=f"{label}: all matrices")
        xs, ys = series(recs, lambda r: params_max(r, "update_ratio", "blocks.0."))
        ax.plot(xs, ys, ".--", color=c, markersize=3, linewidth=1, label=f"{label}: block 0")

    def draw_eps(ax, label, recs, spikes, c):
        def share(r):
            vals = [st["v_below_eps"] for st in r["params"].values() if isinstance(st.get("v_below_eps"), (int, float))]
            return sum(vals) / len(vals) if vals else None
        xs, ys = series(recs, share)
        ax.plot(xs, ys, ".-", color=c, markersize=3, linewidth=1, label=label)

    if any(r.get("params") for _, recs, _ in data for r in recs):
        figure("update_ratio", "largest per-matrix update/weight ratio", "update / weight RMS", draw_update, logy=True)
        figure("adam_eps_share", "share of Adam's sqrt(v_hat) under eps (mean over tensors)", "share", draw_eps)
    task_plot(data, plots)


if __name__ == "__main__":
    main()
