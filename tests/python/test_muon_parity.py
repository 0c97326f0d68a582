"""keel's Muon against torch.optim.Muon (issue 21).

keel's side is Interop.KeelMuon in tests/optim/test_muon.cpp: it takes the
same weights, draws the same gradients (torch.manual_seed(seed + step), then
torch.randn per parameter in name order: one generator in LibTorch and
PyTorch), runs keel's optimizer and writes the weights after the first and
the last step. Here torch.optim.Muon (and torch.optim.AdamW for the
parameters keel gives to AdamW) replays the same steps.

torch.optim.Muon always runs Newton-Schulz in bf16; keel runs it in fp32 on
the CPU. For the 1e-6 comparison torch's own iteration is run in fp32 (the
patch below changes only the dtype of its _zeropower_via_newtonschulz); the
bf16 case compares with torch unpatched.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from keel_testlib import REPO, cpp_test_program

muon_module = pytest.importorskip("torch.optim._muon")

SETTINGS = {"lr": 0.02, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True, "ns_steps": 5,
            "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}
TORCH_ADJUST = {"match_rms_adamw": "match_rms_adamw", "spectral": "original"}


def fp32_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    """torch's _zeropower_via_newtonschulz with its bf16 cast removed."""
    a, b, c = ns_coefficients
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def run_keel(work: Path, requests: list) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "requests.json").write_text(json.dumps(requests))
    result = subprocess.run([str(cpp_test_program("test_muon")), "--gtest_filter=Interop.KeelMuon"],
                            env=dict(os.environ, KEEL_INTEROP_DIR=str(work)), capture_output=True, text=True,
                            timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "[  PASSED  ] 1 test." in output, output  # a skipped test also exits 0


def torch_replay(init: dict, groups: dict, settings: dict, adjust: str, seed: int, lrs: list, grad0: dict):
    """The same steps with torch.optim.Muon and torch.optim.AdamW; returns
    the weights after the first and the last step."""
    names = sorted(init)
    params = {n: init[n].clone().requires_grad_(True) for n in names}
    muon = [params[n] for n in names if groups[n]["part"] == "muon"]
    decay = [params[n] for n in names if groups[n]["part"] == "adamw" and groups[n]["weight_decay"] > 0]
    no_decay = [params[n] for n in names if groups[n]["part"] == "adamw" and groups[n]["weight_decay"] == 0]
    optimizers = [torch.optim.Muon(muon, lr=settings["lr"], weight_decay=settings["weight_decay"],
                                   momentum=settings["momentum"], nesterov=settings["nesterov"],
                                   ns_steps=settings["ns_steps"], adjust_lr_fn=TORCH_ADJUST[adjust])]
    adam_groups = [g for g in ({"params": decay, "weight_decay": settings["weight_decay"]},
                               {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    if adam_groups:
        optimizers.append(torch.optim.AdamW(adam_groups, lr=settings["lr"], betas=(settings["beta1"], settings["beta2"]),
                                            eps=settings["eps"]))
    first = last = None
    for k, lr in enumerate(lrs):
        torch.manual_seed(seed + k)
        for n in names:
            params[n].grad = torch.randn(params[n].shape)
            if k == 0:  # the shared generator: keel drew the same gradients
                assert torch.equal(params[n].grad, grad0[n]), f"gradient of {n} differs: not the same generator?"
        for opt in optimizers:
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
        snapshot = {n: params[n].detach().clone() for n in names}
        if k == 0:
            first = snapshot
        last = snapshot
    return first, last


def compare(work: Path, tag: str, request: dict, adjust: str, ns_dtype: str, tolerance: float, monkeypatch):
    request = dict(request, out=str(work / f"{tag}.safetensors"), groups=str(work / f"{tag}.json"),
                   settings=dict(SETTINGS, adjust_lr=adjust, ns_dtype=ns_dtype))
    run_keel(work / tag, [request])
    keel_out = load_file(request["out"])
    groups = json.loads(Path(request["groups"]).read_text())

    def part(prefix):
        return {k[len(prefix):]: v for k, v in keel_out.items() if k.startswith(prefix)}

    with monkeypatch.context() as patch:
        if ns_dtype == "fp32":
            patch.setattr(muon_module, "_zeropower_via_newtonschulz", fp32_newton_schulz)
        first, last = torch_replay(part("init."), groups, SETTINGS, adjust, request["seed"], request["lr"],
                                   part("grad0."))
    worst = 0.0
    for label, reference, mine in (("step 1", first, part("step0.")), (f"step {len(request['lr'])}", last,
                                                                       part("last."))):
        assert sorted(reference) == sorted(mine)
        for name in reference:
            diff = (reference[name] - mine[name]).abs().max().item()
            worst = max(worst, diff)
            assert diff <= tolerance, f"{tag} {label}: {name} differs by {diff:.3g} (> {tolerance})"
    # The weights moved: a comparison of two unchanged copies would pass too.
    moved = max((last[n] - part("init.")[n]).abs().max().item() for n in last)
    assert moved > 10 * tolerance, moved
    return worst, groups


@pytest.mark.parametrize("adjust", ["match_rms_adamw", "spectral"])
@pytest.mark.parametrize("steps", [1, 20])
def test_matrices_match_torch_muon(tmp_path, monkeypatch, adjust, steps):
    torch.manual_seed(0)
    weights = {"square.wq": torch.randn(32, 32) * 0.02, "wide.w_up": torch.randn(16, 48) * 0.02,
               "tall.w_down": torch.randn(48, 16) * 0.02}
    save_file(weights, str(tmp_path / "weights.safetensors"))
    # A warm-up and decay, so the steps use different learning rates.
    lrs = [SETTINGS["lr"] * min(1.0, (k + 1) / 5) for k in range(steps)]
    request = {"params": str(tmp_path / "weights.safetensors"), "steps": steps, "seed": 100, "lr": lrs}
    worst, groups = compare(tmp_path, f"m{steps}{adjust}", request, adjust, "fp32", 1e-6, monkeypatch)
    assert all(g["part"] == "muon" for g in groups.values())
    print(f"max |keel - torch| over {steps} steps ({adjust}): {worst:.2e}")


def test_default_model_matches_torch_muon_and_adamw(tmp_path, monkeypatch):
    """The whole default model for 20 steps: Muon on the linears, AdamW on the rest."""
    lrs = [SETTINGS["lr"] * min(1.0, (k + 1) / 5) for k in range(20)]
    request = {"model_config": str(REPO / "configs" / "default.yaml"), "steps": 20, "seed": 7, "lr": lrs}
    worst, groups = compare(tmp_path, "model", request, "match_rms_adamw", "fp32", 1e-6, monkeypatch)
    parts = [g["part"] for g in groups.values()]
    assert parts.count("muon") == 4 * 7 and "adamw" in parts  # 4 blocks x (wq wk wv wo w_gate w_up w_down)
    print(f"max |keel - torch| over 20 steps of the default model: {worst:.2e}")


def test_bf16_newton_schulz_matches_unpatched_torch(tmp_path, monkeypatch):
    """ns_dtype bf16 (CUDA's default) against torch.optim.Muon as shipped: one
    step, within bf16's error on the update."""
    torch.manual_seed(1)
    weights = {"wide.w_up": torch.randn(16, 48) * 0.02, "tall.w_down": torch.randn(48, 16) * 0.02}
    save_file(weights, str(tmp_path / "weights.safetensors"))
    request = {"params": str(tmp_path / "weights.safetensors"), "steps": 1, "seed": 3, "lr": [SETTINGS["lr"]]}
    # An update is about lr * adjust = 0.02 * 0.2 * sqrt(48) = 0.028 per entry; bf16 keeps 3 digits.
    worst, _ = compare(tmp_path, "bf16", request, "match_rms_adamw", "bf16", 2e-4, monkeypatch)
    print(f"max |keel - torch| with bf16 Newton-Schulz: {worst:.2e}")
