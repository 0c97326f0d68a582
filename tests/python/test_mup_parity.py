"""keel's µP rules against Microsoft's `mup` package (issue 33).

For each case keel prints its per-parameter table (`keel params --json`) for
the base model (standard parametrization at the base width) and for two wider
models under `model.parametrization: mup`. A PyTorch module with the same
parameter names and shapes (embedding as nn.Embedding, output head as
mup.MuReadout, tied heads as mup.MuSharedReadout) gets its base shapes from
the base table with `mup.set_base_shapes`; then, per parameter:

- role: mup's infshape.ninf() (0 fixed, 1 vector-like, 2 matrix-like);
- init std: what `mup.init.normal_(p, std=σ)` draws with, σ the standard
  model's std for that parameter (recorded from the sampler, not estimated);
- LR and weight-decay multipliers: the param groups `mup.MuAdamW` builds;
- the output multiplier: 1 / MuReadout.width_mult().

Cases: GQA with a gated MLP whose width is rounded to 64 (so fan-in ratios
of w_down differ from the width ratio), tied embeddings with QK-Norm gains
and biases, and a fixed head_dim (heads added with width).
"""
import json

import mup
import pytest
import torch
from torch import nn

import keel_testlib as lib

CASES = {
    "gqa_swiglu_untied": [],
    "tied_qknorm_bias": ["model.tie_embeddings=true", "model.qk_norm.type=rms", "model.bias=true"],
    "fixed_head_dim": ["model.n_heads=4", "model.n_kv_heads=2", "model.mup.base_head_dim=8"],
}
BASE_WIDTH = 32
WIDTHS = [64, 128]
COMMON = ["model.vocab_size=200", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
          "model.max_seq_len=32"]


def table(overrides, config_path):
    out = lib.keel("params", config_path, "--json", *[a for o in overrides for a in ("--set", o)])
    return json.loads(out.stdout)


def heads_for(width, overrides):
    """n_heads/n_kv_heads at `width` when head_dim is fixed (heads grow with width)."""
    if "model.mup.base_head_dim=8" not in overrides:
        return []
    return [f"model.n_heads={width // 8}", f"model.n_kv_heads={width // 16}"]


class Shapes(nn.Module):
    """A module holding parameters of keel's names and shapes (no forward: mup needs the shapes)."""

    def __init__(self, params, tied):
        super().__init__()
        self.keel_names = {}
        by_name = {p["name"]: p["shape"] for p in params}
        v, c = by_name["wte"]
        self.wte = nn.Embedding(v, c)
        self.keel_names["wte"] = "wte.weight"
        self.lm_head = (mup.MuSharedReadout(self.wte.weight, bias=False) if tied
                        else mup.MuReadout(c, v, bias=False))
        if not tied:
            self.keel_names["lm_head"] = "lm_head.weight"
        self.rest = nn.ParameterDict()
        for name, shape in by_name.items():
            if name in ("wte", "lm_head"):
                continue
            key = name.replace(".", "__")
            self.rest[key] = nn.Parameter(torch.zeros(shape))
            self.keel_names[name] = "rest." + key


def mup_view(base_params, params, tied):
    base, model = Shapes(base_params, tied), Shapes(params, tied)
    mup.set_base_shapes(model, base, rescale_params=False)
    return model


def mup_init_std(p, std):
    """The std mup.init.normal_ draws p with (the sampler's argument)."""
    seen = []
    original = mup.init._no_grad_normal_
    mup.init._no_grad_normal_ = lambda t, mean, std: seen.append(std)
    try:
        mup.init.normal_(p, std=std)
    finally:
        mup.init._no_grad_normal_ = original
    assert len(seen) == 1
    return seen[0]


def mup_groups(model, lr=1.0, wd=0.1):
    """parameter -> (LR multiplier, decay multiplier) from MuAdamW's groups."""
    out = {}
    opt = mup.MuAdamW(model.parameters(), lr=lr, weight_decay=wd)
    for g in opt.param_groups:
        for p in g["params"]:
            out[p] = (g["lr"] / lr, g["weight_decay"] / wd)
    return out


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mup") / "model.yaml"
    path.write_text("model:\n  d_model: 32\n")
    return path


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("width", WIDTHS)
def test_keel_matches_mup_per_parameter(config_path, case, width):
    extra = CASES[case]
    tied = "model.tie_embeddings=true" in extra
    base_overrides = [o for o in extra if not o.startswith("model.mup.")]
    base = table(COMMON + base_overrides + [f"model.d_model={BASE_WIDTH}"], config_path)
    heads = heads_for(width, extra)
    standard = table(COMMON + base_overrides + [f"model.d_model={width}"] + heads, config_path)
    ours = table(COMMON + extra + heads + [f"model.d_model={width}", "model.parametrization=mup",
                                          f"model.mup.base_width={BASE_WIDTH}"], config_path)
    model = mup_view(base["params"], ours["params"], tied)
    named = dict(model.named_parameters())
    groups = mup_groups(model)
    sp_std = {p["name"]: p["init_std"] for p in standard["params"]}
    roles = {0: "fixed", 1: "vector-like", 2: "matrix-like"}
    checked = matrix_like = 0
    for p in ours["params"]:
        name = p["name"]
        if name == "lm_head" and tied:
            continue
        tensor = named[model.keel_names[name]]
        assert list(tensor.shape) == p["shape"], name
        assert p["role"] == roles[tensor.infshape.ninf()], name
        lr_mult, wd_mult = groups[tensor]
        assert p["lr_mult"] == pytest.approx(lr_mult, rel=1e-12), name
        assert p["wd_mult"] == pytest.approx(wd_mult, rel=1e-12), name
        if sp_std[name] > 0:  # drawn from a normal (not a constant fill)
            assert p["init_std"] == pytest.approx(mup_init_std(tensor, sp_std[name]), rel=1e-12), name
        checked += 1
        matrix_like += p["role"] == "matrix-like"
    assert checked >= 10 and matrix_like == 2 * 7  # every attention and MLP matrix of both blocks
    assert ours["output_mult"] == pytest.approx(1.0 / model.lm_head.width_mult(), rel=1e-12)
    assert ours["output_mult"] == pytest.approx(BASE_WIDTH / width)
