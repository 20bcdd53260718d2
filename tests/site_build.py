"""Build the documentation site once per test session: `mkdocs build --strict` takes ~15 s, and both
tests/test_site.py (the HTML files) and tests/test_site_browser.py (the pages in Chromium) read it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_built: dict[str, Path] = {}  # one build per process, whichever test module asks first


def build_site(tmp_path_factory) -> Path:
    if "site" not in _built:
        out = tmp_path_factory.mktemp("site")  # under pytest's basetemp, which pytest prunes
        run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
        _built["site"] = out
    return _built["site"]
