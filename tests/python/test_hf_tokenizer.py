"""The tokenizer written by `keel export-hf` against keel's own (issue 10).

keel's ids come from its C++ Tokenizer (SentencePiece) through the helper
program tests/test_hf_interop; transformers' from AutoTokenizer on the
exported directory (tokenizer.json + tokenizer_config.json, no custom code).
They must be equal on a sample of the embedded corpus (single lines and
whole multi-line documents) and on awkward strings, for a BPE and a unigram
tokenizer; decoding must give the text back.
"""
import json

import pytest

import hf_testlib as lib

EDGE_CASES = [
    "", " ", "  two leading spaces", "trailing space ", "a  b   c", "tab\tand\nnewline\r\n",
    "digits 0123456789 and 3.14159", "Ünïcödé, ελληνικά, 中文, emoji 😀👍🏽", "literal \u2581 block",
    "AND THE LORD SAID", "end of text <|endoftext|> marker", "x" * 300,
]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_tok_" + request.param)
    config = lib.prepare_data(root, request.param)
    run = lib.train(config, "tok", [])
    out = root / "hf"
    lib.keel("export-hf", run, out)
    return {"type": request.param, "root": root, "run": run, "hf": out,
            "tokenizer": root / f"data-{request.param}" / "tokenizer.model"}


def keel_ids(exported, texts):
    work = exported["root"] / "encode"
    work.mkdir(exist_ok=True)
    (work / "texts.json").write_text(json.dumps(texts))
    lib.run_interop("KeelEncode", work, [{"tokenizer": str(exported["tokenizer"]), "texts": str(work / "texts.json"),
                                          "out": str(work / "ids.json")}])
    return json.loads((work / "ids.json").read_text())


def hf_tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path))


def test_ids_equal_on_corpus_sample(exported):
    texts = lib.corpus_sample() + EDGE_CASES
    want = keel_ids(exported, texts)
    tok = hf_tokenizer(exported["hf"])
    got = [tok(t)["input_ids"] for t in texts]  # default call: adds no BOS/EOS, as keel
    mismatched = [(t[:60], w[:12], g[:12]) for t, w, g in zip(texts, want, got) if w != g]
    n_tokens = sum(len(w) for w in want)
    print(f"{exported['type']}: {len(texts)} texts, {n_tokens} tokens, {len(mismatched)} mismatched")
    assert n_tokens > 50_000  # a real sample
    assert not mismatched, mismatched[:5]


def test_decode_and_special_tokens(exported):
    tok = hf_tokenizer(exported["hf"])
    texts = lib.corpus_sample(lines=200, documents=5) + EDGE_CASES
    for text in texts:
        # SentencePiece (keel's decode too) writes its space symbol U+2581 back as a space.
        assert tok.decode(tok(text)["input_ids"]) == text.replace("\u2581", " ")
    # keel's layout (src/data/tokenizer.h): pad 0, bos 1, eos 2, unk 3.
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert len(tok) == lib.VOCAB
    config = json.loads((exported["hf"] / "config.json").read_text())
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (0, 1, 2)


def test_a_wrong_merge_order_is_caught(exported, tmp_path):
    """Teeth: the same vocabulary with the BPE merges ranked by the left piece
    instead of the merged piece gives other ids on the same sample."""
    if exported["type"] != "bpe":
        pytest.skip("merges exist for BPE only")
    for f in exported["hf"].iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tj = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tj["model"]["merges"].sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
    (tmp_path / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    texts = lib.corpus_sample(lines=300, documents=0)
    want = keel_ids(exported, texts)
    tok = hf_tokenizer(tmp_path)
    mismatched = sum(w != tok(t)["input_ids"] for t, w in zip(texts, want))
    assert mismatched > len(texts) // 10
