"""keel's byte-level BPE encoder (src/data/bpe_tokenizer.cpp) against the
`tokenizers` package (issue 18).

No tokenizer is downloaded: the tests build one per family with `tokenizers`
itself, trained on the embedded corpus, with each family's published
pipeline (from their tokenizer.json files):

  gpt2         ByteLevel pre-tokenizer with GPT-2's regex, no normalizer;
               <|endoftext|> last
  gpt2-prefix  the same with add_prefix_space (RoBERTa-style)
  llama3       Split(Llama 3 / cl100k regex, Isolated) + ByteLevel without
               regex, model.ignore_merges; <|begin_of_text|>,
               <|end_of_text|> and reserved specials after the vocabulary
  qwen2        NFC normalizer, Split(Qwen 2's regex: single digits) +
               ByteLevel; <|endoftext|>, <|im_start|>, <|im_end|>
  olmo2        the Llama 3 pattern without ignore_merges, merges in the
               old "left right" string form; <|endoftext|>, <|pad|>

keel's ids (`keel tokenize`) must equal `Tokenizer.encode(text,
add_special_tokens=False).ids` on the whole embedded corpus and on strings
chosen to break things (Unicode, emoji, whitespace runs, numbers, code,
contractions, added tokens inside text), and decode must give the text back.
"""
import collections
import gzip
import json
import re

import pytest

from keel_testlib import REPO, keel

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

FAMILIES = ["gpt2", "gpt2-prefix", "llama3", "qwen2", "olmo2"]

HARD_STRINGS = [
    "", " ", "a", "\n", "  ", "Hello world", " Hello  world ", "hello\n\nworld\n\n\n", "\r\n\r\n", "\t\t x",
    "tabs\tand\vvertical\fform feed", "trailing spaces   ", "   leading spaces", " " * 1000, "\n" * 300,
    "a" * 5000, "ab" * 2000, "x " * 500,
    # numbers: runs, decimals, other scripts' digits, fractions and superscripts
    "1", "12", "123", "1234", "1234567890", "3.14159265", "1,000,000", "v2.0.1-rc3", "0x1F600", "١٢٣٤٥", "٣.١٤",
    "½ ¼ ² ³ Ⅻ", "१२३ ๑๒๓", "12abc34", "a1b2c3",
    # contractions, case, and letters that case-fold onto ASCII (ſ, K-sign)
    "don't DON'T Don'T it's IT'S we've we'VE I'm they'll she'd", "'s 't 're 've 'm 'll 'd", "''s '''", "'ſ 'K",
    "rock 'n' roll", "O'Neill's", "l'état c'est",
    # Unicode letters, marks and composition (NFC matters for qwen2)
    "Ünïcödé", "e\u0301 a\u0308 n\u0303", "\u1100\u1161\u11a8", "ﬁ ﬂ ﬅ", "Straße STRASSE", "ǅ ǈ ǋ",
    "ελληνικά Ελλάδα", "русский текст", "中文文本测试", "日本語のテキスト", "한국어 텍스트", "ภาษาไทย",
    "हिन्दी पाठ", "العربية نص", "עברית", "Ꭰꭰ",
    # emoji: modifiers, ZWJ sequences, flags, keycaps
    "emoji 😀👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "1️⃣ #️⃣", "❤️‍🔥", "😀" * 50,
    # whitespace that is not ASCII: NBSP, ideographic, NEL, line/paragraph separators, zero width
    "a\u00a0b", "a\u3000b", "a\u0085b", "a\u2028b\u2029c", "a\u200bb", "\u0085\u0085 x", "x \u00a0 y", "\ufeffBOM",
    # control characters and odd bytes of valid UTF-8
    "\x00\x01\x1b[0m", "\x7f", "\U0010ffff", "\ue000 private",
    # code
    "def f(x):\n    return x**2  # square\n", "int main() { return 0; }\n", "if (a && b || !c) { x += 1; }",
    "<html><body class=\"x\">Hi</body></html>", "SELECT * FROM t WHERE id=1;", "    \n    \n\tindent",
    "```python\nprint('hi')\n```", "https://example.com/a?b=c&d=e#f", "user@example.com", "$HOME/.bashrc",
    # added tokens inside text, whole, broken and back to back
    "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "text <|endoftext|> more", "<|endoftext",
    "<|begin_of_text|>Hello<|end_of_text|>", "<|im_start|>user\nhi<|im_end|>", "<|pad|>", "<|reserved_special_token_3|>",
    "<|<|endoftext|>|>", "< |endoftext| >",
]

SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "gpt2-prefix": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(8)],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "olmo2": ["<|endoftext|>", "<|pad|>"],
}


def corpus_text() -> str:
    return gzip.decompress((REPO / "data" / "corpus.txt.gz").read_bytes()).decode("utf-8")


def byte_level(text: str) -> str:
    """GPT-2's bytes_to_unicode mapping applied to the UTF-8 of `text`."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    table = dict(zip(bs, map(chr, cs)))
    return "".join(table[b] for b in text.encode("utf-8"))


def build_tokenizer(family: str, text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if family.startswith("gpt2"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=family == "gpt2-prefix", use_regex=True)
    else:
        pattern = QWEN2_PATTERN if family == "qwen2" else LLAMA3_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if family == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.split("\n\n"), trainer)
    tok.add_special_tokens(SPECIALS[family])  # after the vocabulary, as in the released files
    spec = json.loads(tok.to_str())
    if family == "llama3":
        # Released vocabularies hold words that the merges do not rebuild;
        # ignore_merges takes those whole. A trained one has none, so add
        # some: frequent long words, with the specials moved after them.
        spec["model"]["ignore_merges"] = True
        vocab = spec["model"]["vocab"]
        next_id = max(vocab.values()) + 1
        words = collections.Counter(re.findall(r" [a-z]{7,}", text)).most_common(400)
        for word, _ in words:
            if byte_level(word) not in vocab:
                vocab[byte_level(word)] = next_id
                next_id += 1
        for t in spec["added_tokens"]:
            t["id"] = next_id
            next_id += 1
    if family == "olmo2":  # the form tokenizers wrote before 0.20 (and many released files still have)
        spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(spec))


@pytest.fixture(scope="module")
def corpus():
    return corpus_text()


@pytest.fixture(scope="module", params=FAMILIES)
def built(request, corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_" + request.param)
    tok = build_tokenizer(request.param, corpus)
    path = root / "tokenizer.json"
    path.write_text(tok.to_str())
    return {"family": request.param, "tok": tok, "path": path, "root": root}


def keel_encode(built, texts):
    inp = built["root"] / "texts.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = keel("tokenize", built["path"], inp, "--jsonl").stdout.split("\n")
    return [[int(x) for x in line.split()] for line in out[:len(texts)]]


def test_corpus_ids_equal_tokenizers(built, corpus):
    path = built["root"] / "corpus.txt"
    path.write_text(corpus)
    result = keel("tokenize", built["path"], path)
    got = [int(x) for x in result.stdout.split()]
    want = built["tok"].encode(corpus, add_special_tokens=False).ids
    print(built["family"], result.stderr.strip())
    assert len(want) > 500_000  # the whole corpus, not a sample
    if got != want:
        k = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b) if len(got) == len(want) else \
            next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"{built['family']}: first difference at token {k}: keel {got[k:k + 8]} tokenizers "
                    f"{want[k:k + 8]} ({len(got)} vs {len(want)} tokens)")


def test_hard_strings_ids_equal_tokenizers(built):
    got = keel_encode(built, HARD_STRINGS)
    tok = built["tok"]
    bad = []
    for text, ids in zip(HARD_STRINGS, got):
        want = tok.encode(text, add_special_tokens=False).ids
        if ids != want:
            bad.append((text[:40], ids[:10], want[:10]))
    assert not bad, f"{built['family']}: {len(bad)} of {len(HARD_STRINGS)} differ, e.g. {bad[:4]}"


def test_decode_gives_the_text_back(built):
    texts = [t for t in HARD_STRINGS if "<|" not in t]  # added tokens are special: they decode to nothing
    inp = built["root"] / "roundtrip.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = keel("tokenize", built["path"], inp, "--jsonl", "--decode").stdout.split("\n")[:-1]  # not splitlines: U+2028
    got = [json.loads(line)["text"] for line in out]
    tok = built["tok"]
    assert got == [tok.decode(tok.encode(t, add_special_tokens=False).ids) for t in texts]
    if built["family"] != "gpt2-prefix":  # which decodes with its added space
        norm = tok.normalizer
        assert got == [norm.normalize_str(t) if norm else t for t in texts]


def test_ignore_merges_is_exercised(corpus):
    # llama3's ignore_merges must change some words' ids, or the test above
    # would not notice keel ignoring it.
    with_flag = build_tokenizer("llama3", corpus)
    spec = json.loads(with_flag.to_str())
    spec["model"]["ignore_merges"] = False
    without = Tokenizer.from_str(json.dumps(spec))
    text = corpus[:400_000]
    assert with_flag.encode(text).ids != without.encode(text).ids


def test_prepare_train_export_keep_the_tokenizer(tmp_path, corpus):
    """data.tokenizer: tokenizer.json end to end. The shards hold the ids
    `tokenizers` gives each document plus EOS, the checkpoint carries the file,
    and export-hf writes it back byte for byte, so AutoTokenizer on the
    exported model gives the original tokenizer's ids."""
    import hf_testlib as lib
    import numpy as np
    tok = build_tokenizer("llama3", corpus)
    original = tmp_path / "tokenizer.json"
    original.write_text(tok.to_str())
    docs = [d for d in corpus.split("\n\n")[:200] if d.strip()]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    config = tmp_path / "c.yaml"
    text = lib.base_config(tmp_path / "data", tmp_path / "runs").replace(
        f"vocab_size: {lib.VOCAB}", f"vocab_size: {tok.get_vocab_size()}")
    text = text.replace(f"sources: [{REPO / 'data' / 'corpus.txt.gz'}]",
                        f"sources: [{src}]\n  tokenizer: {original}\n  val_fraction: 0")
    config.write_text(text)
    keel("prepare", config, "--quiet")
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"]["file"] == "tokenizer.json"
    assert (tmp_path / "data" / "tokenizer.json").read_bytes() == original.read_bytes()
    eos = tok.token_to_id("<|end_of_text|>")
    assert manifest["tokenizer"]["special_ids"]["eos"] == eos
    assert manifest["tokenizer"]["special_ids"]["bos"] == tok.token_to_id("<|begin_of_text|>")
    shards = sorted((tmp_path / "data").glob("train_*.bin"))
    dtype = np.uint16 if manifest["dtype"] == "uint16" else np.uint32
    ids = []
    for shard in shards:  # src/data/shard.h: a 64-byte header ("KEELTOK\0", ...), then the ids
        raw = shard.read_bytes()
        assert raw[:8] == b"KEELTOK\0"
        ids.extend(np.frombuffer(raw[64:], dtype=dtype).tolist())
    want = []
    for d in docs:
        want.extend(tok.encode(d, add_special_tokens=False).ids + [eos])
    assert ids == want

    keel("train", config, "--set", "run.name=bpe")
    export = tmp_path / "hf"
    keel("export-hf", tmp_path / "runs" / "bpe", export)
    assert (export / "tokenizer.json").read_bytes() == original.read_bytes()
    assert not (export / "tokenizer.model").exists()
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(export))
    assert hf.eos_token == "<|end_of_text|>"
    for d in docs[:20] + HARD_STRINGS:
        assert hf(d, add_special_tokens=False)["input_ids"] == tok.encode(d, add_special_tokens=False).ids
    config_json = json.loads((export / "config.json").read_text())
    assert config_json["eos_token_id"] == eos

    # And back: import-hf takes the tokenizer.json as the run's tokenizer.
    result = keel("import-hf", export, tmp_path / "imported")
    assert "no tokenizer" not in result.stdout, result.stdout
    step0 = tmp_path / "imported" / "checkpoints" / "step_00000000"
    assert (step0 / "tokenizer.json").read_bytes() == original.read_bytes()
    assert f"tokenizer: {step0 / 'tokenizer.json'}" in (tmp_path / "imported" / "config.yaml").read_text()
