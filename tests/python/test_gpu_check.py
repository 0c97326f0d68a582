"""scripts/gpu/gpu_check.sh's CPU rehearsal (GPU_CHECK_DRY=1), so the script
cannot rot between the rare GPU sessions: both parts run every line that does
not need CUDA here, at tiny sizes, against this build, and leave exactly
summary.md, results.json and logs.tar.gz with every section passed. The plan
(GPU_CHECK_PLAN=1) must fit each part's budget: adding a section that does
not fit fails here, not on the GPU machine. Results reach $OUT after every
section, so a part cut by the call's time limit still returns what it did."""
import json
import os
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from keel_testlib import REPO, build_dir, cpp_test_program, keel_binary

SCRIPT = REPO / "scripts" / "gpu" / "gpu_check.sh"
BUDGET = 300  # the script's default per part
# A session has 15 device minutes; parts 1 and 2 and a machine's start (about
# 30 s seen on the H200, 120 allowed) must fit 12, leaving a rerun of one part.
MACHINE_START_S = 120
SESSION_PLAN_S = 12 * 60
PART1 = ["gpu-tests", "train-cuda-vs-cpu", "nccl-2ranks", "train-cuda-graph", "bf16-variants",
         "bench-gpt2-whole-logits"]
PART2 = ["compare-pytorch", "bench-gpt2-fused", "bench-gpt2-flash", "bench-qknorm", "bench-gpt2-softcap"]
PART3 = ["bench-gpt2-ckpt", "bench-gpt2-softcap-4k", "bench-gpt2-muon", "bench-default-graph", "bench-gpt2"]
PARTS = {1: PART1, 2: PART2, 3: PART3}
OUT_FILES = ["logs.tar.gz", "results.json", "summary.md"]


def run_check(tmp_path: Path, part: int, budget: int = 900, timeout: int = 600, **env_extra):
    keel_binary()  # fail clearly when the build is missing
    cpp_test_program("test_cuda")
    tmp_path.mkdir(parents=True, exist_ok=True)
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_") and k != "LD_LIBRARY_PATH"}
    env.update(GPU_CHECK_DRY="1", GPU_CHECK_PART=str(part), OUT=str(out), GPU_CHECK_SCRATCH=str(scratch),
               GPU_CHECK_BUDGET_S=str(budget), KEEL_BUILD_DIR=str(build_dir()), **env_extra)
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=timeout,
                            cwd=tmp_path)
    return result, out, scratch


