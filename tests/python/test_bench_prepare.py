"""scripts/bench/bench_prepare.py, the prepare-throughput benchmark behind the
README's table (issue 18), on one copy of the corpus and one thread: it runs,
covers every format and tokenizer, and its counts agree with each other: the
three formats give keel the same tokens, and for each byte-level BPE
tokenizer keel's tokens are `tokenizers`' plus one EOS per document."""
import json
import subprocess
import sys

from keel_testlib import REPO, keel_binary


def test_bench_prepare_runs_and_its_counts_agree(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "bench" / "bench_prepare.py"), "--repeat", "1",
                             "--threads", "1", "--out", str(tmp_path)], capture_output=True, text=True,
                            timeout=900, env={"KEEL_BINARY": str(keel_binary()), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| format | tokenizer |" in result.stdout
    data = json.loads((tmp_path / "bench_prepare.json").read_text())
    records = data["records"]
    keel = [r for r in records if r["tool"] == "keel prepare"]
    assert {(r["tokenizer"], r["format"]) for r in keel} == {
        (t, f) for t in ("sentencepiece", "byte-level BPE (gpt2)", "byte-level BPE (llama3)")
        for f in ("text", "jsonl", "parquet")}
    assert all(r["seconds"] > 0 and r["tokens"] > 0 for r in records)
    documents = 1189  # the embedded corpus's chapters
    for tokenizer in {r["tokenizer"] for r in keel}:
        counts = {r["tokens"] for r in keel if r["tokenizer"] == tokenizer}
        assert len(counts) == 1, (tokenizer, counts)  # text, JSON Lines and Parquet: the same documents
        theirs = [r for r in records if r["tool"] != "keel prepare" and r["tokenizer"] == tokenizer]
        if theirs:
            assert counts.pop() == theirs[0]["tokens"] + documents, tokenizer
