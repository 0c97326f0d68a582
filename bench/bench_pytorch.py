#!/usr/bin/env python3
"""PyTorch reference for `keel bench`: the same model (bench/reference_model.py,
built from the same keel config file) and the same training step in plain
PyTorch, eager or under torch.compile.

The step is keel's (src/train/trainer.cpp): forward under bf16 autocast on
CUDA (fp32 on CPU), cross entropy in fp32 over the padded vocabulary,
backward over train.micro_batch_size micro-batches, global-norm clipping at
train.grad_clip, AdamW (fused kernel where PyTorch has one for the device,
else foreach) with keel's two parameter groups and betas/eps/weight decay.
Tokens are uniform random (like `keel bench --random-data`); the step is
timed the same way (W warm-up steps, then N steps each ended by a device
sync; median and mean). Threads: train.threads, else all cores, as keel.

    python bench/bench_pytorch.py configs/bench-cpu.yaml --mode eager --steps 10
    python bench/bench_pytorch.py configs/gpt2-124m.yaml --mode compile --set train.batch_size=32

Prints one JSON object on the last line of stdout (and writes it with --json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_model as rm  # noqa: E402


def build(cfg: dict, device: torch.device):
    model = rm.Transformer(cfg["model"])
    model.init_weights(int(cfg["run"]["seed"]))
    model.to(device)
    t = cfg["train"]
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if rm.wants_weight_decay(name, t) else no_decay).append(p)
    wd = t["weight_decay"] / t["lr"] if t["independent_weight_decay"] else t["weight_decay"]
    groups = [g for g in ({"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0})
              if g["params"]]
    kwargs = dict(lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])
    try:
        opt = torch.optim.AdamW(groups, fused=True, **kwargs)
        impl = "fused"
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, foreach=True, **kwargs)
        impl = "foreach"
    return model, opt, impl


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], help="override a key, as keel's --set")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: train.device, auto = cuda if present)")
    ap.add_argument("--json", default=None, help="also write the JSON record here")
    args = ap.parse_args()

    cfg = rm.load_config(args.config, args.set)
    t, m = cfg["train"], cfg["model"]
    dev_name = args.device or t["device"]
    if dev_name == "auto":
        dev_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev_name)
    threads = int(t["threads"]) or (os.cpu_count() or 1)
    torch.set_num_threads(threads)
    bf16 = device.type == "cuda" and t["precision"] != "fp32"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(t["tf32"])
        torch.backends.cudnn.allow_tf32 = bool(t["tf32"])
    torch.manual_seed(int(cfg["run"]["seed"]))

    T = rm.seq_len(cfg)
    B = int(t["batch_tokens"]) // T if t["batch_tokens"] else int(t["batch_size"])
    micro = int(t["micro_batch_size"]) or B
    n_micro = B // micro
    model, opt, opt_impl = build(cfg, device)
    model.train()
    z_loss, clip = float(t["z_loss"]), float(t["grad_clip"])

    def forward_loss(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        return rm.language_model_loss(logits, y, z_loss)

    step_fn = forward_loss
    if args.mode == "compile":
        step_fn = torch.compile(forward_loss)
    params = [p for p in model.parameters()]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def train_step():
        opt.zero_grad(set_to_none=True)
        tokens = torch.randint(0, int(m["vocab_size"]), (B, T + 1), dtype=torch.int64)
        x_all, y_all = tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()
        for i in range(n_micro):
            x = x_all[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            y = y_all[i * micro:(i + 1) * micro].to(device, non_blocking=True)
            loss = step_fn(x, y)
            (loss / n_micro).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        train_step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        s = time.perf_counter()
        train_step()
        sync()
        times.append((time.perf_counter() - s) * 1e3)
    med, mean = statistics.median(times), statistics.fmean(times)
    tokens = B * T
    peak_mem = (torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None)
    rec = {
        "tool": "pytorch", "mode": args.mode, "config": Path(args.config).stem, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({threads} threads)",
        "precision": "bf16 autocast" if bf16 else "fp32", "threads": threads, "torch": torch.__version__,
        "parameters": rm.parameter_count(model), "optimizer": opt_impl,
        "batch": {"sequences": B, "seq_len": T, "micro_batch": micro, "micro_steps": n_micro,
                  "tokens_per_step": tokens},
        "warmup": args.warmup, "warmup_s": warmup_s, "steps": args.steps,
        "step_ms": {"median": med, "mean": mean, "min": min(times), "max": max(times), "all": times},
        "tokens_per_s": tokens / (med / 1e3), "tokens_per_s_mean": tokens / (mean / 1e3),
        "peak_memory_bytes": peak_mem, "load_average": list(os.getloadavg()),
        # What ATen's (and, for compile, inductor's) kernels may use; ATEN_CPU_CAPABILITY lowers it.
        "kernel_isa": {"aten": torch.backends.cpu.get_cpu_capability(),
                       "onednn": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "all"},
    }
    if args.mode == "compile" and device.type == "cpu":
        from torch._inductor.cpu_vec_isa import pick_vec_isa  # the vector ISA inductor generated code for
        rec["kernel_isa"]["inductor"] = str(pick_vec_isa())
    line = json.dumps(rec)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rec, indent=2) + "\n")
    print(f"pytorch {args.mode} {rec['config']}: {rec['device_name']}, {rec['precision']}, "
          f"{rec['parameters']} parameters, batch {B}x{T}: median {med:.2f} ms/step, "
          f"{rec['tokens_per_s']:.0f} tokens/s (warm-up {warmup_s:.1f} s)", file=sys.stderr)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
