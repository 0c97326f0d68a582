"""scripts/studies/pack_sweep.sh: a sweep's finished points without their
checkpoints, packed and unpacked so a study can continue on another machine;
unpacking refuses to replace a point or to write outside its directory."""
import io
import subprocess
import tarfile

import pytest

from keel_testlib import REPO

SCRIPT = REPO / "scripts" / "studies" / "pack_sweep.sh"


def run(*args):
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def make_sweep(root):
    sweep = root / "demo"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    (sweep / "sweep.log").write_text("log\n")
    done = sweep / "a_lr=1e-2"
    (done / "checkpoints" / "step_00000010").mkdir(parents=True)
    (done / "checkpoints" / "step_00000010" / "model.bin").write_bytes(b"x" * 100)
    for name in ("config.yaml", "summary.json", "metrics.jsonl", "spikes.jsonl", "compute.json", "train.log"):
        (done / name).write_text(name)
    running = sweep / "a_lr=1e-1"  # no summary.json yet
    running.mkdir()
    (running / "metrics.jsonl").write_text("{}\n")
    return sweep


@pytest.fixture
def needs_zstd():
    if subprocess.run(["sh", "-c", "command -v zstd"], capture_output=True).returncode != 0:
        pytest.skip("the zstd command is not installed (scripts/setup.sh installs it)")


def test_packs_finished_points_without_checkpoints(tmp_path, needs_zstd):
    sweep = make_sweep(tmp_path)
    out = tmp_path / "runs.tar.zst"
    r = run(sweep, out)
    assert r.returncode == 0, r.stderr
    assert "1 finished point(s)" in r.stdout
    members = subprocess.run(["tar", "-I", "zstd", "-tf", out], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(members) == sorted(
        ["demo/sweep.json", "demo/sweep.log"]
        + [f"demo/a_lr=1e-2/{n}" for n in ("config.yaml", "summary.json", "metrics.jsonl", "spikes.jsonl", "compute.json")]
    )
    # Packing again over the same file is refused, not overwritten.
    again = run(sweep, out)
    assert again.returncode == 2 and "exists" in again.stderr


def test_unpacks_and_refuses_to_replace_a_point(tmp_path, needs_zstd):
    out = tmp_path / "runs.tar.zst"
    assert run(make_sweep(tmp_path), out).returncode == 0
    dest = tmp_path / "elsewhere"
    dest.mkdir()
    r = run("--unpack", out, dest)
    assert r.returncode == 0, r.stderr
    assert (dest / "demo" / "a_lr=1e-2" / "summary.json").read_text() == "summary.json"
    (dest / "demo" / "a_lr=1e-2" / "summary.json").write_text("newer")
    clash = run("--unpack", out, dest)
    assert clash.returncode == 2 and "demo/a_lr=1e-2" in clash.stderr
    assert (dest / "demo" / "a_lr=1e-2" / "summary.json").read_text() == "newer"


def test_refuses_a_member_outside_the_directory(tmp_path, needs_zstd):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("demo/../../escaped/summary.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    hostile = tmp_path / "hostile.tar.zst"
    subprocess.run(["zstd", "-q", "-o", hostile], input=buf.getvalue(), check=True)
    dest = tmp_path / "dest"
    dest.mkdir()
    r = run("--unpack", hostile, dest)
    assert r.returncode == 2 and "leaves the directory" in r.stderr
    assert not (tmp_path / "escaped").exists()
    not_an_archive = tmp_path / "plain.tar.zst"
    not_an_archive.write_text("hello")
    r = run("--unpack", not_an_archive, dest)
    assert r.returncode == 2 and "not a zstd tar archive" in r.stderr


def test_only_packs_the_points_that_match(tmp_path, needs_zstd):
    sweep = make_sweep(tmp_path)
    other = sweep / "b_lr=1e-2"
    other.mkdir()
    (other / "summary.json").write_text("{}")
    out = tmp_path / "a.tar.zst"
    r = run(sweep, out, "--only", "a_*")
    assert r.returncode == 0, r.stderr
    members = subprocess.run(["tar", "-I", "zstd", "-tf", out], capture_output=True, text=True, check=True).stdout.split()
    assert "demo/a_lr=1e-2/summary.json" in members and not any(m.startswith("demo/b_") for m in members)
    # Two archives of one sweep unpack side by side: the sweep's own files are shared, the points are not.
    assert run(sweep, tmp_path / "b.tar.zst", "--only", "b_*").returncode == 0
    dest = tmp_path / "dest"
    dest.mkdir()
    assert run("--unpack", out, dest).returncode == 0
    r = run("--unpack", tmp_path / "b.tar.zst", dest)
    assert r.returncode == 0, r.stderr
    assert (dest / "demo" / "b_lr=1e-2" / "summary.json").exists()
    none = run(sweep, tmp_path / "c.tar.zst", "--only", "zzz*")
    assert none.returncode == 2 and "no finished point matches" in none.stderr
    assert not (tmp_path / "c.tar.zst").exists()
