"""keel export-hf / import-hf against Hugging Face transformers (issue 10).

For each mapped layout a tiny keel model is trained for 3 steps (so norm
gains and every weight are away from their init), exported with
`keel export-hf`, loaded with transformers.AutoModelForCausalLM (no custom
code), and its logits on the same tokens compared with keel's own forward
(max |diff| <= 1e-4 in fp32). Variants cover GQA/MQA/MHA, tied and untied
heads, non-default RoPE theta, biases, both MLP activations and both gain
forms. Round trip: import-hf of the export gives keel's weights and logits
back exactly, and exporting the import reproduces the Hugging Face files bit
for bit. Mismatch tests show the comparison catches a swapped order (QK-Norm
after RoPE) or a wrong gain form. Refusals exit 2 naming the keys.
"""
import json
import time

import pytest
import torch
from safetensors.torch import load_file

import hf_testlib as lib

GEMMA = ["model.norm_placement=sandwich", "model.mlp=geglu_tanh", "model.norm_unit_offset=true",
         "model.embed_norm=scale_sqrt_d"]

# name -> (expected transformers class, keel overrides)
CASES = {
    "llama_gqa_untied": ("LlamaForCausalLM", []),
    "llama_mha_tied_theta": ("LlamaForCausalLM", ["model.n_kv_heads=4", "model.tie_embeddings=true",
                                                  "model.rope_theta=500000"]),
    "llama_bias_geglu_offset": ("LlamaForCausalLM", ["model.bias=true", "model.mlp=geglu_tanh",
                                                     "model.norm_unit_offset=true"]),
    "qwen3_gqa_tied_theta": ("Qwen3ForCausalLM", ["model.qk_norm.type=rms", "model.tie_embeddings=true",
                                                  "model.rope_theta=1000000"]),
    "qwen3_mqa_untied_nogain": ("Qwen3ForCausalLM", ["model.qk_norm.type=rms", "model.n_kv_heads=1",
                                                     "model.qk_norm.gain=false"]),
    "olmo2_mha_untied_theta": ("Olmo2ForCausalLM", ["model.norm_placement=reordered", "model.qk_norm.type=rms",
                                                    "model.qk_norm.scope=projection", "model.n_kv_heads=4",
                                                    "model.rope_theta=500000"]),
    "olmo2_gqa_tied": ("Olmo2ForCausalLM", ["model.norm_placement=reordered", "model.qk_norm.type=rms",
                                            "model.qk_norm.scope=projection", "model.tie_embeddings=true"]),
    "gemma2_gqa_tied_softcaps": ("Gemma2ForCausalLM", GEMMA + ["model.tie_embeddings=true",
                                                               "model.attn_softcap=50", "model.final_softcap=30",
                                                               "model.query_pre_attn_scalar=24"]),
    "gemma2_untied_plain_gains_swiglu": ("Gemma2ForCausalLM", GEMMA + ["model.norm_unit_offset=false",
                                                                       "model.mlp=swiglu",
                                                                       "model.rope_theta=20000"]),
    "gemma3_gqa_tied_theta": ("Gemma3ForCausalLM", GEMMA + ["model.qk_norm.type=rms", "model.tie_embeddings=true",
                                                            "model.rope_theta=1000000"]),
    "gemma3_mha_untied_softcap": ("Gemma3ForCausalLM", GEMMA + ["model.qk_norm.type=rms", "model.n_kv_heads=4",
                                                                "model.final_softcap=30",
                                                                "model.query_pre_attn_scalar=32"]),
    # µP / CompleteP (issue 33): readout, attention-scale and branch multipliers folded into the tensors.
    "llama_completep_bias_untied": ("LlamaForCausalLM", ["model.parametrization=completep", "model.bias=true",
                                                         "model.mup.base_width=32", "model.mup.base_depth=1"]),
    "olmo2_completep_untied": ("Olmo2ForCausalLM", ["model.norm_placement=reordered", "model.qk_norm.type=rms",
                                                    "model.qk_norm.scope=projection",
                                                    "model.parametrization=completep", "model.mup.base_width=32",
                                                    "model.mup.base_depth=1"]),
    "qwen3_mup_untied": ("Qwen3ForCausalLM", ["model.qk_norm.type=rms", "model.parametrization=mup",
                                              "model.mup.base_width=32"]),
}
# µP/CompleteP exports fold the multipliers into the weights: the import is a
# standard model with other weights and the same logits (within rounding).
FOLDED = {"llama_completep_bias_untied", "olmo2_completep_untied", "qwen3_mup_untied"}
# Where keel's gain form equals the class's, keel -> HF -> keel is bit-exact;
# elsewhere the gains pass through w +- 1 (same function, rounding differs).
# name -> imported gain minus original gain (the import takes the class's own form).
FORM_CONVERTED = {"llama_bias_geglu_offset": 1.0, "gemma2_untied_plain_gains_swiglu": -1.0}
NO_QK_GAIN = {"qwen3_mqa_untied_nogain"}  # model.qk_norm.gain: false


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Trains, exports and imports every case once; keel's logits in one helper call."""
    root = tmp_path_factory.mktemp("hf_models")
    config = lib.prepare_data(root)
    ids = lib.random_ids()
    out = {}
    for name, (_, overrides) in CASES.items():
        run = lib.train(config, name, overrides)
        hf = root / "hf" / name
        lib.keel("export-hf", run, hf)
        imported = root / "imported" / name
        lib.keel("import-hf", hf, imported)
        again = root / "hf_again" / name
        lib.keel("export-hf", imported, again)
        out[name] = {"run": run, "hf": hf, "imported": imported, "again": again}
    jobs = [(out[n]["run"], ids, []) for n in CASES] + [(out[n]["imported"], ids, []) for n in CASES]
    logits = lib.keel_logits(root / "io", jobs)
    for i, name in enumerate(CASES):
        out[name]["keel_logits"] = logits[i]
        out[name]["imported_logits"] = logits[len(CASES) + i]
    return {"root": root, "config": config, "ids": ids, "cases": out}


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_transformers(built, name):
    case = built["cases"][name]
    config = json.loads((case["hf"] / "config.json").read_text())
    assert config["architectures"] == [CASES[name][0]]
    t0 = time.time()
    hf = lib.hf_logits(case["hf"], built["ids"])
    keel_logits = case["keel_logits"]
    diff = lib.max_abs_diff(hf, keel_logits)
    print(f"{name}: {CASES[name][0]} max|diff| = {diff:.3g} (logit scale {keel_logits.abs().max():.3g}, "
          f"HF forward {time.time() - t0:.2f} s)")
    assert keel_logits.std() > 0.1  # not vacuous: the logits vary
    assert diff <= lib.TOLERANCE


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip(built, name):
    case = built["cases"][name]
    # HF -> keel -> HF: the same tensors, bit for bit, and the same config.
    first, second = load_file(str(case["hf"] / "model.safetensors")), load_file(str(case["again"] / "model.safetensors"))
    assert sorted(first) == sorted(second)
    for key in first:
        assert torch.equal(first[key], second[key]), key
    assert json.loads((case["hf"] / "config.json").read_text()) == \
        json.loads((case["again"] / "config.json").read_text())

    if name in FOLDED:
        imported_config = (case["imported"] / "config.yaml").read_text()
        assert "parametrization: standard" in imported_config
        assert lib.max_abs_diff(case["imported_logits"], case["keel_logits"]) <= lib.TOLERANCE
        return
    # keel -> HF -> keel: the same weights (real vocabulary rows; padded rows are
    # zero after import) and the same logits.
    original = load_file(str(sorted((case["run"] / "checkpoints").iterdir())[-1] / "model.safetensors"))
    imported = load_file(str(next((case["imported"] / "checkpoints").iterdir()) / "model.safetensors"))
    if name in NO_QK_GAIN:  # transformers' QK-Norms always have a gain: imported as exactly 1
        extra = set(imported) - set(original)
        assert extra and all(k.endswith(("q_norm.weight", "k_norm.weight")) for k in extra), extra
        for k in extra:
            gain = imported.pop(k)
            assert torch.equal(gain, torch.ones_like(gain)), k
    assert sorted(original) == sorted(imported)
    vocab = lib.VOCAB
    for key, want in original.items():
        got = imported[key]
        assert got.shape == want.shape, key
        if key in ("wte", "lm_head"):
            assert torch.count_nonzero(got[vocab:]) == 0, key
            got, want = got[:vocab], want[:vocab]
        if name in FORM_CONVERTED and "norm" in key:
            assert lib.max_abs_diff(got - FORM_CONVERTED[name], want) <= 1e-6, key
        else:
            assert torch.equal(got, want), key
    if name in FORM_CONVERTED:
        assert lib.max_abs_diff(case["imported_logits"], case["keel_logits"]) <= 1e-5
    else:
        assert torch.equal(case["imported_logits"], case["keel_logits"])


