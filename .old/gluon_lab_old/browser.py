"""Real-browser check of a built report directory (headless Chromium through Selenium 4).

    problems = check_site("reports", screenshots_dir="reports/screenshots")
    python -m gluon_lab_old.browser reports/ --screenshots reports/screenshots   # one line per problem, exit 1

Every top-level ``*.html`` page of the directory is loaded from file:// in headless Chromium
(Debian's ``chromium`` + ``chromium-driver``: ``make test`` / ``make browser`` installs them) and checked:

* ``console``  no SEVERE browser-log entry: console.error, uncaught exceptions, failed resource loads;
* ``network``  no request to any network host: the browser blocks http(s)/ws(s) requests and every
               attempted request is reported (Chrome's network log and
               ``performance.getEntriesByType('resource')``), and the HTML itself is scanned for
               ``<script src="http…">``, ``<link href="http…">``, ``<img src="http…">``, ``url(http…)``;
* ``link``     every ``<a href>`` resolves: a relative file exists (inside the report directory), a
               ``#anchor`` names an element id on its target page; an external http(s) link is an
               error (the pages are offline and link nothing outside);
* ``image``    every ``<img>`` loaded (``naturalWidth > 0``);
* ``toc``      each notebook page has a ``<nav class="gl-toc">`` whose ``<a href="#ID">`` entries,
               clicked for real, scroll their target into view (near the top of the viewport, or as
               far as the page scrolls);
* ``contract`` the index has one ``<a class="gl-card" href="NN-name.html">`` with an ``<img>`` per page;
               each page links back to ``index.html`` and has ``a.gl-prev`` / ``a.gl-next`` to its
               neighbours (order: build.json, else file names) where they exist;
* ``screenshot`` a full-page PNG ``<screenshots_dir>/<page-stem>.png`` (height capped at
               MAX_SCREENSHOT_HEIGHT) is written when screenshots_dir is given.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import struct
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

CHROMIUM = os.environ.get("GLUON_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("GLUON_LAB_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROME_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-default-apps",
               "--disable-extensions", "--hide-scrollbars", "--force-color-profile=srgb",
               "--allow-file-access-from-files")
WINDOW = (1280, 900)
MAX_SCREENSHOT_HEIGHT = 16000
BLOCKED = ("http://*", "https://*", "ws://*", "wss://*", "ftp://*")
LOCAL_SCHEMES = ("file", "data", "blob", "about", "javascript", "chrome", "chrome-extension", "devtools")
INSTALL_HINT = ("run `make test` (or `make browser`), which installs Debian's chromium and chromium-driver "
                "with apt-get when /usr/bin/chromium or /usr/bin/chromedriver is missing")


class BrowserUnavailable(RuntimeError):
    """Chromium, chromedriver or selenium is missing or does not start."""


@dataclass(frozen=True)
class Problem:
    page: str       # file name relative to the report directory, e.g. "01-tma-caching.html"
    check: str      # console | network | link | image | toc | contract | screenshot | load
    message: str

    def __str__(self):
        return f"{self.page}: [{self.check}] {self.message}"


def missing_browser() -> str | None:
    """None when chromium, chromedriver and selenium are there, else a message saying what to do."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) and os.access(p, os.X_OK))]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (requirements.txt)")
    if missing:
        return f"missing {', '.join(missing)}: {INSTALL_HINT}"
    return None


def _short(s: str, n: int = 120) -> str:
    s = str(s)
    if s.startswith("data:"):
        s = s.split(",", 1)[0] + ",…"
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------------------------- static HTML

