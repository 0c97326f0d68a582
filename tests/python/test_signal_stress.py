"""scripts/stress/signal_stress.sh against keel's real exit codes: a run
kept off oneDNN's GEMM (KEEL_CPU_LINEAR=aten) trains through a stream of
SIGUSR1 and counts as clean; a run keel refuses (exit 2, a bad key) counts
as failed; bad settings are the script's own exit 2. (Whether the default
survives depends on the oneDNN in the wheel: docs/reliability.md.)"""
import os
import re
import subprocess

from hf_testlib import corpus_sample
from keel_testlib import REPO, keel_binary

SCRIPT = REPO / "scripts" / "stress" / "signal_stress.sh"


def write_config(tmp_path, extra=""):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(corpus_sample(lines=800, documents=0)) + "\n")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""\
model: {{vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1}}
data: {{dir: {tmp_path / 'data'}, sources: [{corpus}], val_fraction: 0.1}}
train: {{max_steps: 1000, batch_size: 4, lr: 1.0e-3, warmup_steps: 1, eval_every: 0, threads: 1{extra}}}
checkpoint: {{every: 0}}
monitor: {{every: 0}}
""")
    return config


def run_script(tmp_path, config, **env):
    full = dict(os.environ, KEEL=str(keel_binary()), OUT=str(tmp_path / "out"), RUNS="1", STEPS="40", US="500")
    full.update(env)
    return subprocess.run(["bash", str(SCRIPT), str(config)], capture_output=True, text=True, env=full, timeout=600)


def test_a_run_that_survives_the_signals_is_clean(tmp_path):
    out = run_script(tmp_path, write_config(tmp_path), KEEL_CPU_LINEAR="aten")
    assert out.returncode == 0, out.stdout + out.stderr
    sent = re.search(r"run 1: exit 0 after (\d+) signals", out.stdout)
    assert sent and int(sent.group(1)) > 0, out.stdout
    assert "0 of 1 runs failed" in out.stdout


def test_a_run_keel_refuses_counts_as_failed(tmp_path):
    out = run_script(tmp_path, write_config(tmp_path, extra=", no_such_key: 1"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "run 1: exit 2 after" in out.stdout and "1 of 1 runs failed" in out.stdout, out.stdout


def test_bad_settings_are_exit_2(tmp_path):
    out = run_script(tmp_path, write_config(tmp_path), RUNS="0")
    assert out.returncode == 2 and "positive integers" in out.stderr
    out = run_script(tmp_path, tmp_path / "missing.yaml")
    assert out.returncode == 2 and "no config at" in out.stderr