def test_imported_checkpoint_trains_with_init_from(built):
    """keel train <imported>/config.yaml starts from the imported weights
    (train.init_from) and tokenizes the corpus with the imported tokenizer
    (data.tokenizer): at a learning rate of 1e-9 the weights it saves are the
    imported ones, to within the updates' size."""
    case = built["cases"]["qwen3_gqa_tied_theta"]
    config = case["imported"] / "config.yaml"
    assert "init_from: " + str(case["imported"]) in config.read_text()
    runs = built["root"] / "continued"
    common = ["--set", f"data.dir={runs / 'data'}", "--set", f"data.sources=[{lib.REPO / 'data' / 'corpus.txt.gz'}]",
              "--set", f"run.out_dir={runs}", "--set", "train.device=cpu", "--set", "train.threads=1",
              "--set", "train.warmup_steps=0", "--set", "train.batch_size=2", "--set", "train.eval_every=0",
              "--set", "train.eval_batches=1", "--set", "monitor.every=0", "--set", "checkpoint.every=0"]
    lib.keel("train", config, *common, "--set", "train.max_steps=2", "--set", "train.lr=1e-9",
             "--set", "train.min_lr=0")
    run = runs / "qwen3_gqa_tied_theta-continued"
    assert "initial weights from" in (run / "train.log").read_text()
    trained = load_file(str(sorted((run / "checkpoints").iterdir())[-1] / "model.safetensors"))
    imported = load_file(str(next((case["imported"] / "checkpoints").iterdir()) / "model.safetensors"))
    assert sorted(trained) == sorted(imported)
    for key in imported:
        assert lib.max_abs_diff(trained[key], imported[key]) <= 1e-6, key

    # A model.* key that changes the computation is refused, naming it.
    bad = lib.keel("train", config, *common, "--set", "run.name=bad", "--set", "model.rope_theta=1234",
                   "--set", "train.max_steps=1", expect_rc=2)
    assert "model.rope_theta" in bad.stderr + bad.stdout


