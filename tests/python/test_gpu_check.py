"""scripts/gpu_check.sh's CPU rehearsal (GPU_CHECK_DRY=1), so the script
cannot rot between the rare GPU sessions: every line that does not need CUDA
runs here at tiny sizes, against this build, and $OUT must hold exactly the
three result files with every section passed; a budget too small for any
section must skip them all and still write the results."""
import json
import os
import subprocess
import tarfile
from pathlib import Path

from keel_testlib import REPO, build_dir, keel_binary

SECTIONS = ["build", "gpu-tests", "train-cuda", "bench-gpt2", "bench-gpt2-whole-logits", "compare-pytorch", "train-cuda-graph",
            "bench-gpt2-graph", "bench-gpt2-muon", "bench-qknorm", "bench-gpt2-flash", "bench-gpt2-softcap", "bench-gpt2-softcap-4k", "train-nccl", "bench-default-eager", "bench-default-graph"]


def run_check(tmp_path: Path, budget: int) -> tuple[subprocess.CompletedProcess, Path, Path]:
    keel_binary()  # fails clearly when the build is missing
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = dict(os.environ, GPU_CHECK_DRY="1", OUT=str(out), GPU_CHECK_SCRATCH=str(scratch),
               GPU_CHECK_BUDGET_S=str(budget), KEEL_BUILD_DIR=str(build_dir()))
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], env=env, capture_output=True,
                            text=True, timeout=900, cwd=tmp_path)
    return result, out, scratch


def summary_rows(out: Path) -> dict[str, str]:
    rows = {}
    for line in (out / "summary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("passed", "failed", "skipped"):
            rows[cells[0]] = cells[1]
    return rows


def test_dry_run_passes_every_section_and_returns_three_files(tmp_path):
    result, out, scratch = run_check(tmp_path, budget=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "logs.tar.gz", "summary.md"], log
    rows = summary_rows(out)
    assert rows == {"preflight": "passed", **{s: "passed" for s in SECTIONS}}, log
    summary = (out / "summary.md").read_text()
    assert "DRY RUN" in summary
    # Every bench record came back, and the figures made it into the table.
    bench = json.loads((out / "bench.json").read_text())
    for name in ["gpt2.json", "gpt2-whole-logits.json", "gpt2-graph.json", "default-eager.json", "default-graph.json",
                 "compare/keel-1.json", "compare/eager-1.json", "compare/summary.json",
                 "qknorm/none-1.json", "qknorm/rms-1.json", "qknorm/l2-1.json", "qknorm/summary.json"]:
        assert name in bench, f"{name} missing from bench.json: {sorted(bench)}"
    assert bench["gpt2.json"]["tokens_per_s"] > 0
    assert bench["compare/eager-1.json"]["tokens_per_s"] > 0
    assert f"| gpt2.json | keel |" in summary
    # The training runs finished and are in the summary with a real loss.
    for run in ["default-cuda", "cuda-graph", "nccl-1gpu"]:
        s = json.loads((scratch / "runs" / run / "summary.json").read_text())
        assert s["final_loss"] > 0, run
        assert f"| {run} |" in summary, run
    # Runs and data stayed in the scratch folder; the logs are in the archive.
    assert not (out / "runs").exists() and not (out / "data").exists()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    for section in ["preflight", *SECTIONS]:
        assert f"logs/{section}.log" in names, names


def test_a_budget_too_small_skips_sections_and_still_reports(tmp_path):
    result, out, _ = run_check(tmp_path, budget=1)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    rows = summary_rows(out)
    assert rows["preflight"] == "passed", log
    assert rows["build"] == "skipped", log
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "logs.tar.gz", "summary.md"]
    assert "skipped (needs ~" in result.stdout
