"""keel's GPU check, the parts bash does badly (scripts/gpu/gpu_check.sh runs
each as `python gpu_check_tool.py COMMAND ARGS...`): the box's torch facts,
loss-curve comparisons, finite final losses, every step logged once, a free
port, and the summary (summary.md, results.json) written after each section."""
import glob, json, math, os, platform, socket, sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def curve(run):
    """step -> training loss from a run's metrics.jsonl (the last record of a step wins)."""
    losses = {}
    try:
        lines = open(os.path.join(run, "metrics.jsonl")).read().splitlines()
    except OSError:
        return losses
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec.get("loss"), (int, float)) and "step" in rec:
            losses[int(rec["step"])] = float(rec["loss"])
    return losses


def losses(out, tol, a, b):
    """Both runs logged the same steps, and their losses differ by at most tol at each."""
    tol = float(tol)
    ca, cb = curve(a), curve(b)
    steps = sorted(set(ca) & set(cb))
    diffs = [abs(ca[s] - cb[s]) for s in steps]
    worst = max(diffs) if diffs else None
    ok = bool(steps) and set(ca) == set(cb) and len(steps) >= 3 and all(math.isfinite(d) and d <= tol for d in diffs)
    rec = {"a": os.path.basename(a), "b": os.path.basename(b), "tolerance_abs": tol, "steps": steps,
           "loss_a": [ca[s] for s in steps], "loss_b": [cb[s] for s in steps], "max_abs_diff": worst,
           "only_in_a": sorted(set(ca) - set(cb)), "only_in_b": sorted(set(cb) - set(ca)), "passed": ok}
    json.dump(rec, open(out, "w"), indent=1)
    print(f"{rec['a']} vs {rec['b']}: {len(steps)} logged steps, max |loss difference| {worst} "
          f"(tolerance {tol}): {'passed' if ok else 'FAILED'}")
    if not ok and (rec["only_in_a"] or rec["only_in_b"]):
        print(f"  steps in one run only: {rec['only_in_a']} / {rec['only_in_b']}")
    return 0 if ok else 1


def finite(out, *runs):
    """Each run finished (summary.json) with a finite final loss."""
    rec, bad = {}, 0
    for run in runs:
        s = load(os.path.join(run, "summary.json")) or {}
        loss = s.get("final_loss")
        ok = isinstance(loss, (int, float)) and math.isfinite(loss)
        rec[os.path.basename(run)] = {"final_loss": loss, "steps": s.get("steps"), "stopped_by": s.get("stopped_by"),
                                      "finite": ok}
        print(f"{os.path.basename(run)}: final loss {loss}, {s.get('steps')} steps: {'ok' if ok else 'NOT FINITE/MISSING'}")
        bad |= not ok
    json.dump(rec, open(out, "w"), indent=1)
    return 1 if bad else 0


