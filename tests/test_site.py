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
EXCERPT = re.compile(r'^```(?:python|cuda) title="([^"]+)"\n(.*?)^```', re.M | re.S)


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


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_chapter_links_resolve_in_the_repository_file_view():
    """A chapter's relative links name files as the repository host's file view sees them (relative to the
    page, e.g. ../notebooks/04_pages.ipynb, ../minisgl_edu/paging.py); docs_hooks.py maps them to site pages."""
    checked = 0
    for page in sorted(CHAPTERS.glob("*.md")):
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # links inside code are not links
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.name}: link {target} points at nothing in the repository"
            checked += 1
    assert checked >= 50


def test_site_links_point_at_pages(site):
    """On the site the same links lead to the notebook's page and the module's API page."""
    html = (site / "04-pages" / "index.html").read_text()
    assert 'href="../notebooks/04_pages/"' in html and 'href="../api/paging/"' in html
    assert "../minisgl_edu/" not in html and ".ipynb\"" not in html


def test_chapter_figures_match_the_notebooks():
    """The notebook plots a chapter embeds are the committed notebooks' own outputs, byte for byte:
    after re-running a notebook, `python3 scripts/draw_diagrams.py` copies them again."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("draw_diagrams", ROOT / "scripts" / "draw_diagrams.py")
    draw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draw)
    assert not draw.extract_notebook_figures(check=True), "run python3 scripts/draw_diagrams.py"
    for page in sorted(CHAPTERS.glob("[0-9][0-9]-*.md")):
        if page.name >= "01" and page.name < "10":
            text = page.read_text()
            assert "```mermaid" in text or "](assets/figures/" in text, f"{page.name} has no diagram"


def test_docs_hook_rewrites_repository_links_and_refuses_unknown_modules():
    import sys
    from types import SimpleNamespace
    sys.path.insert(0, str(ROOT))
    import docs_hooks
    cfg = {"docs_dir": str(CHAPTERS)}
    page = SimpleNamespace(file=SimpleNamespace(src_uri="04-pages.md"))
    md = ("[nb](../notebooks/04_pages.ipynb) [m](../minisgl_edu/paging.py#L1) [p](../minisgl_edu/server/) "
          "[s](../minisgl_edu/serve.py) [c](02-req-and-batch.md) [x](../../minisgl_edu/paging.py)")
    out = docs_hooks.on_page_markdown(md, page, cfg, None)
    assert out == ("[nb](notebooks/04_pages.ipynb) [m](api/paging.md#L1) [p](api/server.md) "
                   "[s](api/server.md) [c](02-req-and-batch.md) [x](../../minisgl_edu/paging.py)")
    api_page = SimpleNamespace(file=SimpleNamespace(src_uri="api/paging.md"))
    assert docs_hooks.on_page_markdown("[m](../../minisgl_edu/radix.py)", api_page, cfg, None) == "[m](../api/radix.md)"
    with pytest.raises(ValueError, match="no API page"):
        docs_hooks.on_page_markdown("[m](../minisgl_edu/no_such_module.py)", page, cfg, None)


def test_notebook_00_imports_the_library_and_links_every_chapter_it_introduces():
    """Chapter 0's notebook: header() first, the library's classes imported (none defined), committed
    outputs, and the chapter page links each section to the chapter that builds it."""
    import nbformat
    nb = nbformat.read(ROOT / "notebooks" / "00_before_you_start.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "header()" in code[0].source and code[0].outputs
    assert not [c for c in code if re.search(r"^\s*class\s", c.source, re.M)]
    assert all(c.outputs for c in code), "commit it executed"
    src = "\n".join(c.source for c in code)
    for obj in ("LLM(", "PagePool(", "RadixCache(", "shard_range(", "kv_bytes_per_token("):
        assert obj in src, f"notebook 00 should show {obj[:-1]} at work"
    page = (CHAPTERS / "00-before-you-start.md").read_text()
    for chapter in ("02-req-and-batch", "03-prefill-budget", "04-pages", "05-radix-cache", "06-overlap",
                    "07-kernels-and-graphs", "08-tp"):
        assert f"]({chapter}.md)" in page, f"chapter 0 never links {chapter}"
