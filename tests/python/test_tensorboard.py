"""keel's TensorBoard event files, read back with the `tensorboard` package.

A tiny `keel train` run writes metrics.jsonl and events.out.tfevents.*; every
numeric field of every metrics record must come back from TensorBoard's
EventAccumulator as a scalar with the same step and value (float32), under
the tag scheme of src/monitor/tensorboard_writer.h. After a resume that drops
logged steps, the events must again equal metrics.jsonl, each step once.

Needs the C++ build (keel_testlib.py says where it is looked up).
"""
import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from keel_testlib import keel


def flatten(value, tag, out):
    """The C++ metrics_to_scalars, restated."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{tag}/{k}", out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{tag}/{i}", out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        out[tag] = float(value)


def expected_scalars(run: Path):
    """tag -> {step: value} from metrics.jsonl."""
    tags = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        flat = {}
        for key, value in rec.items():
            if key in ("step", "spikes"):
                continue
            if isinstance(value, (dict, list)):
                flatten(value, key, flat)
            elif key.startswith("val_"):
                flatten(value, "val/" + key[4:], flat)
            else:
                flatten(value, "train/" + key, flat)
        for tag, v in flat.items():
            tags.setdefault(tag, {})[rec["step"]] = v
    return tags


def tensorboard_scalars(run: Path):
    acc = event_accumulator.EventAccumulator(str(run), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        assert len(steps) == len(set(steps)), f"{tag}: a step twice: {steps}"
        out[tag] = {e.step: e.value for e in events}
    return out


def assert_same(run: Path):
    want, got = expected_scalars(run), tensorboard_scalars(run)
    assert set(got) == set(want)
    for tag, series in want.items():
        assert sorted(got[tag]) == sorted(series), tag
        for step, value in series.items():
            assert got[tag][step] == np.float32(value), (tag, step, got[tag][step], value)
    return want


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tensorboard")
    rng = random.Random(5)
    subj, verb, obj = ["The cat", "A dog", "My friend"], ["sees", "likes", "finds"], ["a ball", "the road", "an apple"]
    docs = [" ".join(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}." for _ in range(8)) for _ in range(300)]
    (d / "corpus.txt").write_text("\n%\n".join(docs) + "\n")
    (d / "config.yaml").write_text(
        "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}\n"
        f"data: {{dir: {d}/data, sources: [{d}/corpus.txt], doc_separator: '%', val_fraction: 0.1}}\n"
        "train: {max_steps: 8, batch_size: 4, lr: 3e-3, warmup_steps: 1, log_every: 1, eval_every: 4, "
        "eval_batches: 1, threads: 1, z_loss: 1e-4}\n"
        "checkpoint: {every: 4, keep_last: 5}\n"
        "monitor: {every: 2, sequences: 1, layer_grad_norms: true}\n"
        f"run: {{out_dir: {d}/runs, name: tb}}\n")
    return d


def test_event_files_hold_every_metric(workdir):
    keel("train", workdir / "config.yaml")
    run = workdir / "runs" / "tb"
    events = [p for p in run.iterdir() if "tfevents" in p.name]
    assert len(events) == 1
    want = assert_same(run)
    # The fields the issue names are there, nested ones flattened.
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/z_loss", "val/loss",
                "attn/0/max_logit", "attn/1/entropy", "output/max_logit", "layer_grad_norms/blocks/1"):
        assert tag in want, tag
    assert sorted(want["train/loss"]) == list(range(1, 9))
    assert sorted(want["val/loss"]) == [4, 8]


def test_resume_rewrites_the_events_without_dropped_steps(workdir):
    run = workdir / "runs" / "tb"
    # As if the run had died after step 8 was logged but before its checkpoint.
    shutil.rmtree(run / "checkpoints" / "step_00000008")
    before = (run / "metrics.jsonl").read_text()
    keel("train", workdir / "config.yaml", "--resume", "auto")
    assert (run / "metrics.jsonl").read_text() != "" and "resumed from" in (run / "train.log").read_text()
    events = [p for p in run.iterdir() if "tfevents" in p.name]
    assert len(events) == 1, events
    want = assert_same(run)
    assert sorted(want["train/loss"]) == list(range(1, 9))
    # Bit-exact resume on the CPU: the redone steps log the same loss.
    old = {json.loads(l)["step"]: json.loads(l)["loss"] for l in before.splitlines()}
    assert {s: v for s, v in want["train/loss"].items()} == old


def test_tensorboard_can_be_switched_off(workdir):
    keel("train", workdir / "config.yaml", "--set", "run.name=off", "--set", "run.tensorboard=false",
         "--set", "train.max_steps=2")
    run = workdir / "runs" / "off"
    assert (run / "metrics.jsonl").exists()
    assert not [p for p in run.iterdir() if "tfevents" in p.name]
