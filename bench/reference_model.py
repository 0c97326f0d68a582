"""keel's decoder-only transformer in plain PyTorch, for benchmarking keel
against PyTorch (bench/bench_pytorch.py) and for checking that the two are the
same model (tests/python/test_bench_reference.py).

It mirrors src/model/*.cpp for the layouts the benchmark configs use:
pre-norm blocks, RMSNorm or LayerNorm (no bias unless model.bias), SwiGLU /
GeGLU-tanh / GELU MLP, grouped-query attention through SDPA (enable_gqa),
rotate-half RoPE computed exactly as src/model/rope.cpp does, QK-Norm (rms,
layernorm, l2 with temperature; per head or per projection; before or after
RoPE), tied or untied head, vocabulary padded to model.pad_vocab_multiple
with the padded logits set to -inf. Parameter names equal keel's, so a keel
checkpoint's model.safetensors loads with load_state_dict. Anything else
(post/reordered/sandwich norm, softcaps, embedding norms, Gemma's (1+w)
gains) raises NotImplementedError rather than silently differing.

The config is read from keel's YAML with keel's defaults (load_config).
PyYAML is used when installed; otherwise a small parser for the subset of
YAML keel's config files use (nested mappings, scalars, inline lists).
"""
from __future__ import annotations

import copy
import math
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# keel's defaults (src/config/*_config.cpp; `keel config --describe`) for the
# keys this module reads.
DEFAULTS: dict[str, Any] = {
    "model": {
        "vocab_size": 4096, "pad_vocab_multiple": 64, "max_seq_len": 256, "d_model": 128,
        "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "d_ff": 0, "mlp": "swiglu", "norm": "rms",
        "norm_unit_offset": False, "norm_eps": 1e-5, "norm_placement": "pre", "bias": False,
        "tie_embeddings": False, "rope": True, "rope_theta": 10000.0,
        "qk_norm": {"type": "none", "scope": "head", "position": "before_rope", "gain": True,
                    "gain_per_head": False, "bias": False, "eps": 1e-6, "temperature_learnable": True,
                    "temperature_per_head": False, "temperature_init": None, "henry_seq_len": 0},
        "attn_softcap": None, "final_softcap": None, "embed_norm": "none", "query_pre_attn_scalar": None,
        "init": {"std": 0.02, "depth_scaled": True, "truncate": None},
    },
    "train": {
        "device": "auto", "batch_size": 16, "batch_tokens": 0, "micro_batch_size": 0, "seq_len": 0,
        "lr": 3e-3, "weight_decay": 0.1, "independent_weight_decay": False, "decay_embeddings": False,
        "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "z_loss": 0.0, "precision": "auto",
        "tf32": True, "threads": 0,
    },
    "run": {"name": "default", "seed": 1337},
}


# --------------------------------------------------------------------------
# Config


def _scalar(text: str) -> Any:
    t = text.strip()
    if t == "" or t in ("null", "~", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if t.startswith("[") and t.endswith("]"):
        return [_scalar(x) for x in _split_flow(t[1:-1])]
    if t.startswith("{") and t.endswith("}"):
        out = {}
        for item in _split_flow(t[1:-1]):
            k, sep, v = item.partition(":")
            if not sep:
                raise ValueError(f"unsupported YAML flow mapping (install PyYAML): {text!r}")
            out[k.strip()] = _scalar(v)
        return out
    if re.fullmatch(r"[-+]?\d+", t):
        return int(t)
    try:
        return float(t)
    except ValueError:
        return t


def _split_flow(inner: str) -> list[str]:
    """Top-level comma-separated items of a flow list/mapping body."""
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur)
    return [x.strip() for x in items]


def parse_yaml_subset(text: str) -> dict:
    """Nested block mappings, scalars, flow [lists] and {mappings}, comments: what
    keel's config files use. Raises ValueError on anything else."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*:(.*)", line)
        if not m:
            raise ValueError(f"line {lineno}: unsupported YAML (install PyYAML): {raw!r}")
        key, rest = m.group(1), m.group(2).strip()
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if rest == "":
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
        else:
            parent[key] = _scalar(rest)
    return root


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


def load_config(path: str, overrides: list[str] | None = None) -> dict:
    """keel's config file merged over DEFAULTS, then `section.key=value`
    overrides as keel's --set applies them."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml  # type: ignore
        data = yaml.safe_load(text) or {}
    except ImportError:
        data = parse_yaml_subset(text)
    cfg = _merge(copy.deepcopy(DEFAULTS), data)
    for item in overrides or []:
        key, _, value = item.partition("=")
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _scalar(value)
    return cfg


def padded_vocab(m: dict) -> int:
    mult = max(1, int(m["pad_vocab_multiple"]))
    return (int(m["vocab_size"]) + mult - 1) // mult * mult


def ffn_dim(m: dict) -> int:
    if m["d_ff"] > 0:
        return int(m["d_ff"])
    if m["mlp"] == "gelu":
        return 4 * m["d_model"]
    raw = (8 * m["d_model"] + 2) // 3
    return (raw + 63) // 64 * 64


