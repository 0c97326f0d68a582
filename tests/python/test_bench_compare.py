"""scripts/bench/bench_compare.sh against keel's and the PyTorch reference's
real records: one round of keel and eager on bench-cpu-tiny with ATen held
to AVX2. The summary must give both sides' ratios (of the medians and round
by round) and kernel ISAs, and the script must print the variable and give
inductor a cache of its own (an avx2 torch.compile run died in kernels
cached under AVX-512)."""
import json
import os
import shutil
import subprocess
import sys

from keel_testlib import REPO, keel_binary

SCRIPT = REPO / "scripts" / "bench" / "bench_compare.sh"


def test_one_round_gives_ratios_and_the_kernel_isa_of_each_side(tmp_path):
    env = dict(os.environ, KEEL=str(keel_binary()), PYTHON=sys.executable, STEPS="1", WARMUP="0", MODES="eager",
               OUT=str(tmp_path / "records"), ATEN_CPU_CAPABILITY="avx2", TMPDIR=str(tmp_path))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    out = subprocess.run(["bash", str(SCRIPT), str(REPO / "configs/bench-cpu-tiny.yaml"), "1",
                          "--set", "train.batch_size=2", "--set", "train.threads=1"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "  ATEN_CPU_CAPABILITY=avx2" in out.stdout
    assert f"  TORCHINDUCTOR_CACHE_DIR={tmp_path}/torchinductor_" in out.stdout
    summary = json.loads((tmp_path / "records" / "summary.json").read_text())
    assert summary["runs"] == 1
    assert summary["ratios"]["keel/eager"] > 0
    # One round: its own ratio is the ratio of the medians, and the table gives its range.
    assert summary["round_ratios"]["keel/eager"] == [summary["ratios"]["keel/eager"]]
    r = summary["ratios"]["keel/eager"]
    assert f"rounds {r:.3f}-{r:.3f}" in out.stdout, out.stdout
    isa = summary["kernel_isa"]
    assert isa["keel"]["aten"] == "AVX2" and isa["eager"]["aten"] == "AVX2", isa
    assert isa["keel"]["keel"] in ("avx512f", "avx2"), isa
    assert "kernel ISA: " in out.stdout
    # The same records read by scripts/bench/pool_sittings.py (a copy as a
    # second sitting): the fields it pools are the ones these records have.
    shutil.copytree(tmp_path / "records", tmp_path / "records2")
    pooled = subprocess.run([sys.executable, str(REPO / "scripts/bench/pool_sittings.py"), "--modes", "eager",
                             "--resamples", "100", "--json", str(tmp_path / "pooled.json"),
                             str(tmp_path / "records"), str(tmp_path / "records2")],
                            capture_output=True, text=True, timeout=120)
    assert pooled.returncode == 0, pooled.stderr
    p = json.loads((tmp_path / "pooled.json").read_text())
    assert p["config"] == "bench-cpu-tiny" and p["kernel_isa"]["keel"]["aten"] == "AVX2"
    assert abs(p["pooled"]["keel/eager"]["mean_of_sittings"] - r) < 1e-12


def test_an_unknown_argument_is_exit_2(tmp_path):
    out = subprocess.run(["bash", str(SCRIPT), str(REPO / "configs/bench-cpu-tiny.yaml"), "1", "--bogus"],
                         capture_output=True, text=True, env=dict(os.environ, OUT=str(tmp_path / "records")))
    assert out.returncode == 2 and "--bogus" in out.stderr
