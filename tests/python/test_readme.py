"""The README's first screen and command list (issue 53): the commands it
lists are exactly `keel --help`'s, its first 40 lines carry no build diary
(commit hashes, dates, VM names), and the picture it shows is a committed
file, so it renders on the repository page."""
import re
import subprocess

from keel_testlib import REPO, keel_binary

README = (REPO / "README.md").read_text()


def help_commands() -> set[str]:
    out = subprocess.run([str(keel_binary()), "--help"], capture_output=True, text=True, timeout=60).stdout
    block = out.split("Subcommands:", 1)[1].split("\n\n", 1)[0]
    return {line.split()[0] for line in block.splitlines() if line.strip()}


def readme_commands() -> set[str]:
    block = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\s{4}keel ([a-z-]+)", block, re.M))


def test_the_readme_lists_every_command_keel_has():
    have, listed = help_commands(), readme_commands()
    assert have, "keel --help listed no subcommands"
    assert listed == have, f"in keel --help only: {sorted(have - listed)}; in the README only: {sorted(listed - have)}"


def test_the_first_screen_has_no_build_diary():
    first = "\n".join(README.splitlines()[:40])
    assert not re.search(r"\b[0-9a-f]{7,40}\b", first), "a commit hash in the README's first 40 lines"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\b(January|February|March|April|May|June|July|August|September|"
                         r"October|November|December) 20\d\d\b", first), "a date in the README's first 40 lines"
    assert not re.search(r"\bVM\b", first), "a VM name in the README's first 40 lines"
    for placeholder in ("TIME_FIRST", "TIME_TEST", "HEADLINE_PLOT", "HEADLINE_TEXT"):
        assert placeholder not in README


def test_the_headline_picture_is_committed():
    first = "\n".join(README.splitlines()[:40])
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", first)
    assert pictures, "no picture in the README's first 40 lines"
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split())
    for p in pictures:
        assert (REPO / p).is_file(), p
        assert p in tracked, f"{p} is not committed: it would not render on the repository page"
