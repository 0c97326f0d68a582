"""keel under PyTorch's own launcher: `torchrun --no-python --nproc-per-node 2
build/keel train CONFIG` forms a two-rank Gloo group from torchrun's
environment (and its agent's TCPStore) and trains to the same losses as one
process."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from keel_testlib import keel_binary


def losses(run: Path) -> dict:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = rec["loss"]
    return out


def test_torchrun_two_workers_match_one(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun not in this Python environment")
    rng = random.Random(3)
    words = ["the", "cat", "sees", "a", "dog", "river", "light", "house", "runs", "far"]
    text = "".join(" ".join(rng.choice(words) for _ in range(12)) + ".\n%\n" for _ in range(400))
    (tmp_path / "corpus.txt").write_text(text)
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}\n"
        f"data: {{dir: {tmp_path}/data, sources: [{tmp_path}/corpus.txt], doc_separator: '%', val_fraction: 0.1}}\n"
        "train: {max_steps: 8, batch_size: 4, lr: 3.0e-3, warmup_steps: 2, log_every: 1, eval_every: 4, "
        "eval_batches: 1, threads: 1}\n"
        f"run: {{out_dir: {tmp_path}/runs}}\n")
    keel = str(keel_binary())
    subprocess.run([keel, "prepare", str(config), "--quiet"], check=True)
    one = subprocess.run([keel, "train", str(config), "--set", "run.name=one"], capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    env = dict(os.environ, OMP_NUM_THREADS="1")
    two = subprocess.run([str(torchrun), "--no-python", "--standalone", "--nproc-per-node", "2", keel, "train",
                          str(config), "--set", "run.name=two"], capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stdout + two.stderr
    log = two.stdout + two.stderr
    assert "2 ranks, gloo (torchrun env)" in log, log
    assert "parameters identical on all 2 ranks after step 8" in log, log
    a, b = losses(tmp_path / "runs" / "one"), losses(tmp_path / "runs" / "two")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