def steps(run, n):
    """The run's summary says it trained all n steps, and every step is logged once in metrics.jsonl."""
    s = load(os.path.join(run, "summary.json")) or {}
    logged = curve(run)
    ok = s.get("steps") == int(n) and sorted(logged) == list(range(1, int(n) + 1))
    print(f"{os.path.basename(run)}: summary steps {s.get('steps')}, logged steps {len(logged)} of {n}: "
          f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    return 0


def tsv(path):
    d = {}
    for line in open(path).read().splitlines():
        k, _, v = line.partition("\t")
        d[k] = v
    return d


def num(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def summarize(scratch, out, part, dry, elapsed, budget, status, only, stage="final"):
    dry = dry != "0"
    part = int(part)
    rows = [line.split("\t") for line in open(f"{scratch}/results.tsv").read().splitlines()]
    sections = [{"name": r[0], "status": r[1], "seconds": int(r[2]), "estimate_s": int(r[3]) if r[3] else None,
                 "note": r[4] if len(r) > 4 else ""} for r in rows]
    facts = tsv(f"{scratch}/facts.tsv")
    records = {}
    for path in sorted(glob.glob(f"{scratch}/bench/**/*.json", recursive=True)):
        rec = load(path)
        if rec is not None:
            records[os.path.relpath(path, f"{scratch}/bench")] = rec
    runs = {}
    for path in sorted(glob.glob(f"{scratch}/runs/*/summary.json")):
        runs[os.path.basename(os.path.dirname(path))] = load(path)
    figures = {}
    for path in sorted(glob.glob(f"{scratch}/figures/*")):
        name, ext = os.path.splitext(os.path.basename(path))
        figures[name] = tsv(path) if ext == ".tsv" else load(path)
    gtest = figures.get("gpu-tests")
    if isinstance(gtest, dict):  # GoogleTest's JSON: keep the counts and the names that did not pass
        cases = [t for s in gtest.get("testsuites", []) for t in s.get("testsuite", [])]
        figures["gpu-tests"] = {
            "tests": len(cases),
            "passed": sum(1 for t in cases if t.get("result") == "COMPLETED" and not t.get("failures")),
            "skipped": [f"{t.get('classname')}.{t.get('name')}" for t in cases if t.get("result") == "SKIPPED"],
            "failed": [f"{t.get('classname')}.{t.get('name')}" for t in cases if t.get("failures")]}

    def rec(name):
        r = records.get(name)
        return r if isinstance(r, dict) and isinstance(r.get("step_ms"), dict) else None

    def ratio(label, a, b, what):  # a / b of ms/step
        if b == "compare/keel-1.json" and not rec(b):
            b = "gpt2.json"  # part 3 has no compare record: its own plain gpt2 bench
        ra, rb = rec(a), rec(b)
        if ra and rb and rb["step_ms"].get("median"):
            derived[label] = {"ratio": ra["step_ms"]["median"] / rb["step_ms"]["median"], "what": what,
                              "records": [a, b]}

    derived = {}
    keel_gpt2 = rec("compare/keel-1.json") or rec("gpt2.json")
    if keel_gpt2:
        derived["gpt2 keel"] = {"tokens_per_s": keel_gpt2.get("tokens_per_s"), "mfu": keel_gpt2.get("mfu"),
                                "attention": (keel_gpt2.get("attention") or {}).get("kernel"),
                                "kernels_per_step": (keel_gpt2.get("ops_per_step") or {}).get("kernels")}
    cmp = records.get("compare/summary.json")
    if isinstance(cmp, dict):
        derived["keel vs PyTorch"] = cmp.get("ratios")
    ratio("flash / auto (cuDNN on Hopper)", "gpt2-flash.json", "compare/keel-1.json", "ms/step")
    fa = derived.get("flash / auto (cuDNN on Hopper)")
    if fa:  # a ratio of one kernel against itself says nothing about flash vs cuDNN
        kernels = [(rec(n).get("attention") or {}).get("kernel") for n in fa["records"]]
        fa["what"] += f"; kernels {kernels[0]} vs {kernels[1]}" + (" (THE SAME KERNEL RAN)" if kernels[0] == kernels[1] else "")
    ratio("fused CUDA kernels / composite", "gpt2-fused.json", "compare/keel-1.json", "ms/step")
    fc = derived.get("fused CUDA kernels / composite")
    if fc and not (rec("gpt2-fused.json").get("fused_kernels") or {}).get("cuda"):
        fc["what"] += " (THE FUSED KERNELS DID NOT RUN)"
    ratio("softcap 50 / none, T = 1024", "gpt2-softcap.json", "compare/keel-1.json", "ms/step")
    ratio("muon / adamw", "gpt2-muon.json", "compare/keel-1.json", "ms/step")
    ratio("graph / eager, default config", "default-graph.json", "default-eager.json", "ms/step")
    ratio("whole logits / chunked", "gpt2-whole-logits.json", "gpt2.json", "ms/step")
    ratio("full recompute / none", "gpt2-ckpt-full.json", "compare/keel-1.json", "ms/step")
    # keel plan's prediction against the measured peak (CUDA: the allocator's peak allocated, like for like).
    memory = {}
    for name in ("compare/keel-1.json", "gpt2.json", "gpt2-ckpt-full.json", "gpt2-whole-logits.json"):
        r = rec(name)
        if r and r.get("planned_peak_memory_bytes") and r.get("peak_memory_bytes"):
            memory[name] = {"measured_mib": r["peak_memory_bytes"] / 2**20,
                            "planned_mib": r["planned_peak_memory_bytes"] / 2**20,
                            "planned / measured": r["planned_peak_memory_bytes"] / r["peak_memory_bytes"],
                            "source": r.get("peak_memory_source")}
    if memory:
        derived["keel plan / measured peak"] = memory
    qk = records.get("qknorm/summary.json")
    if isinstance(qk, dict):
        derived["QK-Norm overhead % (vs none)"] = qk.get("overhead_percent")
        derived["monitoring % of the step"] = qk.get("monitor_percent")

    results = {"part": part, "dry_run": dry, "stage": stage, "exit_status": int(status), "elapsed_s": int(elapsed),
               "budget_s": int(budget), "only": only.split(",") if only else None, "host": platform.node(),
               "cores": os.cpu_count(), "preflight": facts, "sections": sections, "derived": derived,
               "figures": figures, "runs": runs, "bench": records,
               # what a Python sub-step of this script saw: LD_LIBRARY_PATH must not leak into Python
               "python_env": {"LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH")}}
    with open(f"{out}/.results.json.tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(f"{out}/.results.json.tmp", f"{out}/results.json")

    title = {1: "correctness", 2: "speed", 3: "more speed"}[part]
    md = [f"# keel GPU check, part {part} ({title})" + (" (DRY RUN on the CPU: no GPU figure here)" if dry else ""), "",
          *([f"**INTERIM**: written after the last section listed below; the part was still running "
             f"(a call cut at its time limit leaves this one)", ""] if stage != "final" else []),
          f"Host {platform.node()}, {os.cpu_count()} cores; {elapsed} s of a {budget} s budget; exit status {status}; "
          f"command: `GPU_CHECK_PART={part}" + (" GPU_CHECK_DRY=1" if dry else "") +
          (f" GPU_CHECK_ONLY={only}" if only else "") + " bash scripts/gpu/gpu_check.sh`", "",
          "Binaries: " + facts.get("binaries", "-"), "",
          "| preflight | |", "|---|---|"]
    for key in ("gpu", "driver", "nvcc", "torch", "cuda", "cudnn", "nccl_h", "glibc", "python", "keel", "carry_manifest"):
        if facts.get(key):
            md.append(f"| {key} | {facts[key]} |")
    md += ["", "| check | result | seconds | estimate | note |", "|---|---|---|---|---|"]
    md += [f"| {s['name']} | {s['status']} | {s['seconds']} | {s['estimate_s'] if s['estimate_s'] is not None else '-'} "
           f"| {s['note']} |" for s in sections]
    g = figures.get("gpu-tests")
    if g:
        md += ["", f"GPU tests: {g['passed']} passed of {g['tests']}, {len(g['skipped'])} skipped, "
                   f"failed: {', '.join(g['failed']) or 'none'}"]
    lc = figures.get("train-cuda-vs-cpu")
    if lc:
        md += ["", f"CUDA vs CPU loss curves (default config, fp32, no TF32, {len(lc['steps'])} logged steps): "
                   f"max |difference| {num(lc['max_abs_diff'], '.5f')}, tolerance {lc['tolerance_abs']}: "
                   f"{'passed' if lc['passed'] else 'FAILED'}"]
    nc = figures.get("nccl")
    if nc:
        md += ["", "| NCCL / data parallel | finding |", "|---|---|"]
        md += [f"| {k} | {v} |" for k, v in nc.items()]
    bv = figures.get("bf16-variants")
    if bv:
        md += ["", "| bf16 variant | final loss | steps |", "|---|---|---|"]
        md += [f"| {k} | {num(v['final_loss'], '.4f')} | {v['steps']} |" for k, v in bv.items()]
    if derived:
        md += ["", "| figure | value |", "|---|---|"]
        for k, v in derived.items():
            if isinstance(v, dict) and "ratio" in v:
                v = f"{v['ratio']:.3f} ({v['what']})"
            elif isinstance(v, dict):
                v = ", ".join(f"{a} {num(b, '.3f') if isinstance(b, float) else b}" for a, b in v.items())
            elif isinstance(v, float):
                v = f"{v:.3f}"
            md.append(f"| {k} | {v} |")
    md += ["", "## Training runs", "", "| run | steps | final loss | final val loss | tokens/s | stopped because |",
           "|---|---|---|---|---|---|"]
    for name, s in runs.items():
        s = s or {}
        md.append(f"| {name} | {s.get('steps', s.get('step', '-'))} | {num(s.get('final_loss'), '.4f')} | "
                  f"{num(s.get('final_val_loss'), '.4f')} | {num(s.get('tokens_per_s'), ',.0f')} | "
                  f"{s.get('stopped_by', '-')} |")
    md += ["", "## Benchmarks (keel bench and bench/bench_pytorch.py records)", "",
           "| record | tool | device | precision | graph | attention | kernels/step | tokens/step | ms/step (median) | "
           "tokens/s | MFU | peak memory (GiB) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in records:
        r = rec(name)
        if not r or not isinstance(r.get("tokens_per_s"), (int, float)):
            continue  # a summary of several records: in the figures above
        batch = r.get("batch") or {}
        mem = r.get("peak_memory_bytes")
        tool = r.get("tool", "-") + (" " + r["mode"] if r.get("mode") else "")
        md.append(f"| {name} | {tool} | {r.get('device_name', r.get('device', '-'))} | {r.get('precision', '-')} | "
                  f"{r.get('cuda_graph', '-')} | {(r.get('attention') or {}).get('kernel', '-')} | "
                  f"{(r.get('ops_per_step') or {}).get('kernels', '-')} | {batch.get('tokens_per_step', '-')} | "
                  f"{num(r['step_ms'].get('median'), '.2f')} | {num(r.get('tokens_per_s'), ',.0f')} | "
                  f"{num(r.get('mfu'), '.1%')} | {num(mem / 2**30 if isinstance(mem, (int, float)) else None, '.2f')} |")
    with open(f"{out}/.summary.md.tmp", "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(f"{out}/.summary.md.tmp", f"{out}/summary.md")
    print("\n".join(md))
    return 0



def torch_facts(require_cuda):
    """The box's torch: version, CUDA, cuDNN, the library folders keel's wrapper
    needs, nccl.h, and the LD_LIBRARY_PATH Python sees (tab-separated lines)."""
    import torch
    site = os.path.dirname(os.path.dirname(torch.__file__))
    libs = [os.path.join(os.path.dirname(torch.__file__), "lib")] + sorted(
        d for d in glob.glob(os.path.join(site, "nvidia", "*", "lib")) + glob.glob(os.path.join(site, "nvidia", "*", "*", "lib"))
        if os.path.isdir(d))
    nccl_h = sorted(glob.glob(os.path.join(site, "nvidia", "**", "include", "nccl.h"), recursive=True))
    print(f"python\t{sys.version.split()[0]} ({sys.executable})")
    print(f"torch\t{torch.__version__}")
    print(f"cuda\t{torch.version.cuda}, available: {torch.cuda.is_available()}" +
          (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    print(f"cudnn\t{torch.backends.cudnn.version()}")
    print(f"nccl_h\t{nccl_h[0] if nccl_h else 'missing (site-packages/nvidia/*/include/nccl.h)'}")
    print(f"python_ld_library_path\t{os.environ.get('LD_LIBRARY_PATH')}")
    print(f"run_libs\t{':'.join(libs)}")
    if require_cuda == "1" and not torch.cuda.is_available():
        print("torch sees no CUDA device", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(globals()[sys.argv[1]](*sys.argv[2:]))