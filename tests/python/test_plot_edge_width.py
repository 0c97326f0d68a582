"""scripts/plots/plot_sweep.py's edge_vs_width, drawn from keel report's
edge_width.csv: edges with their grid brackets, one beyond the grid, fitted
lines, and the ratio row. The columns are the ones src/analysis/edge_width.cpp
writes (checked against its source, so the two cannot drift apart)."""
import csv
import importlib.util
import re

from keel_testlib import REPO

SCRIPT = REPO / "scripts" / "plots" / "plot_sweep.py"
COLUMNS = ("kind,condition,criterion,width,lo,hi,point,slope,slope_grid_lo,slope_grid_hi,slope_t_lo,slope_t_hi,"
           "target_width,at_target,at_target_grid_lo,at_target_grid_hi,at_target_t_lo,at_target_t_hi,seeds,slope_seed_lo,"
           "slope_seed_hi,at_target_seed_lo,at_target_seed_hi")


def load_plot_sweep():
    spec = importlib.util.spec_from_file_location("plot_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_columns_are_keels():
    source = (REPO / "src" / "analysis" / "edge_width.cpp").read_text()
    written = "".join(re.findall(r'"([^"]*)"', source.split("*csv =", 1)[1].split(";", 1)[0]))
    assert written == COLUMNS + "\\n"


def test_draws_edges_brackets_fits_and_ratios(tmp_path):
    rows = []
    for d, lo, hi in ((64, 0.03, 0.1), (128, 0.01, 0.03), (256, 0.003, 0.01)):
        rows.append(["edge", "none", "degradation", d, lo, hi, lo, -1.1, -2, 0.5, -3, 1, 1024, 3e-4, 1e-5, 0.1, 1e-5, 0.1, 3, -1.5, -0.6,
                     1e-4, 1e-3])
        rows.append(["edge", "none", "loss_divergence", d, 0.1, "inf", "", "", "-inf", 1, "", "", 1024, "", 0, "inf",
                     "", "", 3, "", "", "", ""])
        rows.append(["ratio", "qk / none", "degradation", d, 1, 10, 3, 0.8, -1, 2, "", "", 1024, 30, 0.1, 1000, "", "", 1, "", "",
                     "", ""])
        # both above the grid: the ratio is unbounded on both sides, nothing to draw on a log axis
        rows.append(["ratio", "qk / none", "loss_divergence", d, 0, "inf", "", "", "-inf", "inf", "", "", 1024, "", 0,
                     "inf", "", "", 0, "", "", "", ""])
    path = tmp_path / "edge_width.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS.split(","))
        w.writerows(rows)
    plots = tmp_path / "plots"
    plots.mkdir()
    load_plot_sweep().edge_vs_width(path, plots)
    png, svg = plots / "edge_vs_width.png", plots / "edge_vs_width.svg"
    assert png.stat().st_size > 10_000
    text = svg.read_text()
    assert "none (-1.10/doubling, seeds -1.50 to -0.60)" in text  # the fitted line's legend, with its seed interval
    assert "none (no fit)" in text  # the criterion whose edges lie above the grid
    assert "qk / none (+0.80/doubling)" in text
    assert "edge / first condition" in text
    assert "no edge bounded by the grid" in text
