"""The report pipeline end to end on CPU: papermill executes notebooks in replay mode, nbconvert
renders them, the index lists them; a failing cell fails the build naming notebook and cell."""
import re
import shutil
from pathlib import Path

import pytest

from gluon_lab import plots, registry, report
from gluon_lab.results import Record, append_records

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def fixture_records(results_dir: Path, stale_one=True, over_100=False):
    """Synthetic records (labelled as such) with current source hashes, one deliberately stale."""
    recs = []
    for v in ("torch", "triton"):
        for M in (1024, 2048):
            for N in (1024, 1536):
                sol = 40.0 + (M // 1024) * 5 + N // 512 + (10 if v == "triton" else 0)
                if over_100 and v == "triton" and M == 2048:
                    sol = 104.0
                nbytes = 2 * M * N * 2 + N * 2
                ms = nbytes / (sol / 100 * 4800e9) * 1e3
                h = registry.current_hash("rms_norm", v)
                if stale_one and v == "torch" and M == 2048 and N == 1536:
                    h = "0000stale0000000"
                recs.append(Record(op="rms_norm", variant=v, pattern="baseline", shape={"M": M, "N": N},
                                   dtype="bfloat16", ms_median=ms, ms_min=ms * .99, ms_max=ms * 1.02, n_reps=20,
                                   timer="cudagraph", bytes=nbytes, flops=4 * M * N, gbps=sol * 48,
                                   sol_datasheet_pct=sol, passed=True, gpu_name="NVIDIA H200", kernel_source_hash=h,
                                   run_id="fixture", timestamp="2026-11-01T00:00:00+00:00",
                                   notes="synthetic fixture for the report test, not a measurement"))
    append_records(results_dir / "h200" / "98-fixture.jsonl", recs)


def test_site_builds_in_replay_mode(tmp_path):
    res = tmp_path / "results"
    fixture_records(res)
    out = tmp_path / "site"
    index = report.build(["98-fixture"], out_dir=out, mode="replay", results_dir=res,
                         notebooks_dir=FIX / "notebooks")
    page = (out / "98-fixture.html").read_text()
    assert "FIXTURE-MARKER 63.0" in page  # the notebook really ran on these records
    assert "data:image/png;base64," in page  # figures embedded
    assert '<details class="gl-code"' in page  # code collapsible
    assert re.search(r'<section[^>]*class="gl-headline"', page)  # the headline block, at the top
    assert page.index('id="at-a-glance"') < page.index("FIXTURE-MARKER")
    toc = re.search(r'<nav[^>]*class="gl-toc".*?</nav>', page, re.S).group(0)
    anchors = re.findall(r'href="#([^"]+)"', toc)
    assert anchors and all(f'id="{a}"' in page for a in anchors)  # every TOC entry has its target
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page)  # nothing from a CDN
    idx = index.read_text()
    card = re.search(r'<a class="gl-card" href="98-fixture.html">.*?</a>', idx, re.S).group(0)
    assert "NVIDIA H200" in card and "2026-11-01" in card
    assert "1 of 8 cases stale" in card  # one record's kernel source changed
    assert '<img src="img/98-fixture-headline.png"' in card and (out / "img" / "98-fixture-headline.png").stat().st_size > 1000
    assert (out / "executed" / "98-fixture.ipynb").exists()


def _second_fixture_notebook(tmp_path) -> Path:
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    shutil.copy(FIX / "notebooks" / "98-fixture.ipynb", nbdir / "98-fixture.ipynb")
    text = (FIX / "notebooks" / "98-fixture.ipynb").read_text().replace("98-fixture", "97-fixture") \
        .replace("98 — fixture notebook", "97 — second fixture")
    (nbdir / "97-fixture.ipynb").write_text(text)
    return nbdir


def test_subset_build_keeps_the_other_pages_and_links_neighbours(tmp_path):
    res = tmp_path / "results"
    fixture_records(res)
    shutil.copy(res / "h200" / "98-fixture.jsonl", res / "h200" / "97-fixture.jsonl")
    nbdir, out = _second_fixture_notebook(tmp_path), tmp_path / "site"
    report.build(["98-fixture"], out_dir=out, mode="replay", results_dir=res, notebooks_dir=nbdir)
    assert 'class="gl-prev"' not in (out / "98-fixture.html").read_text()  # alone: no neighbour
    first = (out / "executed" / "98-fixture.ipynb").stat().st_mtime_ns
    report.build(["97-fixture"], out_dir=out, mode="replay", results_dir=res, notebooks_dir=nbdir)
    idx = (out / "index.html").read_text()
    assert 'href="97-fixture.html"' in idx and 'href="98-fixture.html"' in idx  # both cards survive
    assert (out / "executed" / "98-fixture.ipynb").stat().st_mtime_ns == first  # kept, not re-executed
    page97, page98 = (out / "97-fixture.html").read_text(), (out / "98-fixture.html").read_text()
    assert '<a class="gl-next" href="98-fixture.html">' in page97 and 'class="gl-prev"' not in page97
    assert '<a class="gl-prev" href="97-fixture.html">' in page98  # the kept page is relinked
    # a full build keeps nothing that is not built: a notebook removed from the folder loses its page
    (nbdir / "97-fixture.ipynb").unlink()
    report.build(None, out_dir=out, mode="replay", results_dir=res, notebooks_dir=nbdir)
    assert not (out / "97-fixture.html").exists() and 'href="97-fixture.html"' not in (out / "index.html").read_text()
    assert oct((out).stat().st_mode & 0o777) == "0o755"


