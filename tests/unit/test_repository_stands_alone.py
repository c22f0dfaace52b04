"""The repository stands alone: nothing in it cites a file outside it, and its doc links resolve.

What the code relies on is restated in docs/ (docs/architecture.md, docs/robustness.md, docs/platforms.md, ...)
with its external source (an RFC section, a vendor file with its version, a URL). So no tracked text file may
cite the reference material the project started from (its design and reference notes, which never lived here),
nor the issue tracker by bare number: a comment says what the thing is, or names the docs section that explains
it. A numbered section of "platforms.md" is an outside file's numbering too: docs/platforms.md has named
sections, and a citation names one that exists.

Issue numbers: no tracked file carries one, docs/ included: a docs section title says what it is about, and
docs/benchmarks.md keeps its dated history as history, without the numbers. A citation qualified by its
repository (``owner/repo#123``, a vendor's tracker) is an external source and allowed.

``supervisor/taxonomy/data/v1.toml`` is exempt from every pattern: it is frozen byte for byte (its digest is
checked by ``tests/unit/test_taxonomy_loader.py``); v2.toml, the default, cites our docs.

The patterns are built from parts, so this file does not match them itself.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what is searched: the package, the machines, the tests, the docs and every file shipped beside them
SEARCHED = ("supervisor", "machines", "tests", "docs", "README.md", "systemd", "pyproject.toml", "dev", ".ci")
#: frozen byte for byte: a shipped taxonomy version never changes (docs/taxonomy.md, "Versions and staged rollout")
FROZEN = frozenset({"supervisor/taxonomy/data/v1.toml"})

_MD = "." + "md"
#: outside reference files: the design notes and the reference notes the project started from
OUTSIDE_FILES = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(("design", "reliability", "resilience", "style", "layout"))
    + r")"
    + re.escape(_MD)
)
OUTSIDE_DIR = re.compile(re.escape(".." + "/" + "shared"))
SIM_SPEC = re.compile("SIMULATOR" + " " + "SPEC")
#: a bare tracker number: the word, then a number (plural and hyphen too); ``owner/repo#N`` does not match
ISSUE = re.compile(r"(?<![\w/.-])[Ii]ssues?[\s-]+#?\d+")
#: the platforms page, then a section sign or the word "section" and a number: the outside file's numbering
PLATFORMS_NUMBERED = re.compile(r"platforms" + re.escape(_MD) + r"`?,?\s*(?:§|sections?\s+\d)")
#: the platforms page, a comma, then a quoted name: the name must be a heading of docs/platforms.md
PLATFORMS_NAMED = re.compile(r"platforms" + re.escape(_MD) + r'`?,?\s+"([^"]+)"')


def _tracked_files() -> list[str]:
    """The tracked text files under SEARCHED (git's view; a checkout without git: the files on disk)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", *SEARCHED],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
    if not names:
        names = [
            p.relative_to(ROOT).as_posix()
            for top in SEARCHED
            for p in ([ROOT / top] if (ROOT / top).is_file() else (ROOT / top).rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return sorted(n for n in names if n not in FROZEN)


def _lines() -> Iterator[tuple[str, int, str]]:
    for name in _tracked_files():
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet in git
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary fixture
            continue
        for number, line in enumerate(text.splitlines(), 1):
            yield name, number, line


LINES = list(_lines())


def _hits(pattern: re.Pattern[str]) -> list[str]:
    return [f"{name}:{number}: {line.strip()}" for name, number, line in LINES if pattern.search(line)]


def test_the_search_sees_the_repository() -> None:
    """Guards the guard: the walk finds the package, the tests and the docs."""
    names = {name for name, _, _ in LINES}
    assert {"supervisor/errors.py", "docs/platforms.md", "README.md"} <= names


@pytest.mark.parametrize(
    ("what", "pattern"),
    [
        ("an outside reference file", OUTSIDE_FILES),
        ("the outside reference folder", OUTSIDE_DIR),
        ("the outside simulator spec", SIM_SPEC),
        ("a numbered section of an outside platforms reference", PLATFORMS_NUMBERED),
    ],
)
def test_nothing_cites_a_file_outside_the_repository(what: str, pattern: re.Pattern[str]) -> None:
    hits = _hits(pattern)
    assert not hits, f"{len(hits)} citation(s) of {what}; cite docs/ or the external source:\n" + "\n".join(
        hits
    )


def test_no_issue_numbers() -> None:
    """The tracker is outside the repository: say what the thing is, or cite the docs section."""
    hits = _hits(ISSUE)
    assert not hits, f"{len(hits)} issue number(s):\n" + "\n".join(hits)


def _headings(markdown: str) -> list[str]:
    """The ATX headings of a markdown text, outside fenced code blocks."""
    headings: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            headings.append(m.group(1))
    return headings


def test_platforms_citations_name_real_sections() -> None:
    """A quoted name after docs/platforms.md names one of its headings (or a heading's start)."""
    headings = _headings((ROOT / "docs" / "platforms.md").read_text(encoding="utf-8"))
    wrong = [
        f"{name}:{number}: {m.group(1)!r}"
        for name, number, line in LINES
        for m in PLATFORMS_NAMED.finditer(line)
        if not any(h.startswith(m.group(1)) for h in headings)
    ]
    assert not wrong, "no such section of docs/platforms.md:\n" + "\n".join(wrong)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for heading in _headings(path.read_text(encoding="utf-8")):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


#: [text](target): a relative target, optionally with an #anchor; external and bare-anchor links are handled apart
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_relative_doc_links_resolve() -> None:
    """Every relative link of README.md and docs/*.md names an existing file, and its #anchor a heading there."""
    broken: list[str] = []
    for page in _doc_pages():
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not linked.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