def seq_len(cfg: dict) -> int:
    return int(cfg["train"]["seq_len"]) or int(cfg["model"]["max_seq_len"])


def check_supported(m: dict) -> None:
    unsupported = []
    if m["norm_placement"] != "pre":
        unsupported.append(f"model.norm_placement={m['norm_placement']}")
    for key in ("attn_softcap", "final_softcap", "query_pre_attn_scalar"):
        if m[key] is not None:
            unsupported.append(f"model.{key}")
    if m["embed_norm"] != "none":
        unsupported.append(f"model.embed_norm={m['embed_norm']}")
    if m["norm_unit_offset"]:
        unsupported.append("model.norm_unit_offset")
    if not m["rope"]:
        unsupported.append("model.rope=false")
    if unsupported:
        raise NotImplementedError("reference model does not implement: " + ", ".join(unsupported))


# --------------------------------------------------------------------------
# Model


class Norm(nn.Module):
    """src/model/norm.cpp: rms / layernorm / l2 over the last `dim` elements;
    the gain has `shape` ([dim], or [heads, dim] for a per-head QK gain)."""

    def __init__(self, kind: str, dim: int, gain: bool, bias: bool, eps: float, shape=None):
        super().__init__()
        self.kind, self.dim, self.eps = kind, dim, eps
        shape = tuple(shape or (dim,))
        self.weight = nn.Parameter(torch.ones(shape)) if gain else None
        self.bias = nn.Parameter(torch.zeros(shape)) if bias and kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        fused_w = w is not None and w.dim() == 1
        if self.kind == "rms":
            y = F.rms_norm(x, (self.dim,), w if fused_w else None, self.eps)
        elif self.kind == "layernorm":
            fused_b = b is not None and b.dim() == 1
            y = F.layer_norm(x, (self.dim,), w if fused_w else None, b if fused_b else None, self.eps)
            if b is not None and not fused_b:
                return y * w + b if w is not None and not fused_w else y + b
        elif self.kind == "l2":
            y = x / x.norm(2, -1, keepdim=True).clamp_min(self.eps)
            if fused_w:
                y = y * w
        else:
            return x
        if w is not None and not fused_w:
            y = y * w
        return y


