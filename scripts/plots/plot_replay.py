#!/usr/bin/env python3
"""The plot of `keel replay RUN_DIR --step N` (PNG and SVG).

    python scripts/plots/plot_replay.py OUT_DIR/replay.json OUT_DIR

Reads replay.json (written by keel replay just before: the training loss of
the run and of every branch from the checkpoint to N + K, and the spikes each
branch's detector flagged) and writes OUT_DIR/plots/replay.{png,svg}: the
loss per branch against the step, the run's in black, the spike's step as a
dotted line, flagged spikes as crosses.
"""
import json
import math
import sys
from pathlib import Path

from plot_sweep import plt, save  # one set of helpers for every keel plot


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    replay = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2]) / "plots"
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.0, 4.0), layout="constrained")
    losses = replay.get("losses", {})
    spikes = {b["name"]: b.get("spikes", []) for b in replay.get("branches", [])}
    spikes["original"] = replay.get("original_spikes", [])
    for name, series in losses.items():
        pts = sorted((int(s), v) for s, v in series.items() if isinstance(v, (int, float)) and math.isfinite(v))
        if not pts:
            continue
        steps, values = zip(*pts)
        style = {"color": "black", "lw": 2.2, "zorder": 5} if name == "original" else {"lw": 1.3, "alpha": 0.9}
        (line,) = ax.plot(steps, values, label="the run" if name == "original" else name, **style)
        at = dict(pts)
        marks = [(s["step"], at[s["step"]]) for s in spikes.get(name, [])
                 if s.get("step") in at]  # any signal flagged, marked on the loss curve
        if marks:
            ax.scatter(*zip(*marks), marker="x", s=60, color=line.get_color(), zorder=6)
    ax.axvline(replay["step"], color="grey", ls=":", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(f"replay of the spike at step {replay['step']} from checkpoint {replay['checkpoint_step']} "
                 "(x: spike flagged)", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, out, "replay")


if __name__ == "__main__":
    main()
