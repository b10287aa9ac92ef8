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
    idx = index.read_text()
    assert 'href="98-fixture.html"' in idx and "data:image/png;base64," in idx
    row = re.search(r"<tr><td><a href=\"98-fixture.html\">.*?</tr>", idx, re.S).group(0)
    assert "NVIDIA H200" in row and "2026-11-01" in row
    assert re.search(r'<span class="stale">1</span>', row)  # one record's kernel source changed
    assert (out / "executed" / "98-fixture.ipynb").exists()


def test_failing_cell_names_notebook_and_cell(tmp_path):
    with pytest.raises(report.ReportBuildError) as e:
        report.build(["99-broken"], out_dir=tmp_path / "site", mode="replay", results_dir=tmp_path,
                     notebooks_dir=FIX / "broken")
    msg = str(e.value)
    assert "99-broken.ipynb" in msg and "cell 4" in msg and "RuntimeError: boom in fixture" in msg


def test_over_100_percent_of_datasheet_fails_the_build(tmp_path):
    res = tmp_path / "results"
    fixture_records(res, over_100=True)
    with pytest.raises(plots.PhysicsError, match="exceed 100% of the datasheet"):
        report.build(["98-fixture"], out_dir=tmp_path / "site", mode="replay", results_dir=res,
                     notebooks_dir=FIX / "notebooks")


@pytest.mark.slow
def test_ceilings_notebook_renders_from_committed_records(tmp_path):
    """What `make report` does for 00-ceilings, from results/ as committed."""
    index = report.build(["00-ceilings"], out_dir=tmp_path / "site", mode="replay")
    page = (tmp_path / "site" / "00-ceilings.html").read_text()
    assert "No records for" not in page, "results/h200/00-ceilings.jsonl is missing"
    assert page.count("data:image/png;base64,") >= 3
    assert "Copy ceiling" in page and "Fastest baseline per cell" in page
    assert "00-ceilings" in index.read_text()


# notebook -> (text that must not appear, min number of plots, texts that must appear)
PATTERN_PAGES = {
    "01-tma-caching": (("No records for", "missing</td>"), 6,
                       ("inductor -&gt; gluon-tma", "Targets (issue #3)", "global reads of the reused row", "UTMALDG")),
    "02-chunked-reductions": (("No records for", "missing</strong>"), 5,
                              ("Targets (issue #4)", "torch.compile -&gt; gluon-chunked", "gluon vs eager", "stream S=4")),
    "03-multibuffer-pipelining": (("<strong>No records for", "Traceback"), 6,
                                  ("Targets (issue #5)", "MEASURED with", "%globaltimer", "HGMMA", "UTMALDG",
                                   "gluon-pipelined / cuBLAS", "NUM_STAGES study", "pipe-sweep", "GEMM targets",
                                   "compute-sanitizer", "Every CTA traced", "Takeaways")),
    "04-warp-specialization": (("<strong>No records for", "Traceback"), 7,
                               ("MEASURED with", "%globaltimer", "run-ahead", "tail: max / median - 1 (%)",
                                "setmaxnreg consumer", "HGMMA", "UTMALDG", "gluon-ws / gluon-pipelined",
                                "met: &gt;= 0.98x gluon-pipelined", "norm-sweep", "STALE", "gluon-ws / cuBLAS", "moonshot",
                                "ws-sweep", "does not fit", "ping-pong", "compute-sanitizer", "LDS.U8", "Unresolved",
                                "Takeaways")),
}


@pytest.mark.slow
@pytest.mark.parametrize("nb", sorted(PATTERN_PAGES))
def test_pattern_notebook_renders_from_committed_records(tmp_path, nb):
    """Each pattern page, rendered in replay mode from results/ as committed: no missing data, its
    plots, and the sections the issues ask for."""
    forbidden, min_plots, texts = PATTERN_PAGES[nb]
    report.build([nb], out_dir=tmp_path / "site", mode="replay")
    page = (tmp_path / "site" / f"{nb}.html").read_text()
    for text in forbidden:
        assert text not in page, text
    assert page.count("data:image/png;base64,") >= min_plots
    for text in texts:
        assert text in page, text
