"""The built report in a real browser (headless Chromium through Selenium, gluon_lab/browser.py).

A replay build of every notebook is loaded page by page: no console errors, no broken links or
anchors, no broken images, a working table of contents, no request to any network host, and a
full-page screenshot of every page (reports/screenshots/ of the build; copied to
$GLUON_LAB_SCREENSHOTS when that is set). The small tests below prove on hand-written pages that
each check can fail.

Chromium and chromedriver come from Debian (`make test` installs them); without them these tests
FAIL, unless GLUON_LAB_NO_BROWSER=1 says to skip them.
"""
import os
import shutil
import time
from pathlib import Path

import pytest

from gluon_lab import browser


def require_browser():
    if os.environ.get("GLUON_LAB_NO_BROWSER") == "1":
        pytest.skip("GLUON_LAB_NO_BROWSER=1: the browser tests are switched off")
    msg = browser.missing_browser()
    if msg:
        pytest.fail(f"the browser tests need headless Chromium: {msg}", pytrace=False)


# ------------------------------------------------------------------------------------ the real build

class _Site:
    """The replay build and its browser check, made once per module on first use (inside a test, so
    that a missing browser or a failing build is a test failure, not a fixture error)."""

    def __init__(self, replay_site):
        self.replay_site = replay_site
        self.result = None

    def get(self):
        if self.result is None:
            out = self.replay_site.get()  # the session's replay build (tests/conftest.py)
            t1 = time.monotonic()
            shots = out / "screenshots"
            problems = browser.check_site(out, screenshots_dir=shots)
            t2 = time.monotonic()
            dest = os.environ.get("GLUON_LAB_SCREENSHOTS")
            if dest:
                Path(dest).mkdir(parents=True, exist_ok=True)
                for png in shots.glob("*.png"):
                    shutil.copy2(png, Path(dest) / png.name)
            print(f"\nreplay build {self.replay_site.seconds or 0:.0f}s, browser check {t2 - t1:.0f}s, screenshots in {shots}"
                  + (f" and {dest}" if dest else ""))
            self.result = (out, shots, problems)
        return self.result


@pytest.fixture(scope="module")
def site(replay_site):
    return _Site(replay_site)


@pytest.mark.slow
def test_report_pages_pass_the_browser_check(site):
    require_browser()
    out, _, problems = site.get()
    pages = sorted(p.name for p in out.glob("*.html"))
    assert len(pages) >= 6, pages  # index + the five notebooks
    assert not problems, f"{len(problems)} problem(s) in {out}:\n" + "\n".join(map(str, problems))


@pytest.mark.slow
def test_every_page_has_a_full_page_screenshot(site):
    require_browser()
    out, shots, _ = site.get()
    for page in sorted(out.glob("*.html")):
        png = shots / f"{page.stem}.png"
        assert png.is_file(), f"no screenshot {png}"
        assert png.stat().st_size > 10_000, f"{png} is only {png.stat().st_size} bytes"
        w, h = browser.png_size(png)
        assert w >= browser.WINDOW[0] // 2 and h >= 300, f"{png} is {w}x{h}"
        assert h <= browser.MAX_SCREENSHOT_HEIGHT


# ------------------------------------------------------------------------------------ the checks fail

STYLE = """<style>body{margin:0;font-family:sans-serif} nav.gl-toc{position:fixed;top:0;left:0;width:180px}
main{margin-left:200px} section{min-height:1400px;border-top:1px solid #ccc}</style>"""
PNG_1PX = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
           "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def page(title, body, toc=True, prev=None, nxt=None, head=""):
    nav = ('<nav class="gl-toc"><a href="index.html">index</a> <a href="#intro">intro</a> '
           '<a href="#results">results</a> <a href="#end">end</a></nav>') if toc else ""
    pn = (f'<a class="gl-prev" href="{prev}">prev</a>' if prev else "") + \
         (f'<a class="gl-next" href="{nxt}">next</a>' if nxt else "")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>{STYLE}{head}</head>"
            f"<body>{nav}<main><h1 id='intro'>{title}</h1>{body}<section id='results'><h2>results</h2>"
            f"<img src='{PNG_1PX}' width='40' height='40'></section><section id='end'><h2>end</h2>{pn}</section>"
            f"</main></body></html>")


