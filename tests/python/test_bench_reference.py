"""bench/reference_model.py (the PyTorch side of scripts/bench/bench_compare.sh) is
keel's model: same parameter names, shapes and count, and on keel's
(perturbed) weights the same logits, for the benchmark configs and for the
other layouts the reference supports (GELU + LayerNorm + tied head as in
gpt2-124m, L2 QK-Norm, QK-Norm after RoPE, per-projection QK-Norm, a padded
vocabulary).

The C++ half is Interop.BenchReferenceModel in test_bench
(tests/train/test_bench.cpp): it builds the model from the config with keel,
perturbs every weight, and writes weights, tokens and logits. Needs the C++
build ($KEEL_BUILD_DIR, default "build").
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from keel_testlib import REPO, cpp_test_program

sys.path.insert(0, str(REPO / "bench"))
import reference_model as rm  # noqa: E402

SMALL_GPT2 = ["model.d_model=128", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=4",
              "model.max_seq_len=64", "model.vocab_size=1000"]
CASES = {
    "bench-cpu-tiny": ("configs/bench-cpu-tiny.yaml", []),
    "bench-cpu": ("configs/bench-cpu.yaml", []),
    "bench-cpu-gpt": ("configs/bench-cpu-gpt.yaml", []),
    "bench-cpu-l2": ("configs/bench-cpu.yaml", ["model.qk_norm.type=l2", "model.n_layers=2"]),
    "bench-cpu-after-rope-projection": ("configs/bench-cpu.yaml", [
        "model.qk_norm.position=after_rope", "model.qk_norm.scope=projection", "model.n_layers=2"]),
    "gpt2-small-padded-vocab": ("configs/gpt2-124m.yaml", SMALL_GPT2 + ["train.device=cpu", "train.precision=fp32"]),
}


def keel_reference(tmp_path: Path, config: str, sets: list[str]) -> tuple[dict, int]:
    env = dict(os.environ, KEEL_INTEROP_DIR=str(tmp_path), KEEL_INTEROP_CONFIG=str(REPO / config),
               KEEL_INTEROP_SET=",".join(sets))
    result = subprocess.run([str(cpp_test_program("test_bench")), "--gtest_filter=Interop.BenchReferenceModel"],
                            env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[  PASSED  ] 1 test." in output, output
    path = tmp_path / "reference.safetensors"
    tensors = {}
    with safe_open(str(path), framework="pt") as f:
        params = int(f.metadata()["parameters"])
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    return tensors, params


@pytest.mark.parametrize("case", list(CASES))
def test_reference_model_is_keels_model(case, tmp_path):
    config, sets = CASES[case]
    tensors, keel_params = keel_reference(tmp_path, config, sets)
    cfg = rm.load_config(str(REPO / config), sets)
    model = rm.Transformer(cfg["model"])
    # Same parameter count as keel's model_size() (what keel bench reports).
    assert rm.parameter_count(model) == keel_params
    tokens, keel_logits = tensors.pop("__tokens"), tensors.pop("__logits")
    # Same names and shapes: strict loading fails on any difference.
    model.load_state_dict(tensors, strict=True)
    with torch.no_grad():
        logits = model(tokens)
    assert logits.shape == keel_logits.shape
    V = int(cfg["model"]["vocab_size"])
    if logits.size(-1) > V:  # padded ids are -inf in both
        assert torch.isneginf(logits[..., V:]).all() and torch.isneginf(keel_logits[..., V:]).all()
    diff = (logits[..., :V] - keel_logits[..., :V]).abs().max().item()
    assert diff < 1e-4, f"max |logit difference| {diff}"


def test_parser_without_pyyaml_reads_shipped_configs():
    """The GPU machine may lack PyYAML: the fallback parser must agree with it."""
    yaml = pytest.importorskip("yaml")
    files = sorted((REPO / "configs").glob("*.yaml"))
    assert len(files) >= 3
    for path in files:
        text = path.read_text()
        assert rm.parse_yaml_subset(text) == yaml.safe_load(text), path.name


def test_reference_refuses_layouts_it_does_not_implement():
    cfg = rm.load_config(str(REPO / "configs/bench-cpu-tiny.yaml"), ["model.norm_placement=sandwich"])
    with pytest.raises(NotImplementedError, match="norm_placement"):
        rm.Transformer(cfg["model"])
