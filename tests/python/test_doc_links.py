"""Every relative link in a tracked Markdown file points at a file or folder
that exists (issue 53: docs and scripts moved into folders, and the links
to them must move too). Links to the web and to anchors are not checked."""
import re
import subprocess

from keel_testlib import REPO

LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked_markdown():
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / f for f in out.split()]


def broken_links(path):
    for target in LINK.findall(path.read_text(errors="replace")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same file
        if not (path.parent / target.split("#", 1)[0]).exists():
            yield target


def test_relative_links_resolve():
    files = tracked_markdown()
    assert len(files) > 10, "git ls-files found too few Markdown files"
    bad = [f"{f.relative_to(REPO)}: {t}" for f in files for t in broken_links(f)]
    assert not bad, "links to nothing:\n" + "\n".join(bad)


def test_the_docs_index_lists_every_doc():
    index = (REPO / "docs" / "README.md").read_text()
    linked = set(LINK.findall(index))
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"
