"""src/README.md's module map holds: every #include between keel's own
folders points to a folder listed before the includer's, and every folder
under src/ is listed. An upward include (a model file reaching into optim/,
a config file into data/) fails here, naming the file and line."""
import re

from keel_testlib import REPO

SRC = REPO / "src"


def layer_order() -> list[str]:
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)/` \|", (SRC / "README.md").read_text(), re.M)
    assert rows, "src/README.md has no module table"
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), rows
    return [name for _, name in rows]


def test_every_folder_is_in_the_map():
    folders = sorted(p.name for p in SRC.iterdir() if p.is_dir())
    assert sorted(layer_order()) == folders


def test_no_include_points_up_the_map():
    rank = {name: i for i, name in enumerate(layer_order())}
    upward = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu") or not path.is_file():
            continue
        mine = path.relative_to(SRC).parts[0]
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m and m.group(1) != mine and m.group(1) in rank and rank[m.group(1)] > rank[mine]:
                upward.append(f"{path.relative_to(REPO)}:{n}: {mine}/ includes {m.group(1)}/")
    assert not upward, "includes that point up the module map (src/README.md):\n" + "\n".join(upward)
