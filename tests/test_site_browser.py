"""The documentation site in a real browser: the built site is served on 127.0.0.1 and every kind of page
(home, every chapter 0-9, the glossary, a notebook, an API page) is opened in headless Chromium (Debian's
`chromium`), which must render its key headings and log no console error, failed request, uncaught exception
or request leaving the machine. Every chapter page must show a rendered diagram: an SVG that mermaid (served
by the site itself) drew into the article, or an image from the site.

Chromium is driven through the DevTools protocol over `--remote-debugging-pipe` (JSON messages ended by
a NUL byte on file descriptors 3 and 4), so no browser download and no websocket library is needed.
Screenshots go to a tmp dir; set MINISGL_SITE_SHOTS=DIR to keep them there for a human to look at."""
from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from site_build import build_site

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM and not os.environ.get("CI"):  # in CI the `browser` fixture fails instead: never a silent skip
    pytest.skip("chromium not installed (apt-get install -y chromium); CI installs it and runs this test",
                allow_module_level=True)

# page -> headings that must render (h1-h3 text as the browser lays it out)
PAGES = {
    "": ["minisgl-edu: an LLM serving engine", "The chapters", "How to run it"],
    "00-before-you-start/": ["0 · Before you start", "The KV cache", "Summary"],
    "01-processes/": ["1 · Processes and boundaries", "Names in Mini-SGLang", "Summary"],
    "02-req-and-batch/": ["2 · Req and Batch", "Names in Mini-SGLang", "Summary"],
    "03-prefill-budget/": ["3 · The prefill budget", "Five conditions", "Names in Mini-SGLang", "Summary"],
    "04-pages/": ["4 · Pages and the page table", "Names in Mini-SGLang", "Summary"],
    "05-radix-cache/": ["5 · The radix cache", "Names in Mini-SGLang", "Summary"],
    "06-overlap/": ["6 · Overlap scheduling", "Names in Mini-SGLang", "Summary"],
    "07-kernels-and-graphs/": ["7 · From the ledger to kernel arguments", "Names in Mini-SGLang", "Summary"],
    "08-tp/": ["8 · Tensor parallelism", "Names in Mini-SGLang", "Summary"],
    "09-server/": ["9 · The full server", "Names in Mini-SGLang", "Summary"],
    "glossary/": ["Glossary"],
    "reading/": ["Reading list"],
    "notebooks/05_radix_cache/": ["5 · The radix cache", "LRU eviction", "Summary", "Exercises"],
    "api/radix/": ["minisgl_edu.radix", "RadixCache"],
}


# chapter pages (a name starting with a digit) must show a diagram
CHAPTER = re.compile(r"^\d\d-")

# What counts as a rendered diagram in the article: a mermaid SVG with real shapes and text in it, or an
# image served by the site that has loaded (naturalWidth > 0).
DIAGRAMS_JS = """(() => {
  const art = document.querySelector('article');
  const pending = art.querySelectorAll('div.diagram-src:not([data-rendered])').length;
  const svgs = [...art.querySelectorAll('div.diagram svg')].filter(s =>
      s.querySelectorAll('rect, path, line, polygon, circle').length >= 3
      && s.textContent.trim().length > 10 && s.getBoundingClientRect().height > 20);
  const errors = [...art.querySelectorAll('div.diagram svg')].filter(s =>
      s.getAttribute('aria-roledescription') === 'error' || /Syntax error/.test(s.textContent)).length;
  const imgs = [...art.querySelectorAll('img')].filter(i =>
      i.src.startsWith(location.origin) && i.complete && i.naturalWidth > 0);
  return {pending, errors, svgs: svgs.length, imgs: imgs.length};
})()"""

# Material's header fetches the star count of `repo_url` from GitHub; offline (as in CI) it simply is not shown
OPTIONAL_OFFSITE = ("https://api.github.com/repos/",)