# --- teeth -----------------------------------------------------------------

@pytest.mark.parametrize("name,overrides", [
    ("qwen3_gqa_tied_theta", ["model.qk_norm.position=after_rope"]),
    ("gemma3_gqa_tied_theta", ["model.qk_norm.position=after_rope"]),
    ("gemma2_gqa_tied_softcaps", ["model.norm_unit_offset=false"]),
    ("llama_gqa_untied", ["model.rope_theta=10500"]),
    # Without the branch and readout multipliers the folded export no longer matches.
    ("llama_completep_bias_untied", ["model.parametrization=standard", "model.mup.base_width=0",
                                     "model.mup.base_depth=0"]),
])
def test_parity_check_catches_a_mismatch(built, name, overrides):
    """keel's forward with one key changed (QK-Norm after RoPE instead of
    before, Gemma's 1+w gains read as w, a slightly different RoPE base) is
    far outside the tolerance of the same comparison."""
    case = built["cases"][name]
    (wrong,) = lib.keel_logits(built["root"] / "io_mismatch" / name, [(case["run"], built["ids"], overrides)])
    diff = lib.max_abs_diff(lib.hf_logits(case["hf"], built["ids"]), wrong)
    print(f"{name} with {overrides}: max|diff| = {diff:.3g}")
    assert diff > 100 * lib.TOLERANCE