class _Scan(HTMLParser):
    """ids/names of a page and the network URLs its markup references."""

    URL_ATTRS = {"script": ("src",), "link": ("href",), "img": ("src", "srcset"), "iframe": ("src",),
                 "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
                 "embed": ("src",), "object": ("data",), "input": ("src",)}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.external: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for attr in self.URL_ATTRS.get(tag, ()):
            v = (a.get(attr) or "").strip()
            for u in (v.split(",") if attr == "srcset" else [v]):
                u = u.strip().split(" ")[0]
                if _is_network(u):
                    self.external.append(f"<{tag} {attr}={_short(u)}>")
        if a.get("style"):
            self._css(a["style"], f"<{tag} style>")
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self._css(data, "<style>")

    def _css(self, css, where):
        for m in re.finditer(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:|wss?:)?//[^'")\s]+)""", css, re.I):
            self.external.append(f"{where} {_short(m.group(1))}")


def _is_network(url: str) -> bool:
    u = url.strip().lower()
    return u.startswith(("http:", "https:", "ws:", "wss:", "ftp:", "//"))


def scan_html(path: Path) -> _Scan:
    s = _Scan()
    s.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    s.close()
    return s


# ---------------------------------------------------------------------------------------- helpers

def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; ValueError if it is not a PNG."""
    head = Path(path).read_bytes()[:24]
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def _page_order(root: Path) -> list[Path]:
    pages = sorted(p for p in root.glob("*.html") if p.is_file())
    index = [p for p in pages if p.name == "index.html"]
    rest = [p for p in pages if p.name != "index.html"]
    try:
        names = json.loads((root / "build.json").read_text())["notebooks"]
        rank = {f"{n}.html": i for i, n in enumerate(names)}
        rest.sort(key=lambda p: (rank.get(p.name, len(rank)), p.name))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return index + rest


def _file_path(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    return Path(url2pathname(unquote(parts.path)))


def _start_driver(timeout: float):
    msg = missing_browser()
    if msg:
        raise BrowserUnavailable(msg)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in CHROME_ARGS:
        opts.add_argument(a)
    opts.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    opts.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    except WebDriverException as e:
        raise BrowserUnavailable(f"chromium did not start through {CHROMEDRIVER}: {str(e).strip()[:400]}; "
                                 f"{INSTALL_HINT}") from None
    driver.set_page_load_timeout(timeout)
    driver.set_script_timeout(timeout)
    driver.execute_cdp_cmd("Network.enable", {})
    try:
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": list(BLOCKED)})
    except WebDriverException:  # newer CDP: urlPatterns
        driver.execute_cdp_cmd("Network.setBlockedURLs",
                               {"urlPatterns": [{"urlPattern": u, "block": True} for u in BLOCKED]})
    return driver


_SETTLE_JS = """
const done = arguments[arguments.length - 1];
const imgs = Array.from(document.images);
imgs.forEach(i => { if (i.loading === 'lazy') i.loading = 'eager'; });
const waits = imgs.map(i => i.complete ? Promise.resolve() : i.decode().catch(() => {}));
const fonts = document.fonts ? document.fonts.ready : Promise.resolve();
Promise.race([Promise.all([...waits, fonts]), new Promise(r => setTimeout(r, 5000))])
  .then(() => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 150))));
"""

_FACTS_JS = """
const ids = new Set(Array.from(document.querySelectorAll('[id]')).map(e => e.id));
document.querySelectorAll('a[name]').forEach(a => ids.add(a.getAttribute('name')));
return {
  ids: Array.from(ids),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => ({
      raw: a.getAttribute('href'), abs: a.href, cls: a.className || '', text: (a.textContent || '').trim().slice(0, 60),
      inToc: !!a.closest('nav.gl-toc'), hasImg: !!a.querySelector('img')})),
  images: Array.from(document.images).map(i => ({
      src: i.currentSrc || i.getAttribute('src') || '', complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})),
  resources: performance.getEntriesByType('resource').map(r => r.name),
  tocs: document.querySelectorAll('nav.gl-toc').length,
  innerHeight: window.innerHeight,
};
"""

# arguments[0]: the target id; arguments[1]: 'prepare' | 'measure'
_TOC_JS = """
const el = document.getElementById(arguments[0]) || document.getElementsByName(arguments[0])[0];
if (!el) return null;
const se = document.scrollingElement || document.documentElement;
const maxY = Math.max(0, se.scrollHeight - window.innerHeight);
const r = el.getBoundingClientRect();
const absTop = r.top + window.scrollY;
if (arguments[1] === 'prepare') {
  // start where the target is out of view, so that the click has to scroll to it
  const y = absTop < window.innerHeight * 0.5 ? maxY : 0;
  se.style.scrollBehavior = 'auto'; window.scrollTo(0, y); se.style.scrollBehavior = '';
}
const margin = parseFloat(getComputedStyle(el).scrollMarginTop) || 0;
return {top: el.getBoundingClientRect().top, y: window.scrollY, maxY: maxY, absTop: absTop,
        vh: window.innerHeight, margin: margin, hash: location.hash, shown: el.getClientRects().length > 0};
