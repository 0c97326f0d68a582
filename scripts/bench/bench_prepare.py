#!/usr/bin/env python3
"""How fast `keel prepare` encodes, against the `tokenizers` package's batch
encoder on the same text, tokenizer and cores (issue 18).

    .venv/bin/python scripts/bench/bench_prepare.py [--repeat 4] [--out DIR]

The text is the embedded corpus repeated --repeat times (4: 16.7 MB, 4,756
documents), written as plain text, JSON Lines and Parquet. Tokenizers: a
SentencePiece BPE model keel trains (8,192 pieces), and two byte-level BPE
tokenizer.json files that `tokenizers` trains (8,192 tokens) with GPT-2's
pipeline and with Llama 3's (regex Split + ByteLevel, ignore_merges).

keel's figure is the whole encode phase of `keel prepare` with the tokenizer
given (data.tokenizer): reading and decoding the file, tokenizing, writing
shards; from the manifest's encode time, at data.threads 1 and 2.
`tokenizers`' figure is Tokenizer.encode_batch on the documents already in
memory (RAYON_NUM_THREADS 1 and 2, in a fresh process each, best of 3):
encoding only, which favours it. `tokenizers` reads no SentencePiece .model,
so the SentencePiece rows have keel's figures only.

Prints a Markdown table and the machine (CPU model, cores, load), and writes
bench_prepare.json to --out.
"""
import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))

ENCODE_CHILD = r"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = json.load(open(sys.argv[2]))
best = None
for _ in range(3):
    t0 = time.perf_counter()
    out = tok.encode_batch(docs, add_special_tokens=False)
    s = time.perf_counter() - t0
    best = s if best is None else min(best, s)
print(json.dumps({"seconds": best, "tokens": sum(len(e.ids) for e in out)}))
"""


def machine(when: str = "now") -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} cores, 1-minute load {os.getloadavg()[0]:.2f} {when}, {platform.platform()}"


def documents() -> list:
    text = gzip.decompress((REPO / "data" / "corpus.txt.gz").read_bytes()).decode("utf-8")
    return [d.strip("\n") for d in text.split("<|endoftext|>\n") if d.strip()]


def write_sources(out: Path, docs: list) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    paths = {"text": out / "corpus.txt", "jsonl": out / "corpus.jsonl", "parquet": out / "corpus.parquet"}
    paths["text"].write_text("".join(d + "\n<|endoftext|>\n" for d in docs))
    paths["jsonl"].write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    pq.write_table(pa.table({"text": docs}), paths["parquet"], row_group_size=1000, compression="zstd")
    return paths


def keel_bin() -> Path:
    return Path(os.environ.get("KEEL_BINARY", REPO / "build" / "keel"))


def config(out: Path, name: str, source: Path, tokenizer: str, vocab: int, threads: int) -> Path:
    path = out / f"{name}.yaml"
    path.write_text(f"""model: {{vocab_size: {vocab}}}
data:
  dir: {out / 'data' / name}
  sources: [{source}]
  tokenizer: "{tokenizer}"
  tokenizer_sample_mb: 4
  val_fraction: 0.05
  threads: {threads}
""")
    return path


def prepare(cfg: Path) -> dict:
    subprocess.run([str(keel_bin()), "prepare", str(cfg), "--force", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    data_dir = [l.split(":", 1)[1].strip() for l in cfg.read_text().splitlines() if l.strip().startswith("dir:")][0]
    return json.loads((Path(data_dir) / "manifest.json").read_text())


def train_bpe(out: Path, docs: list, family: str, vocab: int) -> Path:
    import test_bpe_parity as parity
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, Regex
    tok = Tokenizer(models.BPE())
    if family == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(parity.LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=vocab - 1, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])
    spec = json.loads(tok.to_str())
    if family == "llama3":
        spec["model"]["ignore_merges"] = True
    path = out / f"{family}.tokenizer.json"
    path.write_text(json.dumps(spec))
    return path


def tokenizers_speed(tokenizer: Path, docs_json: Path, threads: int) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    r = subprocess.run([sys.executable, "-c", ENCODE_CHILD, str(tokenizer), str(docs_json)], env=env, check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=4, help="copies of the embedded corpus (4: 16.7 MB)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/keel-bench-prepare"))
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    start = machine("at the start")
    print(f"machine: {start}", flush=True)
    docs = documents() * args.repeat
    text_mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"text: {len(docs)} documents, {text_mb:.1f} MB (the embedded corpus x{args.repeat})", flush=True)
    sources = write_sources(out, docs)
    docs_json = out / "docs.json"
    docs_json.write_text(json.dumps(docs))

    vocab = 8192
    # SentencePiece: trained once by keel, then reused, so the timed runs encode only.
    prepare(config(out, "spm-train", sources["text"], "", vocab, max(threads)))
    spm = out / "data" / "spm-train" / "tokenizer.model"
    tokenizers_ = {"sentencepiece": ("spm", spm, None)}
    for family in ("gpt2", "llama3"):
        path = train_bpe(out, docs[: len(docs) // args.repeat], family, vocab)
        tokenizers_[f"byte-level BPE ({family})"] = (family, path, path)

    rows, records = [], []
    for tname, (key, tpath, tjson) in tokenizers_.items():
        theirs = {n: tokenizers_speed(tjson, docs_json, n) for n in threads} if tjson else {}
        for fmt, src in sources.items():
            ours = {}
            for n in threads:
                man = prepare(config(out, f"{key}-{fmt}-{n}", src, str(tpath), vocab, n))
                s = man["seconds"]["encode"]
                mb = man["text_bytes"] / 1e6
                ours[n] = {"seconds": s, "mb_s": mb / s, "tokens_s": man["tokens"] / s}
                records.append({"tool": "keel prepare", "tokenizer": tname, "format": fmt, "threads": n,
                                "seconds": s, "text_mb": mb, "tokens": man["tokens"]})
            for n, r in theirs.items():
                records.append({"tool": "tokenizers encode_batch", "tokenizer": tname, "format": "in memory",
                                "threads": n, "seconds": r["seconds"], "text_mb": text_mb, "tokens": r["tokens"]})
            cells = [f"{ours[n]['mb_s']:.2f} MB/s, {ours[n]['tokens_s'] / 1e6:.2f}M tok/s" for n in threads]
            cells += [f"{text_mb / theirs[n]['seconds']:.2f} MB/s, {theirs[n]['tokens'] / theirs[n]['seconds'] / 1e6:.2f}M tok/s"
                      if theirs else "-" for n in threads]
            rows.append(f"| {fmt} | {tname} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    head = ("| format | tokenizer | " + " | ".join(f"keel, {n} thread(s)" for n in threads) + " | " +
            " | ".join(f"tokenizers, {n} thread(s)" for n in threads) + " |")
    print("\n" + head + "\n|" + "---|" * (2 + 2 * len(threads)) + "\n" + "\n".join(rows))
    end = machine("at the end")
    print(f"machine: {end}")
    (out / "bench_prepare.json").write_text(json.dumps({"machine": [start, end], "records": records}, indent=1))


if __name__ == "__main__":
    main()