# --- refusals --------------------------------------------------------------

REFUSED = {  # each run carries several reasons; all must be named
    "post_ln_l2_gelu": (["model.norm_placement=post", "model.qk_norm.type=l2", "model.mlp=gelu"],
                        ["model.norm_placement", "model.qk_norm.type", "model.mlp"]),
    "layernorm_qk_norm": (["model.qk_norm.type=layernorm"], ["model.qk_norm.type"]),
    "sandwich_qk_after_rope": (["model.norm_placement=sandwich", "model.qk_norm.type=rms",
                                "model.qk_norm.position=after_rope", "model.qk_norm.eps=1e-5"],
                               ["model.embed_norm", "model.qk_norm.position", "model.qk_norm.eps"]),
    "mup_tied_head": (["model.parametrization=mup", "model.mup.base_width=32", "model.tie_embeddings=true"],
                      ["model.tie_embeddings", "readout multiplier"]),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unmappable_configs_are_refused(built, name, tmp_path):
    overrides, keys = REFUSED[name]
    run = lib.train(built["config"], "refused_" + name, overrides)
    result = lib.keel("export-hf", run, tmp_path / "out", expect_rc=2)
    for key in keys:
        assert key in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()  # nothing written


def test_occupied_output_directory_needs_force(built, tmp_path):
    run = built["cases"]["llama_gqa_untied"]["run"]
    (tmp_path / "keep.txt").write_text("x")
    result = lib.keel("export-hf", run, tmp_path, expect_rc=2)
    assert "--force" in result.stderr
    lib.keel("export-hf", run, tmp_path, "--force")
    assert (tmp_path / "keep.txt").read_text() == "x"
    assert (tmp_path / "config.json").exists()


def test_bfloat16_export_loads(built, tmp_path):
    run = built["cases"]["gemma3_gqa_tied_theta"]["run"]
    lib.keel("export-hf", run, tmp_path, "--dtype", "bfloat16")
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert model.dtype == torch.bfloat16


# --- import of models written by transformers itself ------------------------

def transformers_model(kind: str, tmp_path, shard: bool, tokenizer=None):
    """A random tiny model of each mapped class, saved by save_pretrained,
    with every norm gain moved off its init."""
    import transformers as tf
    common = dict(vocab_size=lib.VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-6,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "llama":
        config = tf.LlamaConfig(**common, rope_theta=20000.0)
    elif kind == "qwen3":
        config = tf.Qwen3Config(**common, head_dim=16, tie_word_embeddings=True)
    elif kind == "olmo2":
        config = tf.Olmo2Config(**common)
    elif kind == "gemma2":  # the class defaults: alternating sliding layers, softcaps 50 / 30
        config = tf.Gemma2Config(**common, head_dim=16, query_pre_attn_scalar=16)
    else:  # gemma3 with every layer global (keel has one RoPE base)
        config = tf.Gemma3TextConfig(**common, head_dim=16, query_pre_attn_scalar=16,
                                     layer_types=["full_attention"] * 2)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(str(tmp_path / "hf"), max_shard_size="200KB" if shard else "5GB")
    if tokenizer:  # keel's SentencePiece model, VOCAB pieces as the model
        (tmp_path / "hf" / "tokenizer.model").write_bytes(tokenizer.read_bytes())
    return model


@pytest.mark.parametrize("kind", ["llama", "qwen3", "olmo2", "gemma2", "gemma3"])
def test_import_of_transformers_written_model(built, kind, tmp_path):
    # OLMo 2 without a tokenizer.model: imported and exported all the same, model only.
    tokenizer = None if kind == "olmo2" else built["root"] / "data-bpe" / "tokenizer.model"
    model = transformers_model(kind, tmp_path, shard=kind == "llama", tokenizer=tokenizer)
    if kind == "llama":
        assert (tmp_path / "hf" / "model.safetensors.index.json").exists()  # sharded
    result = lib.keel("import-hf", tmp_path / "hf", tmp_path / "keel")
    assert ("no tokenizer.model" in result.stdout) == (tokenizer is None), result.stdout
    ids = lib.random_ids(seed=1)
    (keel_logits,) = lib.keel_logits(tmp_path / "io", [(tmp_path / "keel", ids, [])])
    with torch.no_grad():
        want = model.eval()(ids).logits.float()
    diff = lib.max_abs_diff(keel_logits, want)
    print(f"import {kind}: max|diff| = {diff:.3g}")
    assert diff <= lib.TOLERANCE
    # And back: the export equals what transformers saved, tensor for tensor.
    exported = lib.keel("export-hf", tmp_path / "keel", tmp_path / "again")
    assert (tmp_path / "again" / "tokenizer.json").exists() == (tokenizer is not None), exported.stderr
    saved = {}
    for f in (tmp_path / "hf").glob("*.safetensors"):
        saved.update(load_file(str(f)))
    again = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert sorted(saved) == sorted(again)
    for key in saved:
        assert torch.equal(saved[key], again[key]), key


def test_import_refuses_gemma3_with_local_rope_base(tmp_path):
    import transformers as tf
    config = tf.Gemma3TextConfig(vocab_size=lib.VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                 max_position_embeddings=32)  # default: sliding layers with RoPE base 1e4 vs 1e6
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(str(tmp_path / "hf"))
    result = lib.keel("import-hf", tmp_path / "hf", tmp_path / "keel", expect_rc=2)
    assert "rope_parameters.sliding_attention.rope_theta" in result.stderr
    assert not (tmp_path / "keel").exists()


def test_document_masked_model_exports_single_document_logits(built):
    """data.document_mask (issue 36): Hugging Face models do not mask
    documents, so an export means the model's function on one document.
    That function is keel's exactly: a document alone (opened by its EOS,
    positions from 0) gives transformers' logits, and inside a packed window
    keel gives the second document the same logits it gets alone. On the
    packed window itself transformers lets the second document see the
    first, and differs."""
    config = built["config"]
    run = lib.train(config, "document_mask", ["data.document_mask=true"])
    hf = built["root"] / "hf" / "document_mask"
    lib.keel("export-hf", run, hf)
    manifest = json.loads((config.parent / "data-bpe" / "manifest.json").read_text())
    eos = manifest["tokenizer"]["special_ids"]["eos"]
    g = torch.Generator().manual_seed(5)
    first = torch.randint(4, lib.VOCAB, (12,), generator=g)
    second = torch.cat([torch.tensor([eos]), torch.randint(4, lib.VOCAB, (19,), generator=g)])
    window = torch.cat([first, second]).unsqueeze(0)  # 32 tokens: two documents
    alone, packed = lib.keel_logits(built["root"] / "io-mask", [(run, second.unsqueeze(0), []), (run, window, [])],
                                    eos=eos)
    hf_alone = lib.hf_logits(hf, second.unsqueeze(0))
    assert alone.std() > 0.1
    assert lib.max_abs_diff(hf_alone, alone) <= lib.TOLERANCE
    assert lib.max_abs_diff(packed[:, len(first):], alone) <= lib.TOLERANCE
    assert lib.max_abs_diff(lib.hf_logits(hf, window)[:, len(first):], alone) > 1e-2