def test_out_dir_that_is_not_a_site_is_refused(tmp_path):
    res = tmp_path / "results"
    fixture_records(res)
    own = tmp_path / "mine"
    own.mkdir()
    (own / "precious.txt").write_text("keep me")
    with pytest.raises(report.ReportBuildError, match="not a site built by gluon-lab"):
        report.build(["98-fixture"], out_dir=own, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks")
    assert (own / "precious.txt").read_text() == "keep me"
    with pytest.raises(report.ReportBuildError, match="holds the repository"):
        report.build(["98-fixture"], out_dir=ROOT, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks")
    with pytest.raises(report.ReportBuildError, match="holds the records folder"):
        report.build(["98-fixture"], out_dir=tmp_path, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks")


def test_failed_build_leaves_the_site_as_it_was(tmp_path):
    res = tmp_path / "results"
    fixture_records(res)
    out = tmp_path / "site"
    report.build(["98-fixture"], out_dir=out, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    (res / "h200" / "98-fixture.jsonl").unlink()  # a deleted results file
    with pytest.raises(report.ReportBuildError, match=r"98-fixture.ipynb: the page lacks what it must show: no records"):
        report.build(["98-fixture"], out_dir=out, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks")
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before  # index and page untouched
    assert (tmp_path / "site.failed" / "executed" / "98-fixture.ipynb").exists()
    assert not list(tmp_path.glob(".site.build-*"))  # no half-built staging folder left behind


def test_partial_build_publishes_a_page_marked_partial(tmp_path):
    res = tmp_path / "results"
    (res / "h200").mkdir(parents=True)
    out = tmp_path / "site"
    report.build(["98-fixture"], out_dir=out, mode="replay", results_dir=res, notebooks_dir=FIX / "notebooks",
                 partial=True)
    page, idx = (out / "98-fixture.html").read_text(), (out / "index.html").read_text()
    assert "PARTIAL page: no records" in page and 'class="gl-partial"' in page
    assert '<span class="partial">PARTIAL</span>' in idx


def test_cli_report_failure_exits_nonzero_with_the_reason(tmp_path, capsys):
    from gluon_lab.__main__ import main
    (tmp_path / "results" / "h200").mkdir(parents=True)
    rc = main(["report", "--mode", "replay", "--out", str(tmp_path / "site"), "--results-dir",
               str(tmp_path / "results"), str(FIX / "notebooks" / "98-fixture.ipynb")])
    assert rc == 1
    assert "no records" in capsys.readouterr().err


def test_headline_numbers_are_read_from_the_executed_notebook():
    import nbformat
    from gluon_lab.analysis import common as cm
    bundle = cm.headline([("gluon-tma vs best peer", "0.97x geomean"), ("best SOL", "missing: no grid")])._repr_mimebundle_()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("", metadata={"tags": ["headline-numbers"]},
                                          outputs=[nbformat.v4.new_output("display_data", data=bundle)])]
    nums = report.headline_numbers(nb)
    assert nums == [{"label": "gluon-tma vs best peer", "value": "0.97x geomean"},
                    {"label": "best SOL", "value": "missing: no grid"}]
    miss = report.missing_parts(nb, {"n": 3})
    assert any("best SOL" in m for m in miss) and any("headline figure" in m for m in miss)


def test_failing_cell_names_notebook_and_cell(tmp_path):
    with pytest.raises(report.ReportBuildError) as e:
        report.build(["99-broken"], out_dir=tmp_path / "site", mode="replay", results_dir=tmp_path,
                     notebooks_dir=FIX / "broken")
    msg = str(e.value)
    assert "99-broken.ipynb" in msg and "cell 4" in msg and "RuntimeError: boom in fixture" in msg


def test_over_100_percent_of_datasheet_fails_the_build(tmp_path):
    res = tmp_path / "results"
    fixture_records(res, over_100=True)
    with pytest.raises((report.ReportBuildError, plots.PhysicsError), match=r"98-fixture.jsonl:\d+: .*104.0% of the NVIDIA H200 datasheet"):
        report.build(["98-fixture"], out_dir=tmp_path / "site", mode="replay", results_dir=res,
                     notebooks_dir=FIX / "notebooks")


@pytest.mark.slow
def test_ceilings_notebook_renders_from_committed_records(replay_site):
    """What `make report` does for 00-ceilings, from results/ as committed."""
    index = replay_site.get() / "index.html"
    page = (replay_site.get() / "00-ceilings.html").read_text()
    assert "No records for" not in page, "results/h200/00-ceilings.jsonl is missing"
    assert page.count("data:image/png;base64,") >= 3
    assert "Copy ceiling" in page and "Fastest baseline per cell" in page
    assert "00-ceilings" in index.read_text()


# notebook -> (text that must not appear, min number of plots, texts that must appear)
PATTERN_PAGES = {
    "01-tma-caching": (("No records for", "missing</td>"), 6,
                       ("inductor -&gt; gluon-tma", "Targets, checked against the records above", "At a glance", "global reads of the reused row", "UTMALDG")),
    "02-chunked-reductions": (("No records for", "missing</strong>"), 5,
                              ("Targets, checked against the records above", "At a glance", "torch.compile -&gt; gluon-chunked", "gluon vs eager", "stream S=4")),
    "03-multibuffer-pipelining": (("<strong>No records for", "Traceback"), 6,
                                  ("Targets, cell by cell", "At a glance", "MEASURED with", "%globaltimer", "HGMMA", "UTMALDG",
                                   "gluon-pipelined / cuBLAS", "NUM_STAGES study", "pipe-sweep", "GEMM targets",
                                   "compute-sanitizer", "Every CTA traced", "Takeaways")),
    "04-warp-specialization": (("<strong>No records for", "Traceback"), 7,
                               ("MEASURED with", "%globaltimer", "run-ahead", "tail: max / median - 1 (%)",
                                "setmaxnreg consumer", "HGMMA", "UTMALDG", "gluon-ws / gluon-pipelined",
                                "within 2% of gluon-pipelined", "At a glance", "norm-sweep", "STALE", "gluon-ws / cuBLAS", "moonshot",
                                "ws-sweep", "does not fit", "ping-pong", "compute-sanitizer", "LDS.U8", "racecheck false positive",
                                "Takeaways")),
}


@pytest.mark.slow
@pytest.mark.parametrize("nb", sorted(PATTERN_PAGES))
def test_pattern_notebook_renders_from_committed_records(replay_site, nb):
    """Each pattern page, rendered in replay mode from results/ as committed (the session's replay
    build of every notebook): no missing data, its plots, and the sections the issues ask for."""
    forbidden, min_plots, texts = PATTERN_PAGES[nb]
    page = (replay_site.get() / f"{nb}.html").read_text()
    for text in forbidden:
        assert text not in page, text
    assert page.count("data:image/png;base64,") >= min_plots
    for text in texts:
        assert text in page, text
    assert "issue #" not in page  # targets are described in words, not by issue number
    assert not re.search(r"<td[^>]*>\s*(NaN|nan|&lt;NA&gt;|None)\s*</td>", page)  # a reason, never NaN


def test_index_counts_the_stale_cases_a_reader_sees():
    """Each study's newest run (with refreshed cells composed in) is what the pages show: a stale case of an
    older run of the study is history (retired), a stale case in the shown run is counted."""
    import pandas as pd
    rows = [  # (variant, config, M, run, timestamp, stale)
        ("gluon-tma", '{"study": "sweep", "num_warps": 4}', 4096, "a", "2026-11-01", True),   # older run of the study
        ("gluon-tma", '{"study": "sweep", "num_warps": 8}', 4096, "b", "2026-12-01", False),  # the study's newest run
        ("inductor", "{}", 4096, "g", "2026-11-01", True),                                     # the grid: shown, stale
        ("torch", "{}", 4096, "g", "2026-11-01", False),
        ("torch", "{}", 8192, "g", "2026-11-01", True),   # stale in the grid run ...
        ("inductor", "{}", 8192, "g", "2026-11-01", False),
        ("torch", "{}", 8192, "r", "2026-12-02", False),  # ... and re-measured whole by a refresh: the page shows r
        ("inductor", "{}", 8192, "r", "2026-12-02", False),
    ]
    df = pd.DataFrame([{"op": "rms_norm", "variant": v, "dtype": "bfloat16", "config_key": c, "M": m, "N": 4096,
                        "K": pd.NA, "run_id": r, "timestamp": t, "stale": s, "timer": "cudagraph", "pattern": "x",
                        "source": "f", "line": i} for i, (v, c, m, r, t, s) in enumerate(rows)])
    shown, stale, retired = report.shown_cases(df)
    assert (shown, stale, retired) == (5, 1, 1)
