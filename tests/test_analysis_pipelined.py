"""gluon_lab.analysis.pipelined (notebook 03) on the fixture records: values recomputed by hand from the
raw lines, table shapes, figures by their axes and artists, and the no-records paths. CPU-only; the
CPU compiles of the codegen census are in the tests marked slow."""
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from gluon_lab import plots  # noqa: E402
from gluon_lab.analysis import common as cm, norm_grids as ng, pipelined as P, timeline as tl  # noqa: E402
from gluon_lab.analysis import gemm_grid as GG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "records"
GRID_RUN = "20261129T182939Z-0611c1e9"  # the newest norm grid of the fixture (an older one holds 1024x4096 too)
GEMM_RUN = "20261129T182504Z-97594533"


def raw(name="03-multibuffer-pipelining.jsonl"):
    return [json.loads(ln) for ln in (FIX / "h200" / name).read_text().splitlines() if ln.strip()]


def rec(lines, **kw):
    """The raw lines matching kw (shape keys M/N/K looked up in `shape`, `study` in `config`)."""
    out = []
    for d in lines:
        ok = True
        for k, v in kw.items():
            have = d["shape"].get(k) if k in ("M", "N", "K") else (d["config"] or {}).get(k) if k == "study" else d.get(k)
            ok &= have == v
        if ok:
            out.append(d)
    return out


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(P.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def allrec(ctx):
    return cm.load(ctx)


@pytest.fixture(scope="module")
def use(allrec):
    return cm.keep(allrec, "flag")


@pytest.fixture(scope="module")
def grids(use):
    return ng.norm_grids(use)


@pytest.fixture(scope="module")
def TL(ctx):
    return tl.load_timeline(ctx)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_fixtures_are_unmodified_lines_of_the_committed_records():
    for name in ("03-multibuffer-pipelining.jsonl", "04-warp-specialization.jsonl", "sanitizer.jsonl"):
        fix = (FIX / "h200" / name).read_text().splitlines()
        src = set((ROOT / "results" / "h200" / name).read_text().splitlines())
        hist = ROOT / "results" / "h200" / name.replace(".jsonl", ".history.jsonl.gz")
        if hist.exists():  # superseded runs are archived beside the live store (python -m gluon_lab archive)
            import gzip
            src |= set(gzip.decompress(hist.read_bytes()).decode().splitlines())
        assert 0 < len(fix) <= 300 and all(ln in src for ln in fix), name
    full = json.loads((ROOT / "results" / "h200" / "03-multibuffer-pipelining.timeline.json").read_text())
    cut = json.loads((FIX / "h200" / "03-multibuffer-pipelining.timeline.json").read_text())
    for st, t in cut["timelines"].items():  # the first CTAs, every block of them
        assert len(t["ns"]) == 10 and t["ns"] == full["timelines"][st]["ns"][:10]


def test_stale_policy_and_na_safe_mask(allrec):
    assert cm.keep(allrec, "flag") is allrec
    assert not cm.keep(allrec, "drop").stale.any()
    with pytest.raises(ValueError, match="stale must be"):
        cm.keep(allrec, "hide")
    m = cm.mask(allrec.M == 1024)  # M is a nullable integer: ceilings have no M
    assert m.dtype == bool and m.sum() == ((allrec.M == 1024).fillna(False)).sum()


def test_norm_grid_is_the_newest_run_with_its_copy_reference(use, grids):
    assert set(grids) == {"rms_norm", "layer_norm"}
    g = grids["rms_norm"]
    assert set(g.run_id) == {GRID_RUN}  # not 20261129T180859Z, which also has 1024x4096
    assert {(int(m), int(n)) for m, n in zip(g.M, g.N)} == {(m, n) for m in (1024, 8192, 32768) for n in (4096, 8192)}
    lines = raw()
    # a small cell: its own per-shape copy is the reference
    pp = rec(lines, run_id=GRID_RUN, op="rms_norm", variant="gluon-pipelined", M=1024, N=4096)[0]
    cp = [d for d in rec(lines, run_id=GRID_RUN, op="copy", M=1024, N=4096)][0]
    row = g[(g.variant == "gluon-pipelined") & (g.M == 1024) & (g.N == 4096)].iloc[0]
    assert row["reference"] == "per-shape copy"
    assert row.pct_ceiling == pytest.approx(100 * pp["gbps"] / cp["gbps"])
    # 32768x8192 (256 Mi elements): the graph-timed copy reads ~2750 GB/s, the session copy is the reference
    pp = rec(lines, run_id=GRID_RUN, op="rms_norm", variant="gluon-pipelined", M=32768, N=8192)[0]
    session = [d for d in rec(lines, run_id=GRID_RUN, op="copy") if "M" not in d["shape"]][0]
    row = g[(g.variant == "gluon-pipelined") & (g.M == 32768) & (g.N == 8192)].iloc[0]
    assert row["reference"] == "session copy"
    assert row.pct_ceiling == pytest.approx(100 * pp["gbps"] / session["gbps"])


def test_big_cells_and_why_the_session_copy(use, grids):
    ct, ce = ng.grid_ceiling(use, grids)
    assert ce["run_id"] == GRID_RUN and ce["copy_gbps"] == pytest.approx(
        [d for d in rec(raw(), run_id=GRID_RUN, op="copy") if "M" not in d["shape"]][0]["gbps"])
    big = ng.big_cells(grids, ct)
    assert [tuple(map(int, i)) for i in big.index] == [(8192, 8192), (16384, 4096), (16384, 8192),
                                                      (32768, 4096), (32768, 8192)]  # M*N >= 64 Mi
    low = ng.low_copy_cells(ct)
    assert [tuple(map(int, i)) for i in low.index] == [(32768, 8192)]
    note = ng.why_max_note(grids, big, ce)
    assert note.startswith("**Why max(per-shape, session copy) there:** at 32768x8192 (tensors of 512-512 MiB)")
    assert "4270 GB/s" in note
    assert ng.lift_line(big, ce).startswith("at the other 4 cells with M*N >= 64 Mi")
    assert "run `20261129T182939Z-0611c1e9`" in ng.big_cells_views(grids, big, ce)[0]


def test_target_cells_recomputed_for_one_cell(grids, ctx):
    t = ng.target_cells(grids["rms_norm"], ctx.spec)
    assert t.shape == (6, 14)
    lines = raw()
    cell = [d for d in rec(lines, run_id=GRID_RUN, op="rms_norm", M=8192, N=8192, study=None) if d["passed"]]
    gb = {d["variant"]: d["gbps"] for d in cell}
    best = max(v for k, v in gb.items() if k in P.BASELINES)
    assert t.loc[(8192, 8192), "vs best baseline"] == pytest.approx(gb["gluon-pipelined"] / best)
    assert t.loc[(8192, 8192), "vs gluon-tma"] == pytest.approx(gb["gluon-pipelined"] / gb["gluon-tma"])
    assert t.loc[(8192, 8192), "best baseline"] == max((v, k) for k, v in gb.items() if k in P.BASELINES)[1]
    # row blocks per CTA from the recorded config: ceil(M / rows) / min(blocks, ctas_per_sm x SMs)
    d = [x for x in cell if x["variant"] == "gluon-pipelined"][0]
    nblk = -(-8192 // d["config"]["rows"])
    assert t.loc[(8192, 8192), "row blocks per CTA"] == pytest.approx(nblk / min(nblk, d["config"]["ctas_per_sm"] * d["sm_count"]))
    assert t.loc[(1024, 4096), "met: >= 1.10x one-row (M <= 4096)"] == "MISSED (<= 1 block/CTA: nothing to overlap)"
    assert t.loc[(8192, 8192), "met: >= 1.10x one-row (M <= 4096)"] == "n/a"
    assert t.loc[(8192, 4096), "met: >= 97% ceiling (M*N >= 64Mi)"] == "n/a"  # 32 Mi elements
    s = ng.target_summary({"rms_norm": t})
    assert list(s.target) == [f"gluon-pipelined {ng.TARGET_WORDS[c][0]}" for c, _, _ in ng.TARGETS]  # in words
    assert s.target.iloc[1].startswith("gluon-pipelined at least as fast as the fastest baseline of the cell (eager")
    assert s.iloc[1]["cells met"] == f"{int((t['vs best baseline'] >= 1).sum())}/6"
    # the coloured grid: the measured ratio in each cell, green met / red missed / grey with a reason
    html = ng.target_grid(t).to_html()
    assert f">{t.loc[(8192, 8192), 'vs best baseline']:.3f}<" in html and ">N ≠ 2ᵏ<" not in html  # no N=5120 in the fixture
    assert ">n/a<" in html and "M ≤ 4K only" in html  # grey cells: the condition is in the column header
    assert "#f0f0f0" in html and "#c7e9c0" in html and "#fcbba1" in html and "NaN" not in html  # grey, green, red cells
    details = ng.target_details({"rms_norm": ng.norm_grids(cm.keep(cm.load(ctx), "flag"))["rms_norm"]}, {"rms_norm": t})
    assert not details[1].isna().any().any() and "/ best base" in details[1]


def test_timeline_stats_from_the_trimmed_timeline(TL):
    s = tl.timeline_stats(TL)
    assert list(s.index) == [1, 3] and (s["CTAs traced"] == 10).all() and (s["blocks per CTA"] == 63).all()
    blocks = [np.asarray(c).reshape(-1, 3) for c in TL["timelines"]["1"]["ns"]]
    stall = [int(b[i, 1] - b[i, 0]) for b in blocks for i in range(len(b))]
    period = [int(b[i + 1, 0] - b[i, 0]) for b in blocks for i in range(len(b) - 1)]
    assert s.loc[1, "median stall / block (ns)"] == statistics.median(stall)
    assert s.loc[1, "median block period (ns)"] == statistics.median(period)
    assert tl.stamp_granularity(TL) == 32
    c = tl.timeline_change(s)
    assert c["stages"] == (1, 3) and c["period speedup"] == pytest.approx(s.loc[1, "median block period (ns)"] / s.loc[3, "median block period (ns)"])
    assert list(tl.timeline_table(s).columns)[-1] == "time stalled (median over CTAs) %"


def test_finish_spread_of_the_trimmed_timeline(TL):
    fs = tl.finish_spread(TL, 3)
    blocks = [np.asarray(c).reshape(-1, 3) for c in TL["timelines"]["3"]["ns"]]
    ends = [int(b[-1, 2]) for b in blocks]  # the last block's stores issued
    assert list(fs["ends"]) == ends
    assert fs["tail %"] == pytest.approx(100 * (max(ends) / statistics.median(ends) - 1))
    assert fs["spread %"] == pytest.approx(100 * (max(ends) - min(ends)) / max(ends))
    assert sorted(set(fs["blocks"])) == [62, 63] and fs["imbalance %"] == pytest.approx(100 / 62)
    moved = 8192 * 8192 * 2 * 2
    assert fs["whole-grid GB/s"] == pytest.approx(moved / (max(ends) - min(int(b.min()) for b in blocks)))


def test_timeline_check_against_the_timed_records(TL, use, allrec, ctx):
    s = tl.timeline_stats(TL)
    chk = tl.timeline_check(TL, s, use, allrec, ctx.spec)
    assert (chk["grid (CTAs)"] == 132).all()
    assert (chk["whole-grid GB/s from stamps"] == "not every CTA traced").all()  # 10 of 132 CTAs in the fixture
    stages = {d["config"]["num_stages"]: d["gbps"] for d in rec(raw(), study="stages", M=8192, N=8192)}
    assert chk.loc[3, "timed GB/s, same config"] == round(stages[3]) and chk.loc[3, "timed record run"] == GRID_RUN
    per_block = 1 * 8192 * 2 * 2
    assert chk.loc[3, "GB/s at median period"] == round(132 * per_block / s.loc[3, "median block period (ns)"])
    notes = tl.timeline_check_notes(chk, s, ctx.spec)
    assert "above the 4800 GB/s datasheet" in notes and notes.splitlines()[-1].startswith("NUM_STAGES 1 -> 3: median stall")


def test_timeline_figures(TL):
    s = tl.timeline_stats(TL)
    fig = tl.timeline_gantt(TL, s)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.collections) == 4 * 3  # 4 CTAs x (stall, compute+store, gap)
        assert [t.get_text() for t in ax.get_yticklabels()] == ["CTA 0", "CTA 1", "CTA 2", "CTA 3"]
    assert "NUM_STAGES=3" in fig.axes[1].get_title()
    zoom = tl.timeline_gantt(TL, s, zoom=True)
    assert zoom.axes[0].get_xlim() == pytest.approx((0, 8 * s["median block period (ns)"].max() / 1e3))
    fin = tl.finish_figure(TL, s)
    lines = fin.axes[0].get_lines()
    assert len(lines) == 2 and all(len(ln.get_xdata()) == 10 for ln in lines)
    assert np.all(np.diff(lines[1].get_ydata()) >= 0)  # sorted by finish
    assert tl.timeline_gantt(None, s) is None and tl.finish_figure(None, s) is None


def test_headline_and_variant_maps(grids):
    fig = ng.headline_figure(grids, "h200")
    assert len(fig.axes) == 2 * 2  # RMSNorm and LayerNorm ratio maps, each with its colour bar
    assert [a.get_title() for a in fig.axes[:2]] == ["RMSNorm bf16", "LayerNorm bf16"]
    assert "run 20261129T182939Z" in fig._suptitle.get_text()
    im = fig.axes[0].images[0]
    assert im.norm.vcenter == 1.0  # a diverging map centred on 1.0
    t = ng.vs_best_frame(grids["rms_norm"])
    slow = t.loc[t.ratio.idxmin()]
    if slow.ratio < 1:  # a loss is painted on the red side, whatever the range of the other cells
        rgb = im.cmap(im.norm(slow.ratio))
        assert rgb[0] > rgb[1]
    assert "faster" in fig.axes[2].get_ylabel()
    full = ng.grid_figure(grids, "h200")
    assert len(full.axes) == 2 * 3 * 2 and full.axes[0].get_title() == "rms_norm: gluon-pipelined, % of ceiling"
    assert full.axes[2].images[0].norm.vcenter == 1.0
    out = ng.variant_maps(grids)
    figs = [o for o in out if isinstance(o, plt.Figure)]
    tabs = [o for o in out if isinstance(o, pd.DataFrame)]
    assert len(figs) == 4 and len(tabs) == 2
    assert "**rms_norm: gluon-chunked -> gluon-pipelined**" in out[2]
    assert tabs[0].shape == (3, 2) and " -> " in tabs[0].iloc[0, 0]
    assert ng.headline_figure({}, "h200") is None and ng.variant_maps({}) == []


def test_stages_pipe_sweep_and_fence(use):
    stg = P.stages_records(use)
    t = P.stage_table(stg)
    assert t.shape == (3, 7)
    st = {d["config"]["num_stages"]: d["gbps"] for d in rec(raw(), study="stages", M=1024, N=4096)}
    assert t.loc[("rms_norm", 1024, 4096), "best NUM_STAGES"] == max(st, key=st.get)
    assert t.loc[("rms_norm", 1024, 4096), "best / 1 stage"] == round(max(st.values()) / st[1], 3)
    figs = P.stages_figures(stg)
    assert len(figs) == 1 and [ax.get_title() for ax in figs[0].axes] == ["rms_norm N=4096", "rms_norm N=8192"]
    assert [len(ax.get_lines()) for ax in figs[0].axes] == [1, 2]  # M=1024 | M=8192, 32768
    ps = P.pipe_sweep_records(use)
    best = P.pipe_sweep_best(ps)
    assert list(best.index) == [("layer_norm", 8192, 8192), ("rms_norm", 1024, 4096)]
    sub = rec(raw(), study="pipe-sweep", op="rms_norm", M=1024, N=4096)
    b = max(sub, key=lambda d: d["gbps"])
    assert best.loc[("rms_norm", 1024, 4096), "configs"] == len(sub)
    assert best.loc[("rms_norm", 1024, 4096), "best (ctas/SM, stages, rows)"] == (
        b["config"]["ctas_per_sm"], b["config"]["num_stages"], b["config"]["rows"])
    assert best.loc[("rms_norm", 1024, 4096), "worst / best"] == pytest.approx(min(d["gbps"] for d in sub) / b["gbps"])
    assert 0 < best["heuristic / best"].max() <= 1
    fence = P.fence_table(P.fence_records(use))
    on_off = {d["config"]["fence"]: d["gbps"] for d in rec(raw(), study="fence", op="rms_norm", M=8192, N=8192)}
    assert fence.loc[("rms_norm", 8192, 8192), "off / on"] == round(on_off[False] / on_off[True], 3)


def test_others_gemm_and_sweeps(ctx, use):
    others = P.other_grids(use, ops=("l2_norm", "add_rms_norm"))
    assert set(others) == {"l2_norm", "add_rms_norm"}
    t = P.other_table(others["l2_norm"])
    assert "gluon-pipelined / best baseline" in t and len(t) == 2
    gm = GG.gemm_records(use)
    assert set(gm.run_id) == {GEMM_RUN}  # the newer of the two GEMM grid runs
    tab = GG.gemm_table(gm)
    assert tab.shape == (3, 8) and list(tab.columns[-1:]) == ["gluon-pipelined / triton"]
    sq = {d["variant"]: d["tflops"] for d in rec(raw(), run_id=GEMM_RUN, op="matmul", M=8192, N=8192, K=8192)}
    assert tab.loc[(8192, 8192, 8192), "gluon-ws / cuBLAS"] == round(sq["gluon-ws"] / sq["torch"], 3)
    assert GG.square_ratio(tab, "gluon-ws / cuBLAS") == round(sq["gluon-ws"] / sq["torch"], 3)
    assert GG.geomeans(tab)["triton / cuBLAS"] == pytest.approx(plots.geomean(tab["triton / cuBLAS"]))
    gt = GG.gemm_targets(tab)
    assert len(gt) == 6 and gt.iloc[0].measured == f"{sq['gluon-pipelined'] / sq['torch']:.3f}x"
    fig = GG.gemm_bars(gm)
    assert len(fig.axes[0].patches) == 3 * 3  # triton, gluon-pipelined, gluon-ws at 3 shapes
    fig.canvas.draw()
    assert fig.axes[0].get_legend().get_window_extent().y0 >= fig.axes[0].get_window_extent().y1 - 1  # legend above the bars
    views = GG.gemm_views(gm, tab)
    assert views[2] == "configs the gluon records ran with:" and views[3].shape == (3, 3)
    gs = GG.gemm_sweep_records(use)
    out = GG.gemm_sweep_views(gs)
    assert out[-2] == "best per shape:" and out[-1].index.tolist() == ["8192x8192x8192"]
    ws = GG.ws_sweep_records(use)
    wv = GG.ws_sweep_views(ws)
    assert wv[-2] == "8 ws-sweep configs were not timed:" and wv[-1].shape == (8, 4)


def test_roofline_correctness_and_sanitizer(ctx, use, grids):
    gm = GG.gemm_records(use)
    fig, lines = P.roofline_figure(use, grids, gm, ctx.spec, "h200")
    assert f"GEMMs from run: {GEMM_RUN}" in lines[0]
    assert [a.get_title() for a in fig.axes if a.get_title()] == ["rms_norm", "layer_norm", "matmul"]  # a panel per op
    slot = [a for a in fig.axes if not a.get_title()]  # the fourth slot of the 2x2 grid holds the legend
    labels = [t.get_text() for t in slot[0].get_legend().get_texts()]
    assert "gluon-pipelined" in labels and "cuBLAS ceiling" in labels and len(labels) == len(set(labels))
    corr = P.correctness_table([*grids.values(), gm])
    assert corr.loc[(GEMM_RUN, "matmul", "gluon-ws"), "records"] == 3
    san, n_old = P.load_sanitizer(P.sanitizer_path(ctx))
    assert (len(san), n_old) == (7, 1)  # ws-gemm / racecheck twice: the newer line wins
    assert int(san.clean.sum()) == 4 and set(san[~san.clean].kernel) == {"ws-gemm", "ws-gemm-noinval", "ws-norm"}
    views = P.sanitizer_views(san, n_old, P.sanitizer_path(ctx))
    assert "count" not in views[1] and not views[1].isna().any().any()  # the summary's count, no NaN
    assert views[1].case.iloc[0] == "rms_norm gluon-pipelined 37x1000"
    assert views[0] == "8 lines in sanitizer.jsonl; 1 superseded by a later line for the same (kernel, tool)"
    assert "4/7 sanitizer runs clean" in views[2] and sum("NOT clean" in str(v) for v in views) == 3
    assert "pipelined-gemm / racecheck" in views[-1] and "ws-norm / racecheck" not in views[-1]


def test_takeaways_are_computed_from_the_tables(ctx, allrec, use, grids, TL):
    s = tl.timeline_stats(TL)
    targets = ng.target_tables(grids, ctx.spec)
    summary = ng.target_summary(targets)
    stg = P.stages_records(use)
    gm = GG.gemm_records(use)
    lines = P.takeaways(grids=grids, targets=targets, summary=summary, TL=TL, tl_stats=s, allrec=allrec,
                        chk=tl.timeline_check(TL, s, use, allrec, ctx.spec), stg=stg, stage_tab=P.stage_table(stg),
                        gm=gm, gemm_tab=GG.gemm_table(gm), use=use, san=P.load_sanitizer(P.sanitizer_path(ctx))[0])
    text = "\n".join(lines)
    t = targets["rms_norm"]
    assert f"vs the best baseline geomean {plots.geomean(t['vs best baseline']):.3f}x" in text
    assert "the slowest of 10 CTAs" in text and "62-63 blocks each (block-count imbalance 1.6%)" in text
    assert "NUM_STAGES study" in text and "compute-sanitizer: 7 runs recorded, 4 clean" in text
    assert "Copy ceiling: the graph-timed per-shape copy reads" in text and "at 32768x8192" in text
    md = cm.bullets(lines)
    assert md.startswith("- **rms_norm bf16**") and "\n  - 1 cells give each CTA at most one row block with the recorded config (1024x4096)" in md
    assert all(ln.startswith(("- ", "  - ")) for ln in md.splitlines())


def test_no_records_give_notes_not_errors(ctx, tmp_path):
    empty = cm.load(cm.setup(P.NB, mode="replay", results_dir=tmp_path))
    assert len(empty) == 0
    assert ng.norm_grids(empty) == {} and P.other_grids(empty, ops=("l2_norm", )) == {}
    for f in (P.stages_records, P.pipe_sweep_records, P.fence_records, GG.gemm_records, GG.gemm_sweep_records, GG.ws_sweep_records):
        assert len(f(empty)) == 0
    assert P.stage_table(empty).empty and P.pipe_sweep_best(empty).empty and P.fence_table(empty).empty
    assert GG.gemm_table(empty).empty and GG.gemm_bars(empty) is None and GG.gemm_views(empty, P.EMPTY) == []
    assert P.roofline_figure(empty, {}, empty, ctx.spec, "h200") == (None, [])
    assert tl.timeline_stats(None).empty and tl.timeline_table(P.EMPTY) is None
    assert cm.about(empty, "x") == [] and cm.table(P.EMPTY) is None
    note = cm.nodata(ctx, "the GEMM grid", "drop")
    assert note == ("**No records for the GEMM grid** in `tests/fixtures/records/h200/03-multibuffer-pipelining.jsonl` "
                    "(stale records dropped: `stale='drop'`).")
    assert P.sanitizer_views(P.EMPTY, 0, tmp_path / "sanitizer.jsonl")[0].startswith("**No compute-sanitizer records:**")
    assert P.takeaways() == ["compute-sanitizer: no records (not run)."]


def test_kernel_sources_are_the_current_functions():
    src = P.kernel_source("_load_block", "pipelined_norm_kernel")
    assert src.count("@gluon.jit") == 2 and "def _load_block(" in src and "def pipelined_norm_kernel(" in src
    assert P.kernel_source("PipeConfig.heuristic").lstrip().startswith("@classmethod")
    cfg = P.pipe_heuristic("rms_norm", 4096, "bfloat16", num_stages=2)
    assert cfg.num_stages == 2 and cfg.rows >= 1


@pytest.mark.slow
def test_codegen_census_on_cpu():
    t, errors = P.norm_census(Ns=(4096, ), stages=(1, 3))
    assert not errors and list(t.index) == [(4096, 1), (4096, 3)]
    assert (t["TMA copies per ring fill"] == t["NUM_CHUNKS"]).all()  # one box per chunk and ring fill
    assert t.loc[(4096, 3), "smem added per stage"] > 0
    g, errors = P.gemm_census()
    assert not errors and len(g) == 3
    assert (g["HGMMA (SASS)"] > 0).all() and (g["UTMALDG"] > 0).all()


def test_headline_numbers(use, grids):
    nums = dict(P.headline_numbers(grids, use))
    t = pd.concat([ng.vs_best_frame(grids[op]) for op in ("rms_norm", "layer_norm")])
    r = t["ratio"].dropna()
    assert nums["gluon-pipelined vs best baseline"] == (
        f"{plots.geomean(r):.2f}× geomean over {len(r)} cells (RMSNorm + LayerNorm bf16); at least as fast in "
        f"{int((r >= 1).sum())} of them (run {GRID_RUN.split('-')[0]})")
    assert nums["% of the copy ceiling"].startswith(f"{t['mine'].min():.0f}–{t['mine'].max():.0f}% (gluon-pipelined")
    sq = {d["variant"]: d["tflops"] for d in rec(raw(), run_id=GEMM_RUN, op="matmul", M=8192, N=8192, K=8192)}
    assert nums["GEMM vs cuBLAS at 8192³"] == (f"{round(sq['gluon-pipelined'] / sq['torch'], 3):.2f}× cuBLAS, "
                                               f"{round(sq['gluon-pipelined'], 1):.0f} TFLOP/s bf16 (run {GEMM_RUN.split('-')[0]})")
    assert dict(P.headline_numbers({}, P.EMPTY)) == {
        "gluon-pipelined vs best baseline": "missing: no RMSNorm / LayerNorm grid with gluon-pipelined",
        "GEMM vs cuBLAS at 8192³": "missing: no GEMM grid with gluon-pipelined and cuBLAS"}
    assert ng.headline_figure({}, "h200") is None and ng.grid_figure({}, "h200") is None


def test_other_views_say_why_a_variant_is_absent(ctx, use):
    import numpy as np
    others = P.other_grids(use, ops=("l2_norm", ))
    t = P.other_table(others["l2_norm"])
    why = P.variant_reason("l2_norm", others["l2_norm"])
    assert why((16384, 5120), "gluon-tma") == "refused: N not 2^k"  # the configure hook refuses, not 'not measured'
    assert why((16384, 4096), "liger").startswith(("refused", "not measured in run"))
    v = P.other_views(ctx, others, ops=("l2_norm", ))
    assert not v[-1].isna().any().any() and not np.isnan(t.select_dtypes("number").to_numpy()).all()


def test_schedule_study_table_timeline_and_notes(allrec):
    """The schedule study (issue 16): GB/s and ratios recomputed from the raw lines of its run; the timeline's
    tail from the stamps; the notes; the fixture timeline is a cut of the committed one."""
    lines = [d for d in raw() if (d["config"] or {}).get("study") == "schedule"]
    run = lines[0]["run_id"]
    g = P.schedule_records(allrec)
    assert set(g.run_id) == {run}
    t = P.schedule_table(g)
    assert set(t.index.get_level_values("op")) == {"rms_norm", "add_rms_norm", "layer_norm"}
    one = {(d["config"]["schedule"]): d["gbps"] for d in lines if d["op"] == "rms_norm" and d["variant"] == "gluon-ws"
           and d["shape"] == {"M": 32768, "N": 8192}}
    assert t.loc[("rms_norm", 32768, 8192), "ws dynamic / static"] == round(one["dynamic"] / one["static"], 3)
    cells = [d for d in raw() if d["run_id"] == run and d["op"] == "rms_norm" and d["shape"] == {"M": 32768, "N": 4096}]
    best_other = max(d["gbps"] for d in cells if not (d["variant"] == "gluon-ws" and d["config"].get("schedule") == "dynamic"))
    dyn = [d["gbps"] for d in cells if d["variant"] == "gluon-ws" and d["config"].get("schedule") == "dynamic"][0]
    assert t.loc[("rms_norm", 32768, 4096), "ws dynamic / best other"] == round(dyn / best_other, 3)
    copy = [d["gbps"] for d in raw() if d["run_id"] == run and d["op"] == "copy" and d["shape"]["M"] == 32768
            and d["shape"]["N"] == 8192]
    best = max(d["gbps"] for d in cells if d["variant"].startswith("gluon"))
    assert t.loc[("rms_norm", 32768, 4096), "best gluon % of copy"] == round(100 * best / [
        d["gbps"] for d in raw() if d["run_id"] == run and d["op"] == "copy" and d["shape"]["M"] == 32768
        and d["shape"]["N"] == 4096][0], 3)
    if copy and copy[0] < best:  # the 32768 x 8192 copy read slower than the norms: no ceiling there
        assert np.isnan(t.loc[("rms_norm", 32768, 8192), "best gluon % of copy"])
    TL = json.loads((FIX / "h200" / "03-multibuffer-pipelining.schedule-timeline.json").read_text())
    full = json.loads((ROOT / "results" / "h200" / "03-multibuffer-pipelining.schedule-timeline.json").read_text())
    st = P.schedule_timeline_stats(TL)
    assert len(st) == 4 and (st["CTAs"] == 24).all()
    c = [np.asarray(x, float).reshape(-1, 5) for x in TL["timelines"]["gluon-ws"]["dynamic"]["ns"]]
    ends = [x[:, -1].max() for x in c]
    assert st.loc[("gluon-ws", "dynamic"), "first CTA done → last (µs)"] == round((max(ends) - min(ends)) / 1e3, 2)
    for v, by in TL["timelines"].items():
        for sch, x in by.items():
            assert x["ns"] == full["timelines"][v][sch]["ns"][:24]
    notes = P.schedule_notes(t, st)
    assert any(n.startswith("gluon-ws dynamic ÷ static:") for n in notes)
    assert any(n.startswith("timeline gluon-ws dynamic:") for n in notes)
    assert P.schedule_finish_figure(TL) is not None and P.schedule_finish_figure(None) is None
    plt.close("all")
    e = allrec.iloc[0:0]
    assert not len(P.schedule_records(e)) and not len(P.schedule_table(P.schedule_records(e)))


def test_stale_pick_check_compares_the_stored_config_with_todays_pick():
    """A STALE grid / heuristic record: True where today's heuristic resolves its shape to the config it ran,
    False where not; a study's explicit config and current records are left out."""
    import dataclasses
    import json
    import pandas as pd
    from gluon_lab import registry
    from gluon_lab.analysis import pipelined as P
    shape = {"M": 4096, "N": 4096, "K": 4096}
    now = dataclasses.asdict(registry.get_variant("matmul", "gluon-ws").resolve(shape, "bfloat16", {}))
    other = dict(now, BN=64)
    rows = [dict(variant="gluon-ws", config=dict(now, sm_clock_mhz=1500), stale=True),
            dict(variant="gluon-ws", config=dict(other, study="gemm-shapes", heuristic=True), stale=True),
            dict(variant="gluon-ws", config=dict(other, study="gemm-shapes"), stale=True),  # explicit: skipped
            dict(variant="gluon-ws", config=now, stale=False)]                             # current: skipped
    df = pd.DataFrame([{"op": "matmul", "dtype": "bfloat16", "run_id": "r", **shape, "variant": r["variant"],
                        "config_key": json.dumps(r["config"]), "stale": r["stale"]} for r in rows])
    chk = P.stale_pick_check(df)
    assert list(chk["same config today"]) == [True, False]
