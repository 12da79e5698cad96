"""The README stays a five-minute read (at most 200 lines: the rest lives in docs/ and benchmarks/README.md), and
what it and the docs point at exists: every relative link (with its #anchor) and every path of the repository
named in backquotes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md",
         REPO / "bonforge" / "sandbox" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"`((?:bonforge|recipes|benchmarks|docs|tests)/[^`\s]*)`")


def test_the_readme_is_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def slugs(page: Path) -> set[str]:
    """The anchors a Markdown renderer gives the page's headings (lower case, punctuation dropped, spaces to -)."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def broken_links(page: Path) -> list[str]:
    out = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # a URL
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in slugs(dest)):
            out.append(target)
    return out


def missing_paths(page: Path) -> list[str]:
    """Backquoted paths of this repository that name no file or folder (placeholders and globs aside)."""
    out = []
    for path in PATH.findall(page.read_text()):
        path = path.split("::")[0].rstrip(".,:;")
        if not re.search(r"[<>*{}]|NNN", path) and not (REPO / path).exists():
            out.append(path)
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_link_and_path_a_page_names_exists(page):
    assert broken_links(page) == [] and missing_paths(page) == []


def test_the_checks_find_a_broken_link_and_a_missing_path(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page.write_text("[ok](there.md#a-heading-here) [gone](nowhere.md) [bad anchor](there.md#nope) "
                    "[web](https://example.org) `bonforge/cli.py` `bonforge/no_such.py` `store/<key>/x`\n")
    assert broken_links(page) == ["nowhere.md", "there.md#nope"]
    assert missing_paths(page) == ["bonforge/no_such.py"]