"""


def _screenshot(driver, dest: Path) -> str | None:
    """Full-page PNG (height capped); None or an error message."""
    m = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = m.get("cssContentSize") or m.get("contentSize")
    w = max(1, int(size["width"]))
    h = max(1, min(int(size["height"]), MAX_SCREENSHOT_HEIGHT))
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "fromSurface": True,
        "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
    data = base64.b64decode(shot["data"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    try:
        pw, ph = png_size(dest)
    except ValueError as e:
        return str(e)
    if pw < 100 or ph < 100:
        return f"screenshot {dest.name} is only {pw}x{ph}"
    return None


def _severe(entries) -> list[str]:
    out = []
    for e in entries:
        if e.get("level") == "SEVERE":
            out.append(_short(f"{e.get('source', '')}: {e.get('message', '')}".strip(": "), 300))
    return out


def _network_requests(entries) -> list[str]:
    urls = []
    for e in entries:
        try:
            msg = json.loads(e["message"])["message"]
        except (KeyError, ValueError, TypeError):
            continue
        if msg.get("method") == "Network.requestWillBeSent":
            u = msg.get("params", {}).get("request", {}).get("url", "")
            if u and urlsplit(u).scheme.lower() not in LOCAL_SCHEMES:
                urls.append(u)
    return urls


# ---------------------------------------------------------------------------------------- the check

def check_site(reports_dir, screenshots_dir=None, *, pages=None, contract: bool = True,
               toc: bool = True, timeout: float = 60.0) -> list[Problem]:
    """Load every page of reports_dir in headless Chromium; the problems found (empty list: all good).

    pages: file names to check (default every top-level *.html, index first); contract: check the
    gl-card / gl-toc / back-link / gl-prev / gl-next page contract; screenshots_dir: where the
    full-page PNGs go. Raises BrowserUnavailable when chromium / chromedriver / selenium are missing.
    """
    root = Path(reports_dir).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"report directory {root} does not exist")
    order = _page_order(root)
    if pages is not None:
        want = [Path(p).name for p in pages]
        order = [root / n for n in want]
    if not order:
        return [Problem(str(root), "load", "no *.html pages")]
    shots = Path(screenshots_dir).resolve() if screenshots_dir else None
    problems: list[Problem] = []
    facts: dict[Path, dict] = {}

    driver = _start_driver(timeout)
    try:
        for page in order:
            name = page.name
            if not page.is_file():
                problems.append(Problem(name, "load", "page does not exist"))
                continue
            for ext in scan_html(page).external:
                problems.append(Problem(name, "network", f"markup references the network: {ext}"))
            driver.get_log("browser"), driver.get_log("performance")  # drop what came before
            try:
                driver.get(page.as_uri())
                driver.execute_async_script(_SETTLE_JS)
            except Exception as e:  # noqa: BLE001 - a page that does not load is a problem, not a crash
                problems.append(Problem(name, "load", f"did not load: {str(e).strip().splitlines()[0][:300]}"))
                continue
            f = driver.execute_script(_FACTS_JS)
            facts[page] = f

            if shots is not None:
                driver.execute_script("window.scrollTo(0, 0)")
                try:
                    err = _screenshot(driver, shots / f"{page.stem}.png")
                except Exception as e:  # noqa: BLE001
                    err = f"screenshot failed: {str(e).strip()[:300]}"
                if err:
                    problems.append(Problem(name, "screenshot", err))

            for img in f["images"]:
                if not img["complete"] or not img["w"]:
                    problems.append(Problem(name, "image", f"broken image (naturalWidth 0): {_short(img['src'])}"))

            if toc and name != "index.html":
                problems += _check_toc(driver, name, f)

            net = _network_requests(driver.get_log("performance"))
            net += [u for u in f["resources"] if urlsplit(u).scheme.lower() not in LOCAL_SCHEMES]
            for u in dict.fromkeys(net):
                problems.append(Problem(name, "network", f"request to a network host: {_short(u)}"))
            for msg in _severe(driver.get_log("browser")):
                problems.append(Problem(name, "console", msg))
    finally:
        driver.quit()

    problems += _check_links(root, facts)
    if contract:
        problems += _check_contract(order, facts)
    return problems


def _check_toc(driver, name: str, f: dict) -> list[Problem]:
    from selenium.webdriver.common.by import By
    out = []
    if not f["tocs"]:
        return [Problem(name, "toc", 'no <nav class="gl-toc">')]
    entries = [l for l in f["links"] if l["inToc"]]
    anchors = [l for l in entries if (l["raw"] or "").startswith("#") and len(l["raw"]) > 1]
    if not anchors:
        return [Problem(name, "toc", 'the <nav class="gl-toc"> has no <a href="#ID"> entries')]
    ids = set(f["ids"])
    elements = driver.find_elements(By.CSS_SELECTOR, "nav.gl-toc a[href]")
    by_href = {}
    for el in elements:
        by_href.setdefault(el.get_dom_attribute("href"), el)
    for l in anchors:
        target = l["raw"][1:]
        tid = target if target in ids else unquote(target)
        if tid not in ids:
            out.append(Problem(name, "toc", f"entry {l['raw']!r} ({l['text']!r}): no element with that id"))
            continue
        el = by_href.get(l["raw"])
        if el is None:
            continue
        try:
            before = driver.execute_script(_TOC_JS, tid, "prepare")
            el.click()
            after = None
            deadline = time.monotonic() + 2.0
            while True:  # smooth scrolling takes a moment
                after = driver.execute_script(_TOC_JS, tid, "measure")
                if _in_view(after) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        except Exception as e:  # noqa: BLE001 - not clickable (hidden, covered) is a problem
            out.append(Problem(name, "toc", f"entry {l['raw']!r} ({l['text']!r}) cannot be clicked: "
                                            f"{str(e).strip().splitlines()[0][:200]}"))
            continue
        if not after["shown"]:
            out.append(Problem(name, "toc", f"entry {l['raw']!r} ({l['text']!r}): its target is not displayed "
                                            f"(display: none, or inside something hidden)"))
        elif not _in_view(after):
            out.append(Problem(name, "toc", f"clicking entry {l['raw']!r} ({l['text']!r}) did not scroll its target "
                                            f"into view (target top {after['top']:.0f}px, scrollY "
                                            f"{before['y']:.0f} -> {after['y']:.0f})"))
    return out


def _in_view(m) -> bool:
    if not m or not m["shown"]:
        return False
    top, vh = m["top"], m["vh"]
    if top < -2 or top > vh - 20:
        return False
    near_top = top <= m["margin"] + 100
    at_bottom = m["y"] >= m["maxY"] - 2  # the page cannot scroll further: the target is as high as it gets
    return near_top or at_bottom


def _check_links(root: Path, facts: dict) -> list[Problem]:
    out = []
    id_cache: dict[Path, set] = {p: set(f["ids"]) for p, f in facts.items()}
    for page, f in facts.items():
        name = page.name
        for l in f["links"]:
            raw = (l["raw"] or "").strip()
            label = f"<a href={_short(raw)!s}>" + (f" ({l['text']!r})" if l["text"] else "")
            if raw in ("", "#"):
                continue
            if _is_network(raw):
                out.append(Problem(name, "link", f"external link {label}: these pages are offline"))
                continue
            scheme = urlsplit(l["abs"]).scheme.lower()
            if scheme in ("mailto", "javascript", "data", "blob", "about"):
                continue
            target = _file_path(l["abs"])
            if target is None:
                out.append(Problem(name, "link", f"link {label} is not a local file"))
                continue
            frag = urlsplit(l["abs"]).fragment
            target = target.resolve()
            if not target.exists():
                out.append(Problem(name, "link", f"broken link {label}: {target} does not exist"))
                continue
            if root not in target.parents and target != root:
                out.append(Problem(name, "link", f"link {label} leaves the report directory ({target})"))
                continue
            if frag:
                if target not in id_cache:
                    id_cache[target] = scan_html(target).ids if target.suffix in (".html", ".htm") else set()
                ids = id_cache[target]
                if frag not in ids and unquote(frag) not in ids:
                    where = "this page" if target == page else target.name
                    out.append(Problem(name, "link", f"broken anchor {label}: no id {unquote(frag)!r} on {where}"))
    return out


def _check_contract(order: list[Path], facts: dict) -> list[Problem]:
    out = []
    nb_pages = [p for p in order if p.name != "index.html"]
    idx = next((p for p in order if p.name == "index.html"), None)
    if idx is not None and idx in facts:
        cards = [l for l in facts[idx]["links"] if "gl-card" in l["cls"].split()]
        hrefs = {}
        for c in cards:
            hrefs.setdefault(urlsplit(c["raw"]).path, c)
        for p in nb_pages:
            c = hrefs.get(p.name)
            if c is None:
                out.append(Problem("index.html", "contract", f'no <a class="gl-card" href="{p.name}">'))
            elif not c["hasImg"]:
                out.append(Problem("index.html", "contract", f'the gl-card for {p.name} has no <img>'))
    for i, p in enumerate(nb_pages):
        if p not in facts:
            continue
        links = facts[p]["links"]
        if not any(urlsplit(l["raw"]).path == "index.html" for l in links):
            out.append(Problem(p.name, "contract", "no link back to index.html"))
        for cls, j in (("gl-prev", i - 1), ("gl-next", i + 1)):
            mine = [l for l in links if cls in l["cls"].split()]
            if 0 <= j < len(nb_pages):
                want = nb_pages[j].name
                if not mine:
                    out.append(Problem(p.name, "contract", f'no <a class="{cls}" href="{want}">'))
                elif not any(urlsplit(l["raw"]).path == want for l in mine):
                    got = ", ".join(repr(l["raw"]) for l in mine)
                    out.append(Problem(p.name, "contract", f"<a class=\"{cls}\"> points to {got}, not {want!r}"))
    return out


# ---------------------------------------------------------------------------------------- CLI

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gluon_lab_old.browser",
                                 description="Check a built report directory in headless Chromium.")
    ap.add_argument("reports_dir", help="the report directory (index.html and NN-name.html pages)")
    ap.add_argument("--screenshots", metavar="DIR", help="write a full-page <page-stem>.png of every page here")
    ap.add_argument("--no-contract", action="store_true",
                    help="skip the gl-card / back-link / gl-prev / gl-next contract checks")
    ap.add_argument("--timeout", type=float, default=60.0, help="page-load timeout in seconds (default 60)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        problems = check_site(args.reports_dir, args.screenshots, contract=not args.no_contract,
                              timeout=args.timeout)
    except BrowserUnavailable as e:
        print(f"browser check not run: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    n = len(_page_order(Path(args.reports_dir)))
    print(f"{n} page(s) checked in {time.monotonic() - t0:.1f}s: "
          f"{len(problems) if problems else 'no'} problem(s)"
          + (f"; screenshots in {args.screenshots}" if args.screenshots else ""), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
