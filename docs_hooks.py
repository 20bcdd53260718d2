"""mkdocs hooks: render the top-level notebooks/ folder inside the site, name the nav sections, and
point repository links at their pages.

The notebooks live next to the package (so `pytest --nbmake notebooks/` and Jupyter find them),
not under `chapters/`; this hook adds each `notebooks/NN_*.ipynb` as the page `notebooks/NN_*`.
It runs before mkdocs-jupyter's own `on_files`, which then turns them into notebook pages.

Chapters link to files the way the repository host's file view resolves them, relative to the page:
`../notebooks/04_pages.ipynb`, `../minisgl_edu/paging.py`. On the site `on_page_markdown` rewrites the
first to the notebook's page and the second to the module's API page (`api/paging.md`); a module
without an API page fails the build rather than leaving a dead link.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent
SECTION_TITLES = {"Api": "API reference", "Notebooks": "Notebooks"}
# ](../notebooks/NN_x.ipynb#frag) or ](../minisgl_edu/pkg/mod.py#frag), as seen from a page at the docs root
REPO_LINK = re.compile(r"\]\((?P<up>(?:\.\./)+)(?P<path>(?:notebooks/[^)#\s]+\.ipynb|minisgl_edu/[^)#\s]*))"
                       r"(?P<frag>#[^)\s]*)?\)")


API_PAGE_OF = {"serve": "server", "bench": "graphs"}  # modules documented on another module's page


def api_page(module_path: str) -> str:
    """minisgl_edu/attention/flashinfer.py -> api/attention.md: the API page of the top-level module."""
    parts = module_path.removeprefix("minisgl_edu/").rstrip("/").split("/")
    name = parts[0].removesuffix(".py")
    name = API_PAGE_OF.get(name, name)
    return f"api/{name}.md"


@event_priority(100)  # before mkdocs-jupyter (priority 0) wraps .ipynb files
def on_files(files, config):
    for nb in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        uri = f"notebooks/{nb.name}"
        if files.get_file_from_path(uri) is None:
            files.append(File(uri, src_dir=str(ROOT), dest_dir=config["site_dir"],
                              use_directory_urls=config["use_directory_urls"]))
    return files


def on_nav(nav, config, files):
    for item in nav.items:
        if item.is_section and item.title in SECTION_TITLES:
            item.title = SECTION_TITLES[item.title]
    return nav


def on_page_markdown(markdown, page, config, files):
    depth = page.file.src_uri.count("/")  # 0 for chapters/NN-x.md, 1 for chapters/api/x.md
    up_to_repo = "../" * (depth + 1)
    to_docs_root = "../" * depth

    def rewrite(m: re.Match) -> str:
        if m["up"] != up_to_repo:
            return m[0]  # not a link to the repository root from this page
        path, frag = m["path"], m["frag"] or ""
        if path.startswith("notebooks/"):
            target = path
        else:
            target = api_page(path)
            if not (Path(config["docs_dir"]) / target).is_file():
                raise ValueError(f"{page.file.src_uri}: {path} has no API page {target}")
        return f"]({to_docs_root}{target}{frag})"

    return REPO_LINK.sub(rewrite, markdown)
