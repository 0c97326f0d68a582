"""scripts/plots/plot_edges.py, the headline picture of a stability study,
draws from keel report's own files: a report directory with summary.csv and
edge_criteria.csv (the columns keel writes) gives a PNG and an SVG; a
report without edge_criteria.csv is refused loudly, not drawn half."""
import csv
import subprocess
import sys

import pytest

from keel_testlib import REPO

SCRIPT = REPO / "scripts" / "plots" / "plot_edges.py"


def write_report(d, with_edges=True):
    cols = ["point", "variant", "lr", "seed", "status", "final_val_loss", "initial_loss", "diverged"]
    rows = []
    for v, bad in (("none", 0.1), ("qk-norm", 0.3)):
        for seed in (1, 2):
            for lr in (0.01, 0.03, 0.1, 0.3, 1.0):
                diverged = lr >= 1.0
                loss = "" if diverged else str(3.3 + (1.5 if lr >= bad else 0.0) + 0.01 * seed)
                rows.append([f"{v}_lr={lr}_seed={seed}", v, lr, seed, "diverged" if diverged else "completed", loss,
                             "8.3", "true" if diverged else "false"])
    with (d / "summary.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)
    if with_edges:
        with (d / "edge_criteria.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["group", "criterion", "seed", "state", "passed", "failed"])
            for v, deg in (("none", "0.03"), ("qk-norm", "0.1")):
                for seed in (1, 2):
                    w.writerow([v, "degradation", seed, "found", deg, "1"])
                    if v == "qk-norm" and seed == 2:  # never blew up: above the grid
                        w.writerow([v, "loss_divergence", seed, "above high", "1", ""])
                    else:
                        w.writerow([v, "loss_divergence", seed, "found", "0.3", "1"])
                    w.writerow([v, "logit_instability", seed, "above high", "1", ""])


def test_draws_the_headline_from_a_report(tmp_path):
    write_report(tmp_path)
    out = tmp_path / "plots" / "headline.png"
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(out), "a title"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 10_000 and out.with_suffix(".svg").is_file()
    svg = out.with_suffix(".svg").read_text()
    assert "a title" in svg
    assert "1 seed above" in svg  # the seed whose grid did not reach its blow-up
    assert "2/2" in svg  # both seeds of each variant diverged at LR 1


def test_a_report_without_edges_is_refused(tmp_path):
    write_report(tmp_path, with_edges=False)
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(tmp_path / "h.png")], capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "edge_criteria.csv" in r.stderr
    assert not (tmp_path / "h.png").exists()
