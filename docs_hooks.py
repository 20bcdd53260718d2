"""mkdocs hooks: render the top-level notebooks/ folder inside the site, and name the nav sections.

The notebooks live next to the package (so `pytest --nbmake notebooks/` and Jupyter find them),
not under `chapters/`; this hook adds each `notebooks/NN_*.ipynb` as the page `notebooks/NN_*`.
It runs before mkdocs-jupyter's own `on_files`, which then turns them into notebook pages.
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent
SECTION_TITLES = {"Api": "API reference", "Notebooks": "Notebooks"}


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