def good_site(d: Path, a_body="", b_body="", **a_kw):
    d.mkdir(parents=True, exist_ok=True)
    (d / "index.html").write_text(
        "<!DOCTYPE html><html><body><h1>reports</h1>"
        f"<a class='gl-card' href='00-a.html'><img src='{PNG_1PX}' width='80' height='60'> 00 a 1.23</a>"
        f"<a class='gl-card' href='01-b.html'><img src='{PNG_1PX}' width='80' height='60'> 01 b 4.56</a>"
        "</body></html>")
    kw = dict(nxt="01-b.html")
    kw.update(a_kw)
    (d / "00-a.html").write_text(page("a", a_body, **kw))
    (d / "01-b.html").write_text(page("b", b_body, prev="00-a.html"))
    return d


def checks(problems, page=None):
    return sorted({p.check for p in problems if page is None or p.page == page})


def test_a_good_site_passes_and_is_screenshotted(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site")
    shots = tmp_path / "shots"
    problems = browser.check_site(d, screenshots_dir=shots)
    assert problems == [], "\n".join(map(str, problems))
    for stem in ("index", "00-a", "01-b"):
        w, h = browser.png_size(shots / f"{stem}.png")
        assert w == browser.WINDOW[0] and h >= 300
    w, h = browser.png_size(shots / "00-a.png")
    assert h > 2 * 1400, "the screenshot is the full page, not the viewport"


def test_broken_anchor_link_and_toc_entry_are_problems(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site", a_body='<a href="#nowhere">x</a> <a href="01-b.html#missing">y</a> '
                                            '<a href="02-gone.html">z</a>')
    html = (d / "01-b.html").read_text().replace('<a href="#end">end</a>', '<a href="#ghost">ghost</a>')
    (d / "01-b.html").write_text(html)
    problems = browser.check_site(d)
    text = "\n".join(map(str, problems))
    assert "00-a.html: [link] broken anchor <a href=#nowhere>" in text
    assert "no id 'missing' on 01-b.html" in text
    assert "02-gone.html does not exist" in text
    assert "01-b.html: [toc] entry '#ghost'" in text and "no element with that id" in text


def test_broken_image_is_a_problem(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site", a_body='<img src="missing.png" alt="gone">')
    problems = browser.check_site(d)
    assert "image" in checks(problems, "00-a.html")
    assert any(p.check == "image" and "missing.png" in p.message for p in problems)
    assert any(p.check == "console" and "ERR_FILE_NOT_FOUND" in p.message for p in problems)
    assert checks(problems, "01-b.html") == []


def test_console_errors_and_uncaught_exceptions_are_problems(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site", a_body="<script>console.error('boom-console');"
                                            "setTimeout(() => { throw new Error('boom-throw'); }, 0);"
                                            "Promise.reject(new Error('boom-reject'));</script>")
    problems = [p for p in browser.check_site(d) if p.check == "console"]
    msgs = "\n".join(p.message for p in problems)
    assert "boom-console" in msgs and "Uncaught Error: boom-throw" in msgs and "boom-reject" in msgs
    assert {p.page for p in problems} == {"00-a.html"}


def test_network_requests_and_external_urls_are_problems(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site",
                  head='<script src="https://cdn.example.invalid/lib.js"></script>'
                       '<link rel="stylesheet" href="//cdn.example.invalid/x.css">',
                  a_body='<a href="https://example.com/">outside</a>'
                         "<script>fetch('http://example.invalid/data.json').catch(() => {});</script>")
    problems = browser.check_site(d)
    text = "\n".join(map(str, problems))
    assert "[network] markup references the network: <script src=https://cdn.example.invalid/lib.js>" in text
    assert "<link href=//cdn.example.invalid/x.css>" in text
    assert "[network] request to a network host: https://cdn.example.invalid/lib.js" in text
    assert "request to a network host: http://example.invalid/data.json" in text
    assert "[link] external link <a href=https://example.com/>" in text
    assert checks(problems, "01-b.html") == []


def test_toc_that_does_not_scroll_and_missing_toc_are_problems(tmp_path):
    require_browser()
    stop = "<script>document.querySelectorAll('nav.gl-toc a').forEach(a => " \
           "a.addEventListener('click', e => e.preventDefault()));</script>"
    d = good_site(tmp_path / "site", a_body=stop)
    (d / "01-b.html").write_text(page("b", "", toc=False, prev="00-a.html"))
    problems = browser.check_site(d)
    text = "\n".join(map(str, problems))
    assert "00-a.html: [toc] clicking entry '#results'" in text and "did not scroll its target into view" in text
    assert '01-b.html: [toc] no <nav class="gl-toc">' in text


def test_toc_entry_to_a_hidden_target_is_a_problem(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site", a_body="<style>#results{display:none}</style>")
    problems = [str(p) for p in browser.check_site(d) if p.check == "toc"]
    assert problems == ["00-a.html: [toc] entry '#results' ('results'): its target is not displayed "
                        "(display: none, or inside something hidden)"], problems


def test_page_contract_is_checked(tmp_path):
    require_browser()
    d = good_site(tmp_path / "site", nxt="index.html")
    idx = (d / "index.html").read_text().replace("class='gl-card' href='01-b.html'", "href='01-b.html'")
    (d / "index.html").write_text(idx)
    html = (d / "01-b.html").read_text().replace('<a href="index.html">index</a>', "")
    (d / "01-b.html").write_text(html)
    problems = [str(p) for p in browser.check_site(d) if p.check == "contract"]
    assert problems == ['index.html: [contract] no <a class="gl-card" href="01-b.html">',
                        "00-a.html: [contract] <a class=\"gl-next\"> points to 'index.html', not '01-b.html'",
                        "01-b.html: [contract] no link back to index.html"], problems


def test_cli_prints_one_line_per_problem(tmp_path, capsys):
    require_browser()
    good = good_site(tmp_path / "good")
    assert browser.main([str(good), "--screenshots", str(tmp_path / "shots")]) == 0
    assert capsys.readouterr().out == ""
    assert (tmp_path / "shots" / "index.png").is_file()
    bad = good_site(tmp_path / "bad", a_body='<img src="nope.png">')
    assert browser.main([str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(l.startswith(("00-a.html: [", "01-b.html: [", "index.html: [")) for l in lines)
    assert any("[image] broken image" in l and "nope.png" in l for l in lines)


# ------------------------------------------------------------------------------------ no browser needed

def test_missing_browser_says_to_run_make_test(tmp_path, monkeypatch):
    monkeypatch.setattr(browser, "CHROMIUM", str(tmp_path / "no-chromium"))
    msg = browser.missing_browser()
    assert msg and "no-chromium" in msg and "make test" in msg
    with pytest.raises(browser.BrowserUnavailable, match="make test"):
        browser.check_site(good_site(tmp_path / "site"))
    assert browser.main([str(tmp_path / "site")]) == 2


def test_markup_scan_finds_network_urls(tmp_path):
    p = tmp_path / "x.html"
    p.write_text('<html><head><script src="https://a/x.js"></script><script src="local.js"></script>'
                 '<link rel="stylesheet" href="http://b/y.css"><style>@import "https://c/z.css"; '
                 'body{background:url(//d/bg.png)}</style></head><body id="top"><a name="n"></a>'
                 '<img srcset="small.png 1x, https://e/big.png 2x"></body></html>')
    s = browser.scan_html(p)
    assert s.ids == {"top", "n"}
    joined = " ".join(s.external)
    for host in ("https://a/x.js", "http://b/y.css", "https://c/z.css", "//d/bg.png", "https://e/big.png"):
        assert host in joined, (host, s.external)
    assert "local.js" not in joined and "small.png" not in joined


def test_png_size_reads_the_header(tmp_path):
    import base64
    p = tmp_path / "one.png"
    p.write_bytes(base64.b64decode(PNG_1PX.split(",", 1)[1]))
    assert browser.png_size(p) == (1, 1)
    (tmp_path / "not.png").write_bytes(b"GIF89a" + b"\0" * 30)
    with pytest.raises(ValueError):
        browser.png_size(tmp_path / "not.png")
