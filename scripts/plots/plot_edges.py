"""The headline picture of a stability study: final validation loss against
peak LR, one line per variant (mean over seeds, band one standard
deviation, x where a run diverged), and below it each variant's edges by
keel report's criteria: the largest LR that did not degrade (filled) and the
largest that did not blow up (open), each the geometric mean over seeds with
the seeds' spread as a bar; only seeds whose grid bracketed the edge count,
and a triangle at the grid's top LR counts the seeds that never failed.

    .venv/bin/python scripts/plots/plot_edges.py REPORT_DIR OUT.png [TITLE]

REPORT_DIR is what `keel report ... --out REPORT_DIR` wrote (summary.csv,
edge_criteria.csv). Writes OUT.png and OUT.svg.
"""
import csv
import math
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    report, out = Path(sys.argv[1]), Path(sys.argv[2])
    title = sys.argv[3] if len(sys.argv) == 4 else "final loss against learning rate"
    rows = list(csv.DictReader((report / "summary.csv").open()))
    edges, above = {}, {}
    for e in csv.DictReader((report / "edge_criteria.csv").open()):
        if e["state"] == "found" and e["passed"]:  # bracketed by that seed's grid
            edges.setdefault((e["group"], e["criterion"]), []).append(number(e["passed"]))
        elif e["state"] == "above high":  # passed every LR of the grid: its edge lies above it
            above[(e["group"], e["criterion"])] = above.get((e["group"], e["criterion"]), 0) + 1
    top_lr = max((number(r["lr"]) for r in rows if math.isfinite(number(r["lr"]))), default=math.nan)
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    l0 = max((number(r["initial_loss"]) for r in rows if math.isfinite(number(r["initial_loss"]))), default=math.nan)
    fig, (ax, strip) = plt.subplots(2, 1, figsize=(6.6, 5.0), sharex=True, layout="constrained",
                                    gridspec_kw={"height_ratios": [4, 1.1]})
    for i, v in enumerate(variants):
        colour = f"C{i}"
        by_lr = {}
        for r in rows:
            if r["variant"] != v or r["status"] == "not run":
                continue
            loss = number(r["final_val_loss"])
            diverged = r["diverged"] == "true" or not math.isfinite(loss)
            by_lr.setdefault(number(r["lr"]), []).append(math.nan if diverged else loss)
        lrs = sorted(by_lr)
        means, sds = [], []
        for lr in lrs:
            ok = [x for x in by_lr[lr] if math.isfinite(x)]
            means.append(statistics.mean(ok) if ok else math.nan)
            sds.append(statistics.stdev(ok) if len(ok) > 1 else 0.0)
        seeds = max(len(x) for x in by_lr.values()) if by_lr else 0
        ax.plot(lrs, means, "o-", color=colour, label=f"{v} ({seeds} seed{'s' if seeds != 1 else ''})")
        ax.fill_between(lrs, [m - s for m, s in zip(means, sds)], [m + s for m, s in zip(means, sds)], color=colour,
                        alpha=0.2, linewidth=0)
        for lr in lrs:
            failed = sum(not math.isfinite(x) for x in by_lr[lr])
            if failed and math.isfinite(l0):
                # Variants side by side at one LR, each with how many of its seeds diverged.
                x = lr * 1.3 ** (i - (len(variants) - 1) / 2)
                ax.plot(x, l0, "x", color=colour, markersize=9, markeredgewidth=2)
                ax.annotate(f"{failed}/{len(by_lr[lr])}", (x, l0), textcoords="offset points", xytext=(0, -13),
                            ha="center", fontsize=7, color=colour)
        y = len(variants) - 1 - i
        for criterion, fill in (("degradation", True), ("loss_divergence", False)):
            passed = edges.get((v, criterion))
            n_above = above.get((v, criterion), 0)
            if passed:
                edge = math.exp(statistics.mean(math.log(x) for x in passed))
                strip.plot([min(passed), max(passed)], [y, y], color=colour, linewidth=3, alpha=0.4)
                strip.plot(edge, y, "o", color=colour, markersize=9, markerfacecolor=colour if fill else "white",
                           markeredgewidth=2)
            if n_above and math.isfinite(top_lr):
                # Seeds that never failed: their edge is past the grid's top LR.
                strip.plot(top_lr, y, ">", color=colour, markersize=9, markerfacecolor=colour if fill else "white",
                           markeredgewidth=2)
                strip.annotate(f"{n_above} seed{'s' if n_above != 1 else ''} above", (top_lr, y),
                               textcoords="offset points", xytext=(-8, 7), ha="right", fontsize=7, color=colour)
    if math.isfinite(l0):
        ax.axhline(l0, color="grey", linestyle="--", linewidth=0.8, label="ln V: a uniform guess")
    ax.plot([], [], "x", color="black", label="diverged (k/n seeds)")
    ax.plot([], [], "o", color="black", label="below: largest LR that did not degrade (0.1 nats)")
    ax.plot([], [], "o", color="black", markerfacecolor="white", label="below: largest LR that did not blow up")
    ax.plot([], [], ">", color="black", markerfacecolor="white", label="below: seeds that passed every LR")
    ax.set_xscale("log")
    ax.set_ylabel("final validation loss\n(mean ± sd over seeds)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    strip.set_yticks(range(len(variants)))
    strip.set_yticklabels(list(reversed(variants)), fontsize=8)
    strip.set_ylim(-0.6, len(variants) - 0.4)
    strip.grid(True, which="both", axis="x", alpha=0.3)
    strip.set_xlabel("peak learning rate")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out.with_suffix(".png"), dpi=130, metadata={"Software": None})
    fig.savefig(out.with_suffix(".svg"), metadata={"Date": None, "Creator": None})


if __name__ == "__main__":
    main()
