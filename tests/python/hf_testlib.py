"""Shared helpers of the Hugging Face parity tests (tests/python/test_hf_*.py).

They drive the built keel binary ($KEEL_BINARY, default $KEEL_BUILD_DIR/keel,
build dir default "build") and the helper program tests/test_hf_interop of
the same build (tests/interop/test_hf_interop.cpp), which computes keel's
logits and token ids for Python to compare with transformers.
"""
import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from keel_testlib import REPO, build_dir, cpp_test_program, keel, keel_binary  # noqa: F401 (re-exported as lib.keel ...)

TOLERANCE = 1e-4  # max |logit difference| in fp32 (issue 10)
VOCAB = 512       # small tokenizer: the embedding dominates tiny models otherwise


def run_interop(test: str, work: Path, requests: list) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "requests.json").write_text(json.dumps(requests))
    result = subprocess.run([str(cpp_test_program("test_hf_interop")), f"--gtest_filter=Interop.{test}"],
                            env=dict(os.environ, KEEL_INTEROP_DIR=str(work)),
                            capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[  PASSED  ] 1 test." in output, output  # a skipped test also exits 0


def base_config(data_dir: Path, out_dir: Path, tokenizer_type: str = "bpe") -> str:
    """A tiny model trained 3 steps at a high learning rate on the embedded
    corpus: every weight, norm gains included, moves well away from its
    init, so a norm or gain mapped wrongly shows in the logits."""
    return f"""
model:
  vocab_size: {VOCAB}
  max_seq_len: 32
  d_model: 64
  n_layers: 2
  n_heads: 4
  n_kv_heads: 2
  d_ff: 96
  norm_eps: 1.0e-6
  init: {{std: 0.1}}
data:
  dir: {data_dir}
  sources: [{REPO / 'data' / 'corpus.txt.gz'}]
  tokenizer_type: {tokenizer_type}
  tokenizer_sample_mb: 1
train:
  device: cpu
  threads: 1  # tiny models; also immune to OpenMP oversubscription on a busy machine
  max_steps: 3
  batch_size: 2
  lr: 0.05
  min_lr: 0.0
  warmup_steps: 0
  schedule: constant
  weight_decay: 0.0
  eval_every: 0
  eval_batches: 1
monitor: {{every: 0}}
checkpoint: {{every: 0}}
run:
  name: base
  out_dir: {out_dir}
"""


def prepare_data(root: Path, tokenizer_type: str = "bpe") -> Path:
    """Tokenizer + shards once per session and tokenizer type; returns the config path."""
    config = root / f"base-{tokenizer_type}.yaml"
    config.write_text(base_config(root / f"data-{tokenizer_type}", root / "runs", tokenizer_type))
    keel("prepare", config, "--quiet")
    return config


def train(config: Path, name: str, overrides: list) -> Path:
    sets = [a for o in overrides for a in ("--set", o)]
    keel("train", config, "--set", f"run.name={name}", *sets)
    return config.parent / "runs" / name


def random_ids(batch: int = 2, length: int = 32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=g)


def keel_logits(work: Path, jobs: list, eos: int = None) -> list:
    """jobs: (checkpoint_or_run_dir, ids, overrides); keel's fp32 logits for each, in one call.
    eos: the EOS id a data.document_mask model opens documents with."""
    work.mkdir(parents=True, exist_ok=True)
    requests = []
    for i, (checkpoint, ids, overrides) in enumerate(jobs):
        save_file({"ids": ids.contiguous()}, str(work / f"ids{i}.safetensors"))
        requests.append({"checkpoint": str(checkpoint), "tokens": str(work / f"ids{i}.safetensors"),
                         "out": str(work / f"logits{i}.safetensors"), "set": overrides})
        if eos is not None:
            requests[-1]["eos"] = eos
    run_interop("KeelLogits", work, requests)
    return [load_file(str(work / f"logits{i}.safetensors"))["logits"] for i in range(len(jobs))]


def hf_logits(model_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(ids).logits.float()


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.double() - b.double()).abs().max().item()


def corpus_sample(lines: int = 3000, documents: int = 40) -> list:
    """Every k-th line of the embedded corpus, plus whole multi-line documents."""
    text = gzip.open(REPO / "data" / "corpus.txt.gz", "rt", encoding="utf-8").read()
    all_lines = [l for l in text.split("\n") if l and l != "<|endoftext|>"]
    step = max(1, len(all_lines) // lines)
    sample = all_lines[::step][:lines]
    if documents == 0:
        return sample
    docs = [d.strip("\n") for d in text.split("<|endoftext|>") if d.strip()]
    dstep = max(1, len(docs) // documents)
    return sample + docs[::dstep][:documents]