def rope_tables(T: int, head_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """src/model/rope.cpp, operation for operation (fp32)."""
    inv_freq = 1.0 / torch.pow(theta, torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim)
    pos = torch.arange(T, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(device), emb.sin().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, T, heads, D], rotate-half."""
    T, half = x.size(1), x.size(-1) // 2
    cos = cos[:T].view(1, T, 1, -1).to(x.dtype)
    sin = sin[:T].view(1, T, 1, -1).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, m: dict):
        super().__init__()
        C, H, K = m["d_model"], m["n_heads"], m["n_kv_heads"]
        D = C // H
        self.H, self.K, self.D = H, K, D
        self.wq = nn.Parameter(torch.empty(H * D, C))
        self.wk = nn.Parameter(torch.empty(K * D, C))
        self.wv = nn.Parameter(torch.empty(K * D, C))
        self.wo = nn.Parameter(torch.empty(C, H * D))
        if m["bias"]:
            self.wq_bias = nn.Parameter(torch.zeros(H * D))
            self.wk_bias = nn.Parameter(torch.zeros(K * D))
            self.wv_bias = nn.Parameter(torch.zeros(K * D))
            self.wo_bias = nn.Parameter(torch.zeros(C))
        else:
            self.wq_bias = self.wk_bias = self.wv_bias = self.wo_bias = None
        qk = m["qk_norm"]
        self.qk_type, self.qk_scope, self.norm_first = qk["type"], qk["scope"], qk["position"] == "before_rope"
        self.q_norm = self.k_norm = None
        if qk["type"] != "none":
            if qk["scope"] == "projection":
                self.q_norm = Norm(qk["type"], H * D, qk["gain"], qk["bias"], qk["eps"])
                self.k_norm = Norm(qk["type"], K * D, qk["gain"], qk["bias"], qk["eps"])
            else:
                qs, ks = ((H, D), (K, D)) if qk["gain_per_head"] else ((D,), (D,))
                self.q_norm = Norm(qk["type"], D, qk["gain"], qk["bias"], qk["eps"], qs)
                self.k_norm = Norm(qk["type"], D, qk["gain"], qk["bias"], qk["eps"], ks)
        self.temperature = None
        if qk["type"] == "l2":
            L = qk["henry_seq_len"] or m["max_seq_len"]
            init = qk["temperature_init"] or math.log2(L * L - L)
            t = torch.full((H if qk["temperature_per_head"] else 1,), float(init))
            if qk["temperature_learnable"]:
                self.temperature = nn.Parameter(t)
            else:
                self.register_buffer("temperature", t)
            self.scale = 1.0
        else:
            self.scale = 1.0 / math.sqrt(D)

    def _qk_norm(self, t: torch.Tensor, norm) -> torch.Tensor:
        if norm is None:
            return t
        if self.qk_scope == "projection":
            return norm(t.flatten(2)).view(t.shape)
        return norm(t)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = F.linear(x, self.wq, self.wq_bias).view(B, T, self.H, self.D)
        k = F.linear(x, self.wk, self.wk_bias).view(B, T, self.K, self.D)
        v = F.linear(x, self.wv, self.wv_bias).view(B, T, self.K, self.D)
        if self.norm_first:
            q, k = self._qk_norm(q, self.q_norm), self._qk_norm(k, self.k_norm)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if not self.norm_first:
            q, k = self._qk_norm(q, self.q_norm), self._qk_norm(k, self.k_norm)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.temperature is not None:
            q = q * self.temperature.view(1, -1, 1, 1).to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                           enable_gqa=self.K != self.H)
        y = y.transpose(1, 2).reshape(B, T, self.H * self.D)
        return F.linear(y, self.wo, self.wo_bias)


class Mlp(nn.Module):
    def __init__(self, m: dict):
        super().__init__()
        C, Hf = m["d_model"], ffn_dim(m)
        self.kind, self.gated = m["mlp"], m["mlp"] != "gelu"
        if self.gated:
            self.w_gate = nn.Parameter(torch.empty(Hf, C))
        self.w_up = nn.Parameter(torch.empty(Hf, C))
        self.w_down = nn.Parameter(torch.empty(C, Hf))
        self.w_gate_bias = nn.Parameter(torch.zeros(Hf)) if m["bias"] and self.gated else None
        self.w_up_bias = nn.Parameter(torch.zeros(Hf)) if m["bias"] else None
        self.w_down_bias = nn.Parameter(torch.zeros(C)) if m["bias"] else None

    def forward(self, x):
        if not self.gated:
            h = F.gelu(F.linear(x, self.w_up, self.w_up_bias))
        else:
            g = F.linear(x, self.w_gate, self.w_gate_bias)
            g = F.silu(g) if self.kind == "swiglu" else F.gelu(g, approximate="tanh")
            h = g * F.linear(x, self.w_up, self.w_up_bias)
        return F.linear(h, self.w_down, self.w_down_bias)


class Block(nn.Module):
    def __init__(self, m: dict):
        super().__init__()
        self.attn = Attention(m)
        self.mlp = Mlp(m)
        self.attn_norm = Norm(m["norm"], m["d_model"], True, m["bias"], m["norm_eps"])
        self.mlp_norm = Norm(m["norm"], m["d_model"], True, m["bias"], m["norm_eps"])

    def forward(self, x, cos, sin):
        h = x + self.attn(self.attn_norm(x), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class Transformer(nn.Module):
    def __init__(self, m: dict):
        super().__init__()
        check_supported(m)
        self.m = m
        V, C = padded_vocab(m), m["d_model"]
        self.vocab_size = int(m["vocab_size"])
        self.wte = nn.Parameter(torch.empty(V, C))
        self.tied = bool(m["tie_embeddings"])
        if not self.tied:
            self.lm_head = nn.Parameter(torch.empty(V, C))
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["n_layers"]))
        self.final_norm = Norm(m["norm"], C, True, m["bias"], m["norm_eps"])
        cos, sin = rope_tables(m["max_seq_len"], C // m["n_heads"], float(m["rope_theta"]), "cpu")
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_weights(self, seed: int) -> None:
        """Same rules as src/model/init.cpp (not the same random numbers)."""
        g = torch.Generator().manual_seed(seed)
        init = self.m["init"]
        out_std = init["std"] / math.sqrt(2 * self.m["n_layers"]) if init["depth_scaled"] else init["std"]
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                elif name.endswith("temperature") or name.endswith("bias"):
                    continue  # set at construction
                else:
                    std = out_std if name.endswith("wo") or name.endswith("w_down") else init["std"]
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        x = F.embedding(idx, self.wte)
        cos, sin = self.rope_cos, self.rope_sin
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.final_norm(x)
        logits = F.linear(x, self.wte if self.tied else self.lm_head)
        if logits.size(-1) > self.vocab_size:
            logits[..., self.vocab_size:] = float("-inf")  # padded ids are never predicted
        return logits


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Cross entropy in fp32 over the (padded, -inf) vocabulary, plus z-loss."""
    flat = logits.reshape(-1, logits.size(-1)).float()
    loss = F.cross_entropy(flat, targets.reshape(-1))
    if z_loss > 0:
        loss = loss + z_loss * torch.logsumexp(flat, -1).pow(2).mean()
    return loss


def wants_weight_decay(name: str, train: dict) -> bool:
    """src/optim/optimizer.cpp: no decay for norm parameters, biases, the l2
    temperature and (unless train.decay_embeddings) the embedding."""
    leaf = name.rsplit(".", 1)[-1]
    if "norm" in name or leaf.endswith("bias") or leaf == "temperature":
        return False
    if leaf == "wte":
        return bool(train["decay_embeddings"])
    return True


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied head is one parameter
