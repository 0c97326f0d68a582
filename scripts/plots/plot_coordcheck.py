#!/usr/bin/env python3
"""Plots keel coordcheck's JSON: activation RMS against width (or depth), one
panel per layer group, one line per step -- the `mup` package's standard
coordinate-check figure. Usage: plot_coordcheck.py coordcheck.json OUT_DIR
(writes OUT_DIR/coordcheck.png)."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    data = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    by_depth = data.get("axis") == "depth"
    key = "depth" if by_depth else "width"
    records = data["records"]
    # Across depths block indices differ: plot the layers every size has.
    layers = ["embed", "residual", "logits"]
    if not by_depth:
        layers += sorted({r["layer"] for r in records if r["layer"].startswith("block0.")})
    steps = sorted({r["step"] for r in records})
    fixed = {r["width" if by_depth else "depth"] for r in records}
    fig, axes = plt.subplots(1, len(layers), figsize=(3.2 * len(layers), 3.2), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, layer in zip(axes[0], layers):
        for i, step in enumerate(steps):
            pts = sorted((r[key], r["rms"]) for r in records if r["layer"] == layer and r["step"] == step
                         and r["width" if by_depth else "depth"] == min(fixed))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                        color=cmap(i / max(1, len(steps) - 1)), label=f"step {step}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(layer, fontsize=9)
        ax.set_xlabel(key)
    axes[0][0].set_ylabel("activation RMS")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"coordinate check: {data['parametrization']}, LR {data['lr']:g}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "coordcheck.png", dpi=110)


if __name__ == "__main__":
    main()
