"""Run comparison (gluon_lab.compare, `python -m gluon_lab compare`, the notebooks' "Compare runs"
section) and `adopt` on synthetic records with known ratios."""
import math

import pytest

from gluon_lab import compare, notebook, registry
from gluon_lab.__main__ import main
from gluon_lab.results import Record, append_records


def _recs(run, ts, factor, hash_of=None, fail=(), only=None, Ns=(1024, 1536, 5000)):
    out = []
    for v in ("torch", "triton"):
        for N in Ns:
            if only and (v, N) not in only:
                continue
            nbytes = 2 * 4096 * N * 2 + N * 2
            ms = nbytes / (0.5 * 4800e9) * 1e3 * (factor.get(v, 1.0) if isinstance(factor, dict) else factor)
            out.append(Record(op="rms_norm", variant=v, pattern="baseline", shape={"M": 4096, "N": N},
                              dtype="bfloat16", ms_median=ms, ms_min=ms, ms_max=ms, n_reps=50, timer="cudagraph",
                              bytes=nbytes, flops=4 * 4096 * N, passed=(v, N) not in fail, gpu_name="NVIDIA H200",
                              kernel_source_hash=(hash_of or {}).get(v) or registry.current_hash("rms_norm", v),
                              run_id=run, timestamp=ts, notes="synthetic test record"))
    return out


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "results" / "h200" / "97-compare.jsonl"
    append_records(path, _recs("20261101T000000Z-aaaaaaaa", "2026-11-01T00:00:00+00:00", 1.0))
    append_records(path, _recs("20261102T000000Z-bbbbbbbb", "2026-11-02T00:00:00+00:00", {"triton": 0.8},
                               hash_of={"triton": "0000changed00000"}, fail={("torch", 5000)}))
    append_records(path, _recs("20261103T000000Z-cccccccc", "2026-11-03T00:00:00+00:00", 1.0, only={("torch", 2048)}, Ns=(2048,)))
    return tmp_path / "results"


def test_compare_gives_per_case_ratios_and_names_changed_code_and_failures(store):
    df = notebook.load(store, "h200", "97-compare", newest_only=False)
    c = compare.compare(df, "20261101", "20261102")
    assert (c.run_a, c.run_b) == ("20261101T000000Z-aaaaaaaa", "20261102T000000Z-bbbbbbbb")
    assert len(c.cases) == 6 and c.only_a == 0 and c.only_b == 0
    tri = c.cases[c.cases.variant == "triton"]
    assert all(math.isclose(r, 0.8, rel_tol=1e-9) for r in tri["B/A time"])
    assert set(tri["code"]) == {"changed"}  # the hash differs: the kernel changed between the runs
    torch = c.cases[c.cases.variant == "torch"].set_index("shape")
    assert set(torch["code"]) == {"same"}
    assert math.isnan(torch.loc["M=4096 N=5000", "B/A time"]) and torch.loc["M=4096 N=5000", "note"] == "failed in B"
    s = c.summary.set_index("variant")
    assert math.isclose(s.loc["triton", "geomean B/A"], 0.8) and s.loc["torch", "failed"] == 1
    assert s.loc["torch", "timed"] == 2


def test_run_names_resolve_and_unknown_runs_list_the_runs(store):
    df = notebook.load(store, "h200", "97-compare", newest_only=False)
    assert compare.resolve_run(df, "newest") == "20261103T000000Z-cccccccc"
    assert compare.resolve_run(df, "20261102T") == "20261102T000000Z-bbbbbbbb"
    with pytest.raises(compare.RunNotFoundError, match="not found; runs .*20261101T000000Z-aaaaaaaa"):
        compare.resolve_run(df, "1999")
    with pytest.raises(compare.RunNotFoundError, match="ambiguous"):
        compare.resolve_run(df, "202611")
    # the newest run holds no case shared with an earlier run: 'previous' of it is refused, and the
    # default pair is the newest run that has a predecessor sharing cases
    with pytest.raises(compare.RunNotFoundError, match="no run before"):
        compare.compare(df, "previous", "newest")
    assert compare.default_pair(df) is None or compare.default_pair(df)[1] != "20261103T000000Z-cccccccc"
    assert compare.compare(df, "previous", "20261102").run_a == "20261101T000000Z-aaaaaaaa"


def test_cli_compare_and_list(store, capsys):
    assert main(["compare", "97-compare", "--list", "--results-dir", str(store)]) == 0
    out = capsys.readouterr().out
    assert "20261101T000000Z-aaaaaaaa" in out and "20261103T000000Z-cccccccc" in out
    assert main(["compare", "97-compare", "20261101", "20261102", "--all", "--results-dir", str(store)]) == 0
    out = capsys.readouterr().out
    assert "6 cases in both runs" in out and "changed" in out and "failed in B" in out
    assert main(["compare", "97-compare", "nope", "newest", "--results-dir", str(store)]) == 2
    assert "not found" in capsys.readouterr().out


def test_notebook_section_and_run_parameter(store):
    from gluon_lab.analysis import common as cm
    ctx = cm.setup("97-compare", mode="replay", results_dir=store, run="20261102")
    assert ctx.run == "20261102T000000Z-bbbbbbbb"
    assert set(cm.load(ctx)["run_id"]) == {ctx.run}  # the notebook shows that run only
    out = cm.compare_runs(ctx)
    assert "`20261101T000000Z-aaaaaaaa` vs **run B** `20261102T000000Z-bbbbbbbb`" in out[0]
    with pytest.raises(compare.RunNotFoundError):
        cm.setup("97-compare", mode="replay", results_dir=store, run="1999")


def test_adopt_appends_a_measure_build_to_results(tmp_path, capsys):
    run = tmp_path / "runs" / "20261201T000000Z-quick"
    append_records(run / "results" / "h200" / "97-compare.jsonl",
                   _recs("20261201T000000Z-dddddddd", "2026-12-01T00:00:00+00:00", 1.0))
    (run / "results" / "h200" / "97-compare.timeline.json").write_text("{}")
    dst = tmp_path / "results"
    assert main(["adopt", str(run), "--results-dir", str(dst)]) == 0
    assert len(notebook.load(dst, "h200", "97-compare", newest_only=False)) == 6
    assert (dst / "h200" / "97-compare.timeline.json").exists()
    assert "+6 lines" in capsys.readouterr().out
    assert main(["adopt", str(run), "--results-dir", str(dst)]) == 2  # twice: refused, nothing duplicated
    assert "already holds run(s) 20261201T000000Z-dddddddd" in capsys.readouterr().err
    assert len(notebook.load(dst, "h200", "97-compare", newest_only=False)) == 6
    assert main(["adopt", str(dst), "--results-dir", str(dst)]) == 2  # the results folder itself
    assert main(["adopt", str(tmp_path / "nothing"), "--results-dir", str(dst)]) == 2


def test_timers_are_separate_cases(store):
    from gluon_lab.results import append_records as add
    path = store / "h200" / "97-compare.jsonl"
    recs = _recs("20261104T000000Z-eeeeeeee", "2026-11-04T00:00:00+00:00", 1.0)
    for r in recs:
        r.timer = "do_bench-l2flush"
    add(path, recs)
    df = notebook.load(store, "h200", "97-compare", newest_only=False)
    c = compare.compare(df, "20261101", "20261104")
    assert len(c.cases) == 0 and c.only_a == 6 and c.only_b == 6  # a do_bench record is not a graph-timed one
