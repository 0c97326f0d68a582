"""scripts/bench/pool_sittings.py: the pooled ratio of bench_compare.sh
sittings, its bootstrap interval, the count of sittings at a target, and
exit 2 for records that must not be pooled. The field names it reads are
checked against real records in test_bench_compare.py."""
import json
import subprocess
import sys

from keel_testlib import REPO

SCRIPT = REPO / "scripts" / "bench" / "pool_sittings.py"
KEEL_ISA = {"aten": "AVX2", "keel": "avx2", "onednn": "AVX2"}


def write_sitting(d, keel, eager, isa=None, config="bench-cpu"):
    """One sitting: round i has keel at keel[i] tokens/s and eager at eager[i]."""
    d.mkdir(parents=True)
    for i, (k, e) in enumerate(zip(keel, eager), start=1):
        (d / f"keel-{i}.json").write_text(json.dumps({
            "config": config, "parameters": 100, "tokens_per_s": k, "load_average": [1.0, 1.0, 1.0],
            "host": {"kernel_isa": isa or KEEL_ISA}}))
        (d / f"eager-{i}.json").write_text(json.dumps({
            "config": config, "parameters": 100, "tokens_per_s": e, "load_average": [1.5, 1.0, 1.0],
            "kernel_isa": {"aten": "AVX2"}}))
    return d


def pool(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "--modes", "eager", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_pools_the_sittings_ratios_with_an_interval_around_them(tmp_path):
    a = write_sitting(tmp_path / "a", [140, 130, 135], [100, 100, 100])  # ratio of medians 1.35
    b = write_sitting(tmp_path / "b", [125, 120, 130], [100, 100, 100])  # 1.25
    out = pool(a, b, "--resamples", "2000", "--json", tmp_path / "pooled.json")
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "pooled.json").read_text())
    assert [s["keel/eager"] for s in r["sittings"]] == [1.35, 1.25]
    p = r["pooled"]["keel/eager"]
    assert abs(p["mean_of_sittings"] - 1.30) < 1e-12
    lo, hi = p["ci95"]
    # Resampled sittings and rounds reach both ends: the interval spans the
    # two sittings' ratios' neighbourhood, not a point.
    assert 1.2 <= lo < 1.30 < hi <= 1.4, (lo, hi)
    assert p["target"] == 1.3 and p["sittings_at_or_above"] == 1
    assert r["sittings"][0]["load_1min"] == [1.0, 1.5]
    assert "keel/eager: 1.300 [" in out.stdout and "1 of 2 sittings at or above 1.3" in out.stdout


def test_identical_rounds_give_a_point_interval_and_a_target_can_be_set(tmp_path):
    a = write_sitting(tmp_path / "a", [120, 120], [100, 100])
    out = pool(a, "--resamples", "100", "--target", "eager=1.2", "--json", tmp_path / "p.json")
    assert out.returncode == 0, out.stderr
    p = json.loads((tmp_path / "p.json").read_text())["pooled"]["keel/eager"]
    assert p["ci95"] == [p["mean_of_sittings"]] * 2 and p["sittings_at_or_above"] == 1


def test_records_that_must_not_be_pooled_are_exit_2_naming_the_file(tmp_path):
    a = write_sitting(tmp_path / "a", [120], [100])
    other_isa = write_sitting(tmp_path / "b", [120], [100], isa={"aten": "AVX512", "keel": "avx512f", "onednn": "x"})
    out = pool(a, other_isa)
    assert out.returncode == 2 and "b/keel-1.json: isa" in out.stderr, out.stderr
    other_config = write_sitting(tmp_path / "c", [120], [100], config="bench-cpu-gpt")
    out = pool(a, other_config)
    assert out.returncode == 2 and "c/keel-1.json: config bench-cpu-gpt" in out.stderr, out.stderr
    out = pool(a, tmp_path / "a")
    assert out.returncode == 2 and "given twice" in out.stderr
    (a / "eager-1.json").write_text("{not json")
    out = pool(a)
    assert out.returncode == 2 and "a/eager-1.json: not a bench record" in out.stderr, out.stderr
    (a / "eager-1.json").write_text("[" * 100000)
    out = pool(a)
    assert out.returncode == 2 and "a/eager-1.json: not a bench record" in out.stderr, out.stderr
    with open(a / "eager-1.json", "wb") as f:  # sparse: 17 MiB of nothing, past the bound
        f.truncate(17 << 20)
    out = pool(a)
    assert out.returncode == 2 and "more than a bench record's" in out.stderr, out.stderr
    (a / "eager-1.json").unlink()
    out = pool(a)
    assert out.returncode == 2 and "a/eager-1.json: missing" in out.stderr, out.stderr
    out = pool(tmp_path / "nowhere")
    assert out.returncode == 2 and "no such directory" in out.stderr
    out = pool(a, "--target", "eager")
    assert out.returncode == 2 and "MODE=RATIO" in out.stderr
