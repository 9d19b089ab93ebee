"""The documentation: a short README, an index that reaches every page, links that resolve.

The repository explains itself: README.md and docs/ refer to nothing outside it
(no notes kept elsewhere, no tracker numbers), so a clone reads complete. Upstream
references such as "fio #1881" name no issue tracker of ours and are fine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from iobench.cli.commands import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
PAGES = sorted(DOCS.glob("*.md"))
README_LIMIT = 12_288

# What points outside the repository: the spec's sections, the shared folder, our tracker's numbers.
OUTSIDE = r"S[P]EC\s?§|\.\.[/]shared|\b[Ii]ssues?\s#?\d+\b"
OUTSIDE_RE = re.compile(OUTSIDE)
# Where code, tests and tooling live (tests/data/ holds other people's files, kept as they are).
CODE = ("iobench", "tests", "lab", "benchmarks", "configs")

# [text](target) and ![alt](target); a target ends at a blank or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> list[str]:
    """The targets of a Markdown file's inline links, code spans and fenced blocks left out."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def local_target(page: Path, target: str) -> Path | None:
    """The file a relative link points to (anchor dropped); None for a URL or a bare anchor."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None
    return (page.parent / target.split("#", 1)[0]).resolve()


def outside_references(path: Path) -> list[str]:
    """``file:line: text`` for each line of ``path`` that points outside the repository."""
    text = path.read_text(errors="replace")
    if path == Path(__file__).resolve():
        text = text.replace(OUTSIDE, "")
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_RE.search(line)
    ]


def command_names(group: TyperGroup, prefix: str = "") -> list[str]:
    """Every command of the CLI as typed after ``iobench``: ``run``, ``system show`` ..."""
    found = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, TyperGroup):
            found += command_names(command, f"{prefix}{name} ")
        else:
            found.append(f"{prefix}{name}")
    return found


def test_the_readme_reads_in_five_minutes() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size:,} bytes; move detail into docs/ (limit {README_LIMIT:,})"
    )


def test_the_readme_names_every_command() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    names = command_names(group)
    assert {"run", "system show"} <= set(names)
    text = README.read_text()
    assert [n for n in names if f"iobench {n}" not in text] == []


def test_the_readme_links_the_index() -> None:
    assert INDEX in {local_target(README, t) for t in links(README)}


def test_the_index_links_every_page() -> None:
    linked = {local_target(INDEX, t) for t in links(INDEX)}
    assert [p.name for p in PAGES if p != INDEX and p.resolve() not in linked] == []


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_to_a_file_in_the_repository(page: Path) -> None:
    broken = []
    for target in links(page):
        path = local_target(page, target)
        if path is not None and (not path.exists() or not path.is_relative_to(ROOT)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_refer_to_nothing_outside_the_repository(page: Path) -> None:
    assert outside_references(page) == []


def code_files() -> list[Path]:
    found = [ROOT / "Makefile"]
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.is_file() and "__pycache__" not in parts and parts[:2] != ("tests", "data"):
                found.append(path)
    return found


def test_the_code_refers_to_nothing_outside_the_repository() -> None:
    found = [line for path in code_files() for line in outside_references(path)]
    assert found == []


def test_the_pattern_finds_what_it_must_and_spares_upstream_references() -> None:
    # Spelled in pieces, so that this file does not match its own pattern.
    assert OUTSIDE_RE.search("see SPEC" + " §3") and OUTSIDE_RE.search(".." + "/shared/seeds")
    assert OUTSIDE_RE.search("iss" + "ue 17 chose") and OUTSIDE_RE.search("Iss" + "ues #4")
    assert not OUTSIDE_RE.search("fio #1881") and not OUTSIDE_RE.search("tissue 3")
