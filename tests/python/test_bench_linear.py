"""scripts/bench/bench_linear.py times the GEMMs of keel's block linears: its
shapes must be the ones keel builds (checked against `keel params`, for a
GQA SwiGLU and a GELU config), it prints a row per matmul with both
libraries, and a missing config is exit 2."""
import importlib.util
import re
import subprocess
import sys

import pytest

from keel_testlib import REPO, keel

SCRIPT = REPO / "scripts" / "bench" / "bench_linear.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_linear", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def keel_block0_shapes(config):
    """(in, out) of block 0's linears from `keel params`, QKV fused as keel's forward fuses it."""
    rows = {}
    for line in keel("params", config).stdout.splitlines():
        m = re.match(r"blocks\.0\.(attn|mlp)\.(\w+)\s+\[(\d+),(\d+)\]", line)
        if m:
            rows[m.group(2)] = (int(m.group(4)), int(m.group(3)))  # weight [out, in]
    shapes = [("qkv", rows["wq"][0], rows["wq"][1] + rows["wk"][1] + rows["wv"][1]),
              ("out", *rows["wo"]), ("up", *rows["w_up"]), ("down", *rows["w_down"])]
    if "w_gate" in rows:
        shapes.insert(3, ("gate", *rows["w_gate"]))
    return shapes


@pytest.mark.parametrize("config", ["configs/bench-cpu-tiny.yaml", "configs/bench-cpu-gpt.yaml"])
def test_shapes_are_keels(config):
    mod = load_script()
    cfg = mod.rm.load_config(str(REPO / config))
    assert mod.block_shapes(cfg) == keel_block0_shapes(REPO / config)


def test_prints_each_matmul_for_both_libraries():
    out = subprocess.run([sys.executable, str(SCRIPT), str(REPO / "configs/bench-cpu-tiny.yaml"), "--rounds", "1",
                          "--reps", "1", "--threads", "1", "--set", "train.batch_size=1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for kind in ("forward", "dx", "dW"):
        row = re.search(rf"^{kind}\s+([\d.]+)\s+([\d.]+)\s+(aten|onednn)$", out.stdout, re.M)
        assert row, out.stdout
        a, o = float(row.group(1)), float(row.group(2))
        assert a > 0 and o > 0
        # The choice is made on unrounded times: where both print the same
        # (2.4 and 2.4 on a Zen 4), either library may be the faster.
        if a != o:
            assert row.group(3) == ("aten" if a < o else "onednn"), out.stdout


def test_missing_config_is_exit_2(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert out.returncode == 2 and "nope.yaml" in out.stderr