def summary_rows(out: Path) -> dict[str, str]:
    rows = {}
    for line in (out / "summary.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1] in ("passed", "failed", "skipped"):
            rows[cells[0]] = cells[1]
    return rows


def plan(**env_extra) -> list[tuple[int, str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update(GPU_CHECK_PLAN="1", **env_extra)
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
    assert all(len(f) == 3 for f in lines), result.stdout
    return [(int(p), name, int(est)) for p, name, est in lines]


def test_each_part_fits_its_budget_with_the_important_sections_first():
    steps = plan()
    assert re.search(r"budget=\$\{GPU_CHECK_BUDGET_S:-%d\}" % BUDGET, SCRIPT.read_text()), "the default budget moved"
    assert 2 * BUDGET + MACHINE_START_S <= SESSION_PLAN_S
    for part, sections in PARTS.items():
        mine = [(name, est) for p, name, est in steps if p == part]
        assert [name for name, _ in mine] == ["preflight", *sections]
        total = sum(est for _, est in mine)
        assert total <= BUDGET, f"part {part}: sections add up to {total} s, over its {BUDGET} s budget: {mine}"
    # The one NCCL check runs early in part 1, not at the end of a list that may be cut.
    assert [name for p, name, _ in steps if p == 1].index("nccl-2ranks") <= 3
    # GPU_CHECK_ONLY and GPU_CHECK_PART narrow the plan the same way they narrow a run.
    assert plan(GPU_CHECK_PART="2", GPU_CHECK_ONLY="bench-qknorm") == [(2, "preflight", 15), (2, "bench-qknorm", 60)]


def test_no_global_ld_library_path_in_the_script():
    # Exported, it reaches Python and the box's torch; the wrappers set it for keel alone.
    text = SCRIPT.read_text()
    assert not re.search(r"^\s*(export\s+LD_LIBRARY_PATH|LD_LIBRARY_PATH=\S*\s*$)", text, re.M)
    assert not re.search(r"^\s*export\s+LD_LIBRARY_PATH", (REPO / "scripts" / "gpu" / "gpu_pack.sh").read_text(), re.M)


def check_common(result, out, scratch, part, sections):
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert sorted(p.name for p in out.iterdir()) == OUT_FILES, log
    assert summary_rows(out) == {"preflight": "passed", **{s: "passed" for s in sections}}, log
    summary = (out / "summary.md").read_text()
    assert "DRY RUN" in summary and f"part {part}" in summary and "INTERIM" not in summary
    results = json.loads((out / "results.json").read_text())
    assert results["part"] == part and results["dry_run"] and results["exit_status"] == 0
    assert [s["name"] for s in results["sections"]] == ["preflight", *sections]
    assert all(isinstance(s["estimate_s"], int) for s in results["sections"])
    assert results["preflight"]["binaries"].startswith("the build dir")
    # A Python sub-step of the script saw no LD_LIBRARY_PATH (the test started it without one).
    assert results["python_env"]["LD_LIBRARY_PATH"] is None
    # Runs and data stayed in the scratch folder; the logs are in the archive.
    assert not (out / "runs").exists() and not (out / "data").exists()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    for section in ["preflight", *sections]:
        assert f"logs/{section}.log" in names, names
    return results, summary


def test_part1_dry_run_passes_every_section(tmp_path):
    result, out, scratch = run_check(tmp_path, part=1)
    results, summary = check_common(result, out, scratch, 1, PART1)
    figures = results["figures"]
    # The GPU test program ran (every test skips without CUDA).
    assert figures["gpu-tests"]["tests"] > 0 and not figures["gpu-tests"]["failed"]
    # The loss comparison (CPU against CPU here) and its tolerance.
    cmp = figures["train-cuda-vs-cpu"]
    assert cmp["passed"] and len(cmp["steps"]) >= 3 and cmp["max_abs_diff"] <= cmp["tolerance_abs"]
    assert "CUDA vs CPU loss curves" in summary
    # NCCL findings (Gloo here): two ranks ran, one rank, resume, and the killed peer.
    nccl = figures["nccl"]
    assert nccl["backend_asked"] == "gloo" and nccl["two_ranks_one_gpu"] == "ran with gloo", nccl
    assert nccl["one_rank"].startswith("passed") and nccl["resume"].startswith("passed"), nccl
    assert nccl["peer_killed"].startswith("passed"), nccl
    assert int(nccl["peer_killed_rank0_exit"]) != 0 and "Another worker probably died" in nccl["peer_killed_rank0_message"]
    assert figures["nccl-resume-losses"]["passed"]
    # ZeRO-1 (reduce-scatter) on two ranks: the one-rank losses, and the replicated two-rank ones exactly.
    assert nccl["zero1"].startswith("passed") and nccl["zero1_vs_replicated"].startswith("passed"), nccl
    assert figures["nccl-zero1-losses"]["passed"] and figures["nccl-zero1-vs-replicated"]["passed"]
    # Four bf16 variants (each QK-Norm type; the softcap on two), each with a finite loss.
    assert len(figures["bf16-variants"]) == 4 and all(v["finite"] for v in figures["bf16-variants"].values())
    for run in ["cmp-cuda", "cmp-cpu", "cuda-graph", "dp-nccl-1rank", "dp-resume", "bf16-qk-l2-softcap-50"]:
        assert results["runs"][run]["final_loss"] > 0, run
        assert f"| {run} |" in summary, run
    assert {"gpt2.json", "gpt2-whole-logits.json"} <= set(results["bench"])
    assert "whole logits / chunked" in results["derived"]


def test_part2_dry_run_passes_every_section(tmp_path):
    # keel's causal CPU attention off, so auto and flash both run SDPA's flash kernel on the CPU.
    result, out, scratch = run_check(tmp_path, part=2, KEEL_CPU_ATTENTION="sdpa")
    results, summary = check_common(result, out, scratch, 2, PART2)
    bench = results["bench"]
    for name in ["compare/keel-1.json", "compare/eager-1.json", "compare/summary.json", "gpt2-flash.json",
                 "qknorm/none-1.json", "qknorm/rms-1.json", "qknorm/l2-1.json", "qknorm/summary.json",
                 "gpt2-softcap.json", "gpt2-fused.json"]:
        assert name in bench, f"{name} missing from results.json: {sorted(bench)}"
    assert bench["compare/keel-1.json"]["tokens_per_s"] > 0
    assert bench["compare/keel-1.json"]["ops_per_step"]["kernels"] > 0  # the kernel counts
    # What was asked for beside what ran: on the H200, flash had silently run cuDNN.
    assert bench["gpt2-flash.json"]["attention"]["requested"] == "flash"
    assert "| compare/keel-1.json | keel |" in summary
    for figure in ["keel vs PyTorch", "flash / auto (cuDNN on Hopper)", "softcap 50 / none, T = 1024"]:
        assert figure in results["derived"], sorted(results["derived"])
    # Both ran the same kernel, and the figure says so rather than pass for a comparison.
    assert "THE SAME KERNEL RAN" in results["derived"]["flash / auto (cuDNN on Hopper)"]["what"]
    # On the CPU keel's CUDA kernels cannot run: the fused/composite figure says so.
    assert bench["gpt2-fused.json"]["fused_kernels"]["cuda"] is False
    assert "THE FUSED KERNELS DID NOT RUN" in results["derived"]["fused CUDA kernels / composite"]["what"]


def test_part3_dry_run_passes_every_section(tmp_path):
    result, out, scratch = run_check(tmp_path, part=3)
    results, summary = check_common(result, out, scratch, 3, PART3)
    bench = results["bench"]
    for name in ["gpt2-softcap-4k.json", "gpt2-muon.json", "default-eager.json", "default-graph.json",
                 "gpt2-ckpt-full.json", "gpt2.json"]:
        assert name in bench, f"{name} missing from results.json: {sorted(bench)}"
    # keel plan's prediction beside the checkpointed bench's measured peak.
    assert results["derived"]["keel plan / measured peak"]["gpt2-ckpt-full.json"]["planned_mib"] > 0
    for mode in ["none", "full"]:
        assert results["figures"][f"plan-gpt2-{mode}"]["saved_per_seq_bytes"] > 0, mode
    # Without a compare record, part 3's own gpt2 bench is the ratios' baseline.
    for figure in ["muon / adamw", "graph / eager, default config", "full recompute / none"]:
        assert figure in results["derived"], sorted(results["derived"])


def test_a_part_killed_after_its_first_section_leaves_that_section_in_out(tmp_path):
    # What a `run` call cut at its time limit does: the whole process group
    # killed at once, no chance to write a summary at the end.
    keel_binary()
    cpp_test_program("test_cuda")
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_") and k != "LD_LIBRARY_PATH"}
    env.update(GPU_CHECK_DRY="1", GPU_CHECK_PART="1", OUT=str(out), GPU_CHECK_SCRATCH=str(scratch),
               GPU_CHECK_ONLY="gpu-tests,train-cuda-vs-cpu", KEEL_BUILD_DIR=str(build_dir()))
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "summary.md").exists() and "| gpu-tests | passed" in (out / "summary.md").read_text():
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the part ended before it could be killed: " + proc.stdout.read()
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert sorted(p.name for p in out.iterdir()) == OUT_FILES
    rows = summary_rows(out)
    assert rows.get("gpu-tests") == "passed" and "train-cuda-vs-cpu" not in rows, rows
    assert "INTERIM" in (out / "summary.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert results["stage"] == "interim" and results["figures"]["gpu-tests"]["tests"] > 0
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert "logs/gpu-tests.log" in tar.getnames()


def test_the_nccl_section_knows_keels_refusal_of_two_ranks_on_one_gpu():
    # The pattern the nccl-2ranks section takes for the expected refusal
    # (then it goes on with Gloo) must match what keel prints for it, its
    # error kind (SharedGpuError::kKind, tests/distributed/test_dist_env.cpp),
    # and nothing else keel prints when a distributed start fails.
    pattern = re.search(r"local nccl_shared_gpu='([^']+)'", SCRIPT.read_text()).group(1)
    kind = re.search(r'kKind = "([^"]+)"', (REPO / "src" / "util" / "error.h").read_text()).group(1)
    matches = lambda line: subprocess.run(["grep", "-qiE", pattern], input=line, text=True).returncode == 0
    # keel's line from the H200 (docs/results/gpu/rerun-part1-nccl.json), and its rendering from the kind
    gpu = json.loads((REPO / "docs" / "results" / "gpu" / "rerun-part1-nccl.json").read_text())
    seen = gpu["figures"]["nccl"]["two_ranks_one_gpu"].removeprefix("refused: ")
    assert matches(seen) and seen.startswith(f"keel: {kind}: ")
    assert matches("NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 6000")
    for other in ["keel: distributed setup: rank 1 could not reach rank 0's rendezvous at 127.0.0.1:29500",
                  "keel: invalid configuration:", "keel launch: rank 0 (pid 683) exited with code 2",
                  "keel: data parallel: rank 0: the gradient all-reduce with the other ranks failed"]:
        assert not matches(other), other


def test_only_runs_the_named_sections_and_refuses_unknown_names(tmp_path):
    result, out, _ = run_check(tmp_path / "a", part=1, GPU_CHECK_ONLY="gpu-tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary_rows(out) == {"preflight": "passed", "gpu-tests": "passed"}
    result, out, _ = run_check(tmp_path / "b", part=3, GPU_CHECK_ONLY="bench-gpt2-muon,no-such-section")
    assert result.returncode == 1, result.stdout + result.stderr
    assert summary_rows(out) == {"preflight": "passed", "bench-gpt2-muon": "passed", "no-such-section": "failed"}


@pytest.mark.parametrize("part", [1, 2, 3])
def test_a_budget_too_small_skips_sections_and_still_reports(tmp_path, part):
    result, out, _ = run_check(tmp_path, part=part, budget=1)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert summary_rows(out) == {"preflight": "passed", **{s: "skipped" for s in PARTS[part]}}, log
    assert sorted(p.name for p in out.iterdir()) == OUT_FILES
    assert "skipped (needs ~" in result.stdout
    assert json.loads((out / "results.json").read_text())["exit_status"] == 0
