#!/usr/bin/env python3
"""Unigram entropy (nats/token) of a prepared data directory's validation
split, measured with the training split's unigram distribution (add-one
smoothing): the cross-entropy a model that ignores context would reach.
A trained model's val loss should fall well below it.

    .venv/bin/python scripts/studies/unigram_entropy.py runs/data/default
"""
import json
import sys

import numpy as np


def read_split(data_dir, manifest, split):
    dtype = np.uint16 if manifest["dtype"] == "uint16" else np.uint32
    parts = [np.fromfile(f"{data_dir}/{s['file']}", dtype=dtype, offset=64)
             for s in manifest["shards"] if s["split"] == split]
    return np.concatenate(parts)


def main():
    data_dir = sys.argv[1] if len(sys.argv) > 1 else "runs/data/default"
    manifest = json.load(open(f"{data_dir}/manifest.json"))
    vocab = manifest["tokenizer"]["vocab_size"]
    train, val = read_split(data_dir, manifest, "train"), read_split(data_dir, manifest, "val")
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    cross = -logp[val].mean()
    print(f"train tokens {len(train)}, val tokens {len(val)}, vocab {vocab}")
    print(f"unigram cross-entropy on val: {cross:.4f} nats/token (ppl {np.exp(cross):.1f}); "
          f"uniform: {np.log(vocab):.4f}")


if __name__ == "__main__":
    main()
