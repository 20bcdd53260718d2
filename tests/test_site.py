"""The documentation site: `mkdocs build --strict` succeeds, the key pages exist, and every code
excerpt a chapter quotes from the library is still the library's exact code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from site_build import build_site

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
# ```python title="minisgl_edu/x.py" ... ```: an excerpt of that file; a line "..." skips code
EXCERPT = re.compile(r'^```python title="([^"]+)"\n(.*?)^```', re.M | re.S)


def _chunks(body: str) -> list[list[str]]:
    chunks, cur = [], []
    for line in body.splitlines():
        if line.strip() == "...":
            chunks.append(cur)
            cur = []
        elif line.strip():
            cur.append(line.strip())
    chunks.append(cur)
    return [c for c in chunks if c]


def _contains(lines: list[str], chunk: list[str]) -> bool:
    n = len(chunk)
    return any(lines[i:i + n] == chunk for i in range(len(lines) - n + 1))


def excerpts():
    for page in sorted(CHAPTERS.glob("*.md")):
        for m in EXCERPT.finditer(page.read_text()):
            yield page.name, m.group(1), m.group(2)


def test_chapter_excerpts_match_the_code():
    found = list(excerpts())
    assert len(found) >= 20, "chapters 2-5 quote their modules"
    for page, path, body in found:
        path = path.split()[0]  # a title may add a note after the path: "minisgl_edu/x.py (what)"
        src = ROOT / path
        assert src.is_file(), f"{page} quotes {path}, which does not exist"
        lines = [ln.strip() for ln in src.read_text().splitlines() if ln.strip()]
        for chunk in _chunks(body):
            assert _contains(lines, chunk), f"{page}: this excerpt is no longer in {path}:\n" + "\n".join(chunk)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory)  # built once per session, shared with test_site_browser.py


def test_site_builds_with_chapters_and_api_pages(site):
    home = (site / "index.html").read_text()
    assert "one question at a time" in home
    for page, heading in [("02-req-and-batch", "Req and Batch"), ("03-prefill-budget", "The prefill budget"),
                          ("04-pages", "Pages and the page table"), ("05-radix-cache", "The radix cache")]:
        html = (site / page / "index.html").read_text()
        assert heading in html and "Summary" in html, page
    for mod, member in [("req", "complete_one"), ("prefill", "PrefillAdder"), ("paging", "assign_locations"),
                        ("radix", "match_prefix"), ("scheduler", "Scheduler"), ("engine", "Engine"),
                        ("llm", "generate"), ("model", "build_model"), ("tp", "DistributedInfo"),
                        ("config", "SchedulerConfig")]:
        html = (site / "api" / mod / "index.html").read_text()
        assert member in html, f"api/{mod} does not document {member}"


def test_every_notebook_is_a_page(site):
    notebooks = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    assert len(notebooks) >= 4
    for nb in notebooks:
        assert (site / "notebooks" / nb.stem / "index.html").is_file(), f"{nb.name} is not rendered"
    for stem in ("02_req_and_batch", "03_prefill_budget", "04_pages", "05_radix_cache"):
        html = (site / "notebooks" / stem / "index.html").read_text()
        assert "Summary" in html and "Exercise" in html, f"{stem}: rendered page lacks its Summary/Exercises"
    html = (site / "notebooks" / "02_req_and_batch" / "index.html").read_text()
    assert "cached_len" in html and "hardware:" in html  # the committed outputs are shown


@pytest.mark.parametrize("stem", ["02_req_and_batch", "03_prefill_budget", "04_pages", "05_radix_cache"])
def test_notebook_follows_the_course_rules(stem):
    """First code cell prints header(); no class is defined (the library's are imported); a Summary and
    at least 3 exercises, each with an assert cell; the committed outputs are there and small."""
    import nbformat
    path = ROOT / "notebooks" / f"{stem}.ipynb"
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "header()" in code[0].source and code[0].outputs, "the first code cell prints hardware, date, commit"
    assert not [c for c in code if re.search(r"^\s*class\s", c.source, re.M)], "a notebook imports classes, never defines one"
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "## Summary" in md and "## Exercises" in md
    exercises = re.findall(r"\*\*Exercise (\d+)\.\*\*", md)
    assert len(exercises) >= 3
    assert sum("assert " in c.source for c in code[-2 * len(exercises):]) >= len(exercises), "each exercise has a check"
    assert all(c.outputs or not c.source.strip() or c.execution_count for c in code), "commit it executed"
    assert path.stat().st_size < 200_000, "keep stored outputs small"
