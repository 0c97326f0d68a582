#!/usr/bin/env python3
"""Which GEMM library is faster for each of a linear layer's three matmuls,
at the shapes of a keel config's blocks, on this CPU.

keel's CPU linear layers (src/model/fused_ops.h) run either on ATen (MKL)
or on oneDNN (`mkldnn::_linear_pointwise`, the operator keel calls). This
times the forward y = x Wᵀ, the input gradient dx = dy W and the weight
gradient dW = dyᵀ x of every block linear (fused QKV, attention output,
MLP up / gate / down) both ways, the two libraries alternating round by
round in one process so that a busy machine slows both alike, and prints
the median ms per step (all layers) for each matmul and library.
oneDNN takes only row-major `a bᵀ`, so its dx and dW are given transposed
views, which it copies, as keel's backward does.

    .venv/bin/python scripts/bench/bench_linear.py configs/bench-cpu-gpt.yaml --rounds 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import reference_model as rm  # noqa: E402

KINDS = ("forward", "dx", "dW")
LIBS = ("aten", "onednn")


def block_shapes(cfg: dict) -> list[tuple[str, int, int]]:
    """(name, in, out) of one block's linear layers, as keel builds them."""
    m = cfg["model"]
    d = int(m["d_model"])
    head_dim = int(m.get("head_dim") or 0) or d // int(m["n_heads"])
    q_dim = int(m["n_heads"]) * head_dim
    kv_dim = int(m["n_kv_heads"] or m["n_heads"]) * head_dim
    f = rm.ffn_dim(m)
    shapes = [("qkv", d, q_dim + 2 * kv_dim), ("out", q_dim, d), ("up", d, f), ("down", f, d)]
    if m["mlp"] != "gelu":
        shapes.insert(3, ("gate", d, f))
    return shapes


def onednn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a bᵀ through the operator keel's OneDnnLinearFn calls."""
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


def gemm(lib: str, kind: str, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    if lib == "aten":
        if kind == "forward":
            return torch.nn.functional.linear(x, w)
        return dy.mm(w) if kind == "dx" else dy.t().mm(x)
    if kind == "forward":
        return onednn(x, w)
    return onednn(dy, w.t()) if kind == "dx" else onednn(dy.t(), x.t())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds; medians over them (default 7)")
    ap.add_argument("--reps", type=int, default=3, help="passes over all layers per round (default 3)")
    ap.add_argument("--threads", type=int, default=0, help="threads (default: the config's train.threads, else 2)")
    ap.add_argument("--set", action="append", default=[], help="override a key, as keel's --set")
    args = ap.parse_args()
    if args.rounds < 1 or args.reps < 1:
        print("bench_linear: --rounds and --reps must be at least 1", file=sys.stderr)
        return 2
    try:
        cfg = rm.load_config(args.config, args.set)
    except OSError as e:
        print(f"bench_linear: {args.config}: {e.strerror}", file=sys.stderr)
        return 2
    if not torch.backends.mkldnn.is_available():
        print("bench_linear: this PyTorch has no oneDNN", file=sys.stderr)
        return 2
    threads = args.threads or int(cfg["train"].get("threads") or 0) or 2
    torch.set_num_threads(threads)
    tokens = int(cfg["train"]["batch_size"]) * rm.seq_len(cfg)
    layers = int(cfg["model"]["n_layers"])
    g = torch.Generator().manual_seed(0)
    operands = [(torch.randn(tokens, i, generator=g), torch.randn(o, i, generator=g) * i**-0.5,
                 torch.randn(tokens, o, generator=g)) for _, i, o in block_shapes(cfg)]

    def timed(lib: str, kind: str) -> float:
        t0 = time.perf_counter()
        for _ in range(args.reps):
            for x, w, dy in operands:
                gemm(lib, kind, x, w, dy)
        return (time.perf_counter() - t0) * 1e3 / args.reps * layers  # ms per step, all layers

    # The two libraries agree (a wrong transpose here would time the wrong GEMM).
    for kind in KINDS:
        x, w, dy = operands[0]
        a, b = gemm("aten", kind, x, w, dy), gemm("onednn", kind, x, w, dy)
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-3):
            print(f"bench_linear: aten and onednn disagree on {kind}", file=sys.stderr)
            return 1
    for lib in LIBS:  # warm-up: oneDNN builds its primitives on first use
        for kind in KINDS:
            timed(lib, kind)
    times = {(lib, kind): [] for lib in LIBS for kind in KINDS}
    for r in range(args.rounds):
        for lib in (LIBS if r % 2 == 0 else LIBS[::-1]):
            for kind in KINDS:
                times[(lib, kind)].append(timed(lib, kind))

    shapes = ", ".join(f"{n} {i}->{o}" for n, i, o in block_shapes(cfg))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"config   {args.config}: {layers} layers of [{shapes}], {tokens} tokens a step, fp32, "
          f"{threads} threads, torch {torch.__version__}, 1-min load {load:.2f}")
    print(f"{'matmul':<8} {'aten ms':>9} {'onednn ms':>10} {'faster':>7}   (median of {args.rounds} rounds; all layers, one step)")
    best_total = 0.0
    for kind in KINDS:
        a = statistics.median(times[("aten", kind)])
        o = statistics.median(times[("onednn", kind)])
        best_total += min(a, o)
        print(f"{kind:<8} {a:9.1f} {o:10.1f} {('aten' if a < o else 'onednn'):>7}")
    totals = {lib: sum(statistics.median(times[(lib, k)]) for k in KINDS) for lib in LIBS}
    print(f"{'total':<8} {totals['aten']:9.1f} {totals['onednn']:10.1f}   best per matmul {best_total:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