class DevTools:
    """A minimal DevTools protocol client: one browser, one page, commands answered in order."""

    def __init__(self, user_data_dir: Path):
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        # chromium reads commands on fd 3 and writes replies and events on fd 4
        fds = {3: to_browser_r, 4: from_browser_w}
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={user_data_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=functools.partial(_dup_fds, fds))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf, self._next_id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=1280, height=900,
                  deviceScaleFactor=1, mobile=False)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._r], [], [], left)[0], "chromium did not answer in time"
            chunk = os.read(self._r, 1 << 20)
            assert chunk, f"chromium closed the pipe (exit code {self.proc.poll()})"
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, timeout: float = 20.0, **params) -> dict:
        self._next_id += 1
        cmd = {"id": self._next_id, "method": method, "params": params}
        if session:
            cmd["sessionId"] = self.session
        os.write(self._w, json.dumps(cmd).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            msg = self._message(deadline)
            if msg.get("id") == self._next_id:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg["result"]
            self.events.append(msg)  # an event that arrived before the answer

    def wait_for(self, method: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = self._message(deadline)
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    def drain(self, seconds: float) -> None:
        """Collect the events of the next `seconds` (late requests, scripts run after load)."""
        deadline = time.monotonic() + seconds
        while select.select([self._r], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                break
            self._buf += chunk
        while b"\0" in self._buf:
            msg, self._buf = self._buf.split(b"\0", 1)
            self.events.append(json.loads(msg))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


def _dup_fds(fds: dict[int, int]) -> None:
    for target, fd in fds.items():
        os.dup2(fd, target)


def problems(events: list[dict]) -> list[str]:
    """Console errors, failed loads and uncaught exceptions among the page's events."""
    out = []
    for ev in events:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')} at {d.get('url')}")
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error" \
                and not p["entry"].get("url", "").startswith(OPTIONAL_OFFSITE):
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output to the failures
        pass


@pytest.fixture(scope="module")
def served_site(tmp_path_factory):
    site = build_site(tmp_path_factory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM:
        pytest.fail("chromium is not installed; scripts/setup.sh installs Debian's `chromium` package")
    tools = DevTools(tmp_path_factory.mktemp("chromium-profile"))
    yield tools
    tools.close()


@pytest.mark.parametrize("page", list(PAGES))
def test_page_renders_in_chromium(browser, served_site, page, tmp_path_factory):
    browser.events.clear()
    url = served_site + page
    nav = browser.call("Page.navigate", session=True, url=url)
    assert "errorText" not in nav, f"{url}: {nav.get('errorText')}"
    browser.wait_for("Page.loadEventFired")
    browser.drain(0.7)  # the theme's scripts (search index, clipboard) run after load
    status = browser.call("Runtime.evaluate", session=True, returnByValue=True, expression=(
        "performance.getEntriesByType('navigation')[0].responseStatus"))["result"]["value"]
    assert status == 200, f"{url} answered {status}"
    headings = browser.call("Runtime.evaluate", session=True, returnByValue=True, expression=(
        "[...document.querySelectorAll('article :is(h1, h2, h3)')]"
        ".filter(h => h.getBoundingClientRect().height > 0)"  # rendered, not hidden
        ".map(h => h.innerText.replace(/[¶#]\\s*$/, '').trim())"))["result"]["value"]
    for want in PAGES[page]:
        assert any(h.startswith(want) for h in headings), f"{url}: no heading {want!r} among {headings}"
    if CHAPTER.match(page):
        deadline = time.monotonic() + 15
        while True:  # mermaid renders after load; a page with several diagrams takes a moment
            found = browser.call("Runtime.evaluate", session=True, returnByValue=True,
                                 expression=DIAGRAMS_JS)["result"]["value"]
            if found["pending"] == 0 or time.monotonic() > deadline:
                break
            browser.drain(0.3)
        assert found["pending"] == 0, f"{url}: {found['pending']} diagram(s) not rendered"
        assert found["errors"] == 0, f"{url}: mermaid drew {found['errors']} syntax error(s)"
        assert found["svgs"] + found["imgs"] >= 1, f"{url}: no rendered diagram or local image in the article"
    offsite = browser.call("Runtime.evaluate", session=True, returnByValue=True, expression=(
        "performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith(location.origin))"))["result"]["value"]
    found = problems(browser.events) + [f"loaded from off the site: {n}" for n in offsite
                                        if not n.startswith(OPTIONAL_OFFSITE)]
    assert not found, f"{url}:\n" + "\n".join(found)

    shot = browser.call("Page.captureScreenshot", session=True, format="png")["data"]
    png = base64.b64decode(shot)
    assert png.startswith(b"\x89PNG") and len(png) > 20_000, "a blank page screenshots to a few kB"
    out = Path(os.environ.get("MINISGL_SITE_SHOTS") or tmp_path_factory.getbasetemp() / "site-shots")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{page.strip('/').replace('/', '_') or 'home'}.png").write_bytes(png)
