"""The README and the docs pages, as installed with the package: `llmbench readme [SECTION]`.

pip keeps the README in the installed distribution's metadata (pyproject's `readme`), so a user who
installed llmbench without cloning it can still read how to run the benchmarks and read their
results. A checkout reads its README.md, beside the package, first, and its docs/*.md pages, where
the README sends a reader for the rest; the options reference is generated from the options'
definitions (options_doc.py), so it is there installed or not.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

_HEADING = re.compile(r"^(#{1,4}) (.+)$")


class ReadmeError(Exception):
    """No README to read, or no section of that name."""


def text() -> str:
    # a checkout (installed editable or not) reads its own README: the metadata of an editable
    # install holds the README as it was when it was installed
    beside = Path(__file__).resolve().parents[1] / "README.md"
    if beside.is_file() and beside.read_text().startswith("# llmbench"):
        return beside.read_text()
    try:
        body = importlib.metadata.metadata("llmbench").get_payload()
    except importlib.metadata.PackageNotFoundError:
        body = None
    if body:
        return str(body)
    raise ReadmeError("no README is installed with this llmbench (its metadata has no description)")


def pages() -> dict[str, str]:
    """The README, then each docs page of a checkout (docs/results/ holds measurement records, not
    pages), by path; the options reference is generated where no checkout holds it."""
    found = {"README.md": text()}
    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in sorted(docs.glob("*.md")):
        found[f"docs/{page.name}"] = page.read_text()
    if "docs/options.md" not in found:
        from . import options_doc

        found["docs/options.md"] = options_doc.markdown()
    return found


def find(name: str) -> str:
    """The first section, in the README or a docs page, whose title contains NAME (any case)."""
    everything = pages()
    for body in everything.values():
        try:
            return section(body, name)
        except ReadmeError:
            continue
    listed = "\n".join(f"  {title}" for body in everything.values() for title in headings(body))
    raise ReadmeError(f"no section of the README or docs is titled like {name!r}; their sections:\n{listed}")


def headings(readme: str) -> list[str]:
    """The titles of the README's sections and subsections, in order, outside code blocks."""
    return [title for _, title, _ in _sections(readme)]


def section(readme: str, name: str) -> str:
    """The section whose title contains NAME (any case; the first such), down to the next heading
    of its level or above."""
    lines = readme.splitlines()
    for level, title, start in _sections(readme):
        if name.lower() in title.lower():
            end = next(
                (s for lv, _, s in _sections(readme) if s > start and lv <= level),
                len(lines),
            )
            return "\n".join(lines[start:end]).rstrip() + "\n"
    listed = "\n".join(f"  {t}" for t in headings(readme))
    raise ReadmeError(f"no section of the README is titled like {name!r}; its sections:\n{listed}")


def _sections(readme: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of each heading; a `#` line inside a code block is not one."""
    found, fenced = [], False
    for i, line in enumerate(readme.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m:
            found.append((len(m.group(1)), m.group(2).strip(), i))
    return found
