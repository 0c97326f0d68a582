#!/usr/bin/env python3
"""The memory table of docs/data-parallel.md, from `keel plan --json`.

For GPT-3's model shapes (Brown et al. 2020, table 2.1) on keel's GPT-2-style
config (bf16 autocast, AdamW, 32k vocabulary, tied head), at T = 1024 and
4096: the largest micro-batch per rank that fits 24, 48 and 80 GiB, replicated
and with ZeRO-1 on 8 ranks, without and with full activation checkpointing.
Run from the repository root after building: python3 scripts/bench/memory_table.py
"""
import json
import subprocess
import sys

SHAPES = [  # name, d_model, n_layers, n_heads
    ("125M", 768, 12, 12),
    ("350M", 1024, 24, 16),
    ("760M", 1536, 24, 16),
    ("1.3B", 2048, 24, 32),
    ("2.7B", 2560, 32, 32),
    ("6.7B", 4096, 32, 32),
]
MEMORY = ["24", "48", "80"]
MODES = [  # column label, extra --set overrides, ranks
    ("replicated", ["dist.zero=0"], 1),
    ("ZeRO-1, 8 ranks", ["dist.zero=1"], 8),
    ("ZeRO-1, 8 ranks, full recompute", ["dist.zero=1", "train.activation_checkpointing=full"], 8),
]


def plan(d, layers, heads, seq, sets, ranks):
    args = ["./build/keel", "plan", "configs/gpt2-124m.yaml", "--json", "--device", "cuda", "--ranks", str(ranks)]
    for m in MEMORY:
        args += ["--memory", m]
    for kv in [f"model.d_model={d}", f"model.n_layers={layers}", f"model.n_heads={heads}",
               f"model.n_kv_heads={heads}", f"model.max_seq_len={seq}", "train.micro_batch_size=0"] + sets:
        args += ["--set", kv]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def main():
    print("| model | params | T | " + " | ".join(f"{label}: {'/'.join(MEMORY)} GiB" for label, _, _ in MODES) + " |")
    print("|---|---|---|" + "---|" * len(MODES))
    for name, d, layers, heads in SHAPES:
        for seq in (1024, 4096):
            cells = []
            params = 0
            for _, sets, ranks in MODES:
                p = plan(d, layers, heads, seq, sets, ranks)
                params = p["params"]
                cells.append(" / ".join(str(p["max_micro_batch"][m]) for m in MEMORY))
            print(f"| {name} | {params / 1e6:.0f}M | {seq} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
