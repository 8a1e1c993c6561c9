"""The README is a page a newcomer reads in minutes, in the order they need it; the docs pages each
answer one question, asked in their first lines; every link between them resolves; and what the
README quotes (a report, the CI workflow) is quoted from the real file. Pure text: nothing runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO
from llmbench_pytest import readme

README = (REPO / "README.md").read_text()
PAGES = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _fences(text: str, lang: str | None = None) -> list[list[str]]:
    """The lines of each fenced block of TEXT (of language LANG, where given)."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = [] if lang is None or line.strip()[3:] == lang else None
                if current is None:
                    current = "skip"  # type: ignore[assignment]
            else:
                if current != "skip":
                    blocks.append(current)
                current = None
            continue
        if isinstance(current, list):
            current.append(line)
    return blocks


def test_the_readme_is_short_and_in_the_order_a_newcomer_needs():
    assert len(README.splitlines()) <= 250, len(README.splitlines())
    top = [h for h in readme.headings(README)]
    assert top[0] == "llmbench"
    sections = [t for t in top if f"\n## {t}\n" in README]
    assert sections == ["Quick start", "Three ways to use it", "How to read the report", "Everything else"], (
        sections
    )
    # what it answers, before anything else
    assert "which distributed strategy" in README.split("## Quick start")[0]
    quick = readme.section(README, "Quick start")
    assert "make bench" in quick and "make test" in quick and "/usr/bin/time" in quick
    ways = readme.section(README, "Three ways to use it")
    assert "torchrun --nproc_per_node=8 -m pytest benchmarks/ -k zero2" in ways
    assert "ci/github-actions.yml" in ways
    assert re.search(r"^pytest-benchmark .*compare 0001 0002", ways, re.M), ways


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_docs_page_opens_with_the_question_it_answers(page: Path):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# "), lines[0]
    opening = " ".join(lines[1:8])
    question = re.search(r"\*\*([^*]+\?)\*\*", opening)
    assert question, f"{page.name} does not open with its question in bold: {opening[:200]}"


def _slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"[`*_]", "", title.strip().lower())
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for title in readme.headings(text):
        slug = _slug(title)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_the_slug_is_githubs():
    assert _slug("result.json's fields") == "resultjsons-fields"
    assert (
        _slug("How ranks start and stay warm (launcher mode)")
        == "how-ranks-start-and-stay-warm-launcher-mode"
    )
    assert _slug("The step trace behind `llmbench plan`, and its cache") == (
        "the-step-trace-behind-llmbench-plan-and-its-cache"
    )


@pytest.mark.parametrize("page", [REPO / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_link_to_a_file_or_a_heading_resolves(page: Path):
    text = page.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
            broken.append(f"{target}: no heading with that anchor in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_report_excerpt_is_quoted_from_the_report_it_names():
    section = readme.section(README, "How to read the report")
    (report,) = {t for t in LINK.findall(section) if t.endswith("BENCHMARK_REPORT.md")}
    lines = set((REPO / report).read_text().splitlines())
    (excerpt,) = _fences(section, "")
    missing = [line for line in excerpt if line and line not in lines]
    assert not missing, f"not in {report}: {missing}"


def test_the_ci_excerpt_is_quoted_from_the_workflow():
    ways = readme.section(README, "Three ways to use it")
    (excerpt,) = _fences(ways, "yaml")
    workflow = (REPO / "ci" / "github-actions.yml").read_text()
    assert "\n".join(excerpt) in workflow, excerpt
