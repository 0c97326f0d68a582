"""keel's in-training task scores against lm-evaluation-harness itself
(issue 35): a model trained by keel with eval.tasks scores a HellaSwag-format
file, an ARC-format file (Hugging Face's layout, which lm-eval's arc_easy
config reads) and the builtin task during training; the same checkpoint,
exported with `keel export-hf`, is scored by lm-eval 0.4 through its own
task configs (hellaswag.yaml and arc_easy.yaml, included, with only the
dataset pointed at the local file). Every request's log-likelihood must agree
within 1e-4 and acc / acc_norm exactly.

The windows are short (model.max_seq_len 48), so some contexts are cut:
the truncation rule is compared too."""
import gzip
import json
import os
import random
from pathlib import Path

import pytest

import keel_testlib as lib

lm_eval = pytest.importorskip("lm_eval")

MAX_LEN = 48


def corpus_lines(n: int, seed: int) -> list:
    text = gzip.open(lib.REPO / "data" / "corpus.txt.gz", "rt", encoding="utf-8").read()
    lines = [l for l in text.split("\n") if len(l.split()) >= 12 and l != "<|endoftext|>"]
    return random.Random(seed).sample(lines, n)


def write_hellaswag(path: Path, n: int = 24) -> None:
    """HellaSwag's fields, with its artifacts: [title] and [step] markers, a
    lower-case ctx_b that process_docs capitalizes, a trailing space."""
    rng = random.Random(1)
    lines = corpus_lines(n * 5, 2)
    with path.open("w") as f:
        for i in range(n):
            words = lines[5 * i].split()
            cut = len(words) // 2
            ending = lambda l: " ".join(l.split()[:rng.randint(3, 9)])
            endings = [" ".join(words[cut:cut + 8])] + [ending(lines[5 * i + k]) for k in range(1, 4)]
            if i % 3 == 0:
                endings[1] = endings[1] + " [title] " + " ".join(endings[2].split()[:3])
            label = rng.randrange(4)
            endings[0], endings[label] = endings[label], endings[0]
            doc = {"ind": i, "activity_label": "Reading" if i % 2 else "Scripture [step] study",
                   "ctx_a": " ".join(words[:cut // 2]), "ctx_b": " ".join(words[cut // 2:cut]).lower() + " ",
                   "ctx": "", "endings": endings, "label": str(label), "split": "val", "split_type": "indomain",
                   "source_id": f"x{i}"}
            f.write(json.dumps(doc) + "\n")


def write_arc(path: Path, n: int = 20) -> None:
    rng = random.Random(3)
    lines = corpus_lines(n * 4, 4)
    with path.open("w") as f:
        for i in range(n):
            words = lines[4 * i].split()
            k = 3 + (i % 2)
            texts = [" ".join(words[-4:])] + [" ".join(l.split()[-4:]) for l in lines[4 * i + 1:4 * i + k]]
            rng.shuffle(texts)
            labels = ["A", "B", "C", "D"][:k] if i % 3 else ["1", "2", "3", "4"][:k]
            answer = labels[texts.index(" ".join(words[-4:]))]
            f.write(json.dumps({"id": f"q{i}", "question": " ".join(words[:-4]) + "?",
                                "choices": {"text": texts, "label": labels}, "answerKey": answer}) + "\n")


def short_lines(n: int, seed: int) -> list:
    text = gzip.open(lib.REPO / "data" / "corpus.txt.gz", "rt", encoding="utf-8").read()
    lines = [l for l in text.split("\n") if 12 <= len(l.split()) <= 22 and l != "<|endoftext|>"]
    return random.Random(seed).sample(lines, n)


def write_piqa(path: Path, n: int = 20) -> None:
    """PIQA's fields with the label inline, as the Hugging Face export that lm-eval's piqa.yaml reads."""
    lines = short_lines(2 * n, 5)
    with path.open("w") as f:
        for i in range(n):
            words, other = lines[2 * i].split(), lines[2 * i + 1].split()
            half = len(words) // 2
            sols = [" ".join(words[half:]), " ".join(other[half:])]
            label = i % 2
            if label:
                sols.reverse()
            f.write(json.dumps({"goal": " ".join(words[:half]), "sol1": sols[0], "sol2": sols[1],
                                "label": label}) + "\n")


def write_winogrande(path: Path, n: int = 20) -> None:
    """One word of a verse blanked out; the options are it and a word of another verse."""
    lines = short_lines(2 * n, 6)
    with path.open("w") as f:
        for i in range(n):
            words, other = lines[2 * i].split(), lines[2 * i + 1].split()
            k = len(words) // 2 + 1
            options = [words[k], other[len(other) // 2]]
            answer = "1"
            if i % 2:
                options.reverse()
                answer = "2"
            sentence = " ".join(words[:k] + ["_"] + words[k + 1:])
            f.write(json.dumps({"qID": f"w{i}", "sentence": sentence, "option1": options[0],
                                "option2": options[1], "answer": answer}) + "\n")


def write_lambada(path: Path, n: int = 24) -> None:
    """Whole verses, and verses cut after "of the", whose last word even a
    40-step model can get by greedy decoding (so both values of the flag occur)."""
    lines = corpus_lines(n, 7)
    cut = [l[:l.index(" of the ") + len(" of the")] for l in corpus_lines(400, 8) if " of the " in l][:8]
    with path.open("w") as f:
        for line in lines + cut:
            f.write(json.dumps({"text": line}) + "\n")


LM_EVAL_TASKS = Path(lm_eval.__file__).parent / "tasks"


def task_yaml(name: str, include: Path, data_file: Path) -> str:
    """lm-eval's own config for the task, reading a local JSON Lines file."""
    return (f"include: {include}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
            f"dataset_kwargs:\n  data_files:\n    validation: {data_file}\n"
            "training_split: null\nvalidation_split: validation\ntest_split: null\n")


BUILTIN_YAML = """task: keel_builtin
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    validation: {data}
validation_split: validation
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    work = tmp_path_factory.mktemp("lm_eval")
    write_hellaswag(work / "hellaswag.jsonl")
    write_arc(work / "arc.jsonl")
    write_piqa(work / "piqa.jsonl")
    write_winogrande(work / "winogrande.jsonl")
    write_lambada(work / "lambada.jsonl")
    config = work / "config.yaml"
    config.write_text(f"""
model: {{vocab_size: 512, max_seq_len: {MAX_LEN}, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2}}
data: {{dir: {work / 'data'}, sources: [{lib.REPO / 'data' / 'corpus.txt.gz'}], tokenizer_sample_mb: 1}}
train: {{device: cpu, threads: 1, max_steps: 40, batch_size: 8, lr: 3.0e-3, warmup_steps: 5, eval_every: 0,
         eval_batches: 1}}
monitor: {{every: 0}}
checkpoint: {{every: 0}}
eval:
  tasks: [builtin, 'hellaswag:{work / "hellaswag.jsonl"}', 'arc:{work / "arc.jsonl"}', 'piqa:{work / "piqa.jsonl"}',
          'winogrande:{work / "winogrande.jsonl"}', 'lambada:{work / "lambada.jsonl"}']
  builtin_examples: 24
run: {{name: run, out_dir: {work / 'runs'}}}
""")
    lib.keel("train", config)
    run = work / "runs" / "run"
    hf = work / "hf"
    lib.keel("export-hf", run, hf)
    tasks = work / "tasks"
    tasks.mkdir()
    (tasks / "keel_hellaswag.yaml").write_text(
        task_yaml("keel_hellaswag", LM_EVAL_TASKS / "hellaswag" / "hellaswag.yaml", work / "hellaswag.jsonl"))
    (tasks / "keel_arc.yaml").write_text(
        task_yaml("keel_arc", LM_EVAL_TASKS / "arc" / "arc_easy.yaml", work / "arc.jsonl"))
    for name, include in [("piqa", "piqa/piqa.yaml"), ("winogrande", "winogrande/default.yaml"),
                          ("lambada", "lambada/lambada_openai.yaml")]:
        (tasks / f"keel_{name}.yaml").write_text(task_yaml(f"keel_{name}", LM_EVAL_TASKS / include,
                                                            work / f"{name}.jsonl"))
    (tasks / "keel_builtin.yaml").write_text(BUILTIN_YAML.format(data=run / "tasks" / "builtin.jsonl"))

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    out = simple_evaluate(model="hf", model_args=f"pretrained={hf},dtype=float32", device="cpu", batch_size=4,
                          tasks=["keel_hellaswag", "keel_arc", "keel_builtin", "keel_piqa", "keel_winogrande",
                                 "keel_lambada"],
                          task_manager=TaskManager(include_path=str(tasks)), log_samples=True)
    summary = json.loads((run / "summary.json").read_text())
    return run, out, summary


@pytest.mark.parametrize("keel_name,lm_name", [("hellaswag", "keel_hellaswag"), ("arc", "keel_arc"),
                                               ("builtin", "keel_builtin"), ("piqa", "keel_piqa"),
                                               ("winogrande", "keel_winogrande"), ("lambada", "keel_lambada")])
def test_log_likelihoods_and_accuracies_match_lm_eval(scored, keel_name, lm_name):
    run, out, summary = scored
    ours = [json.loads(l) for l in (run / "tasks" / f"{keel_name}.scores.jsonl").read_text().splitlines()]
    theirs = sorted(out["samples"][lm_name], key=lambda s: s["doc_id"])
    assert len(ours) == len(theirs) > 15
    worst = 0.0
    for mine, ref in zip(ours, theirs):
        lls = [r[0][0] if isinstance(r[0], (list, tuple)) else r[0] for r in ref["resps"]]
        assert len(lls) == len(mine["ll"])
        worst = max(worst, max(abs(a - float(b)) for a, b in zip(mine["ll"], lls)))
        if keel_name == "winogrande":  # its target is the shared continuation; the answer picks the context
            assert mine["gold"] == int(ref["doc"]["answer"]) - 1
        elif keel_name != "lambada":
            assert mine["gold"] == ref["target"]
        if keel_name == "lambada":  # one request: the greedy flag is lm-eval's acc
            assert mine["greedy"][0] == bool(ref["resps"][0][0][1])
    assert worst < 1e-4, f"{keel_name}: largest log-likelihood difference {worst}"
    res = out["results"][lm_name]
    ours = summary["tasks"][keel_name]
    assert ours["acc"] == res["acc,none"]
    assert ours["acc_stderr"] == pytest.approx(res["acc_stderr,none"], rel=1e-9)
    if "acc_norm,none" in res:
        assert ours["acc_norm"] == res["acc_norm,none"]
    if keel_name == "lambada":
        assert ours["perplexity"] == pytest.approx(res["perplexity,none"], rel=1e-4)
        assert 0 < ours["acc"] < 1, "both values of the greedy flag should occur"


def test_some_contexts_were_cut_to_the_window(scored):
    """The truncation rule was exercised: some HellaSwag request is longer than the window."""
    run, out, _ = scored
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(run.parent.parent / "hf"))
    def args(sample):  # [[context, continuation], ...] or {"gen_args_0": {"arg_0": ..., "arg_1": ...}, ...}
        a = sample["arguments"]
        return [tuple(x) for x in a] if isinstance(a, list) else [(v["arg_0"], v["arg_1"]) for v in a.values()]
    longest = max(len(tok(c + x)["input_ids"]) for s in out["samples"]["keel_hellaswag"] for c, x in args(s))
    assert longest > MAX_LEN
