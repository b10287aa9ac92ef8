"""gluon_lab.analysis.warp_specialized and .ws_sanitizer (notebook 04) on the fixture records (04's file and
03's): values recomputed by hand from the raw lines and stamps, table shapes, figures by their axes and
artists, the racecheck mapping, the no-records paths. CPU-only; the CPU compiles (census, SASS at the
reported offsets) are in the tests marked slow. The GEMM studies (.gemm) are tests/test_analysis_gemm.py."""
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
from gluon_lab.analysis import common as cm, gemm as G, norm_grids as ng, pipelined as P, timeline as tl  # noqa: E402
from gluon_lab.analysis import warp_specialized as W  # noqa: E402
from gluon_lab.analysis import ws_sanitizer as S  # noqa: E402
from gluon_lab.analysis import ws_timeline as WT  # noqa: E402
from gluon_lab.analysis import gemm_grid as GG  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "records"
GRID_RUN = "20261129T183206Z-8a299bf1"
GEMM_RUN = "20261129T182504Z-97594533"  # in 03's file: the newest run with all four GEMMs


def raw(name="04-warp-specialization.jsonl"):
    return [json.loads(ln) for ln in (FIX / "h200" / name).read_text().splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(W.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def recs(ctx):
    return cm.load(ctx), W.load_03(ctx)


@pytest.fixture(scope="module")
def timelines(ctx):
    return tl.load_timeline(ctx), tl.load_timeline(ctx, W.NB3)


@pytest.fixture(scope="module")
def grids(recs):
    return W.norm_grids(recs[0])


@pytest.fixture(scope="module")
def gm(recs):
    return G.gemm_records(G.gemm_candidates(*recs))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_both_files_are_read(ctx, recs):
    allrec, rec03 = recs
    assert len(allrec) == len(raw()) and len(rec03) == len(raw("03-multibuffer-pipelining.jsonl"))
    out = W.overview(ctx, allrec, rec03)
    titles = [o for o in out if isinstance(o, str) and o.endswith("runs:")]
    assert titles == ["**`04-warp-specialization.jsonl`** runs:", "**`03-multibuffer-pipelining.jsonl`** runs:"]
    prov = [o for o in out if isinstance(o, pd.DataFrame)][0]
    assert set(prov.run_id) == {d["run_id"] for d in raw()}
    assert W.nodata(ctx, "the GEMM targets") == "**No records for the GEMM targets** in `tests/fixtures/records/h200/`."


def test_protocol_parities():
    t = W.protocol_table(S=3)
    assert len(t) == 8 and list(t["slot = i % S"]) == [0, 1, 2, 0, 1, 2, 0, 1]
    # the producer waits for the phase before the consumer's: the first lap passes at once
    assert list(t["producer waits EMPTY[slot], parity"]) == [1, 1, 1, 0, 0, 0, 1, 1]
    assert list(t["consumer waits FULL[slot], parity"]) == [0, 0, 0, 1, 1, 1, 0, 0]
    assert t.loc[4, "the producer's wait returns when"] == "the consumer arrived on EMPTY after block 1"


def test_ws_timeline_stats_recomputed(timelines):
    TL4, TL3 = timelines
    s = WT.ws_timeline_stats(TL4)
    assert list(s.index) == [1, 3] and (s["CTAs traced"] == 10).all() and (s["blocks per CTA"] == "62-63").all()
    f = TL4["fields"]
    blocks = [np.asarray(c).reshape(-1, 5) for c in TL4["timelines"]["3"]["ns"]]
    ra = [int(b[i, f.index("consumer_before_full_wait")] - b[i, f.index("producer_issued")]) for b in blocks for i in range(len(b))]
    stall = [int(b[i, f.index("consumer_ready")] - b[i, f.index("consumer_before_full_wait")]) for b in blocks for i in range(len(b))]
    assert s.loc[3, "run-ahead, median (ns)"] == statistics.median(ra)
    assert s.loc[3, "consumer FULL stall, median (ns)"] == statistics.median(stall)
    assert s.loc[3, "run-ahead < 0 (% of blocks)"] == pytest.approx(100 * sum(x < 0 for x in ra) / len(ra))
    assert s.loc[1, "blocks ahead, max"] == 0 and s.loc[3, "blocks ahead, median"] == 2  # a 1-slot ring cannot run ahead
    pipe = WT.pipe_timeline_summary(TL3)
    p3 = tl.timeline_stats(TL3)
    assert list(pipe.columns) == ["stall, median (ns)", "compute + store, median (ns)", "block period, median (ns)"]
    assert pipe.loc[3, "block period, median (ns)"] == p3.loc[3, "median block period (ns)"]
    lines = WT.timeline_lines(s, pipe)
    assert lines[0].startswith("NUM_STAGES 1 -> 3: run-ahead") and lines[1].startswith("NUM_STAGES=3, gluon-ws vs gluon-pipelined")


def test_timeline_figures(timelines):
    TL4, _ = timelines
    s = WT.ws_timeline_stats(TL4)
    fig = WT.ws_gantt(TL4, s)
    assert len(fig.axes) == 2
    ax = fig.axes[1]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"CTA {c} {r}" for c in (0, 1, 2) for r in ("consumer", "producer")]
    assert ax.get_xlim() == pytest.approx((0, 10 * s["block period, median (ns)"].max() / 1e3))
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 4
    h = WT.runahead_hist(TL4, s)
    assert len(h.axes) == 2 and all(len(a.patches) == 2 * 60 for a in h.axes)  # two histograms of 60 bins
    assert WT.ws_gantt(None, s) is None and WT.runahead_hist(None, s) is None


def test_every_cta_finish_spread(timelines):
    TL4, TL3 = timelines
    fin = WT.finish_spreads(TL3, TL4)
    t = WT.spread_table(fin)
    assert list(t.index) == [("gluon-pipelined (03)", 1), ("gluon-pipelined (03)", 3), ("gluon-ws (04)", 1), ("gluon-ws (04)", 3)]
    blocks = [np.asarray(c).reshape(-1, 5) for c in TL4["timelines"]["3"]["ns"]]
    ends = [int(b.max()) for b in blocks]
    assert t.loc[("gluon-ws (04)", 3), "tail: max / median - 1 (%)"] == pytest.approx(100 * (max(ends) / statistics.median(ends) - 1))
    assert t.loc[("gluon-ws (04)", 3), "finish max (us)"] == max(ends) / 1e3
    assert np.allclose(t["block-count imbalance (%)"], 100 / 62)  # 63 vs 62 blocks
    assert (t["GB/s if the CTA time were spread evenly"] >= t["whole-grid GB/s from stamps"]).all()
    fig = WT.spread_figure(fin)
    assert len(fig.axes[0].get_lines()) == 4 and len(fig.axes[1].collections) == 2  # NUM_STAGES=3 only, by CTA id
    assert WT.spread_table({}).empty and WT.spread_figure({}) is None


def test_tail_next_to_the_timed_records(recs, timelines):
    (use, use03), (TL4, TL3) = recs, timelines
    spread = WT.spread_table(WT.finish_spreads(TL3, TL4))
    chk = WT.spread_check(spread, TL3, TL4, use, use03)
    assert chk.loc[("gluon-ws (04)", 1), "timed record"] == "no timed record with this exact config"
    assert chk.loc[("gluon-pipelined (03)", 1), "timed record"].endswith("study stages")
    r = chk.loc[("gluon-ws (04)", 3)]
    assert r["stamps / timed"] == pytest.approx(spread.loc[("gluon-ws (04)", 3), "whole-grid GB/s from stamps"]
                                                / r["timed GB/s, same config"], rel=1e-3)  # the shown GB/s is rounded
    cell = {d["variant"]: d["gbps"] for d in raw() if d["run_id"] == GRID_RUN and d["op"] == "rms_norm"
            and d["shape"] == {"M": 8192, "N": 8192}}
    note = WT.tail_note(spread, WT.norm_grid_run(use), TL3, TL4)
    assert f"gluon-tma **{cell['gluon-tma']:.0f} GB/s**" in note and f"gluon-ws **{cell['gluon-ws']:.0f}**" in note
    assert f"gluon-tma is **{100 * (cell['gluon-tma'] / cell['gluon-ws'] - 1):.1f}%** faster" in note
    assert "(the timed gluon-ws record ran NUM_STAGES=4, the timeline 3: not the same config)" in note
    assert all("the stamped span implies" in ln for ln in WT.spread_check_lines(chk))


def test_setmaxnreg_roles_from_ptx_order():
    ptx = ("setmaxnreg.inc.sync.aligned.u32 240;\nsetmaxnreg.dec.sync.aligned.u32 232;\n"
           "setmaxnreg.inc.sync.aligned.u32 40;\nsetmaxnreg.dec.sync.aligned.u32 24;\n")
    roles, seq = W.setmaxnreg_roles(ptx, 40)
    assert seq == [("inc", 240), ("dec", 232), ("inc", 40), ("dec", 24)]
    assert roles == {"default warps, parent code": 240, "consumer (in partition)": 232, "producer": 40, "worker warps parked": 24}
    assert W.setmaxnreg_roles("no setmaxnreg here", 40) == ({}, [])


def test_ws_vs_pipelined_targets(ctx, grids):
    assert set(grids) == {"rms_norm", "layer_norm", "add_rms_norm"} and all(set(g.run_id) == {GRID_RUN} for g in grids.values())
    targets = W.target_tables(grids, ctx.spec)
    t = targets["layer_norm"]
    assert t.shape == (6, 11)
    cell = {d["variant"]: d["gbps"] for d in raw() if d["run_id"] == GRID_RUN and d["op"] == "layer_norm"
            and d["shape"] == {"M": 32768, "N": 8192} and d["passed"]}
    assert t.loc[(32768, 8192), "ws / pipelined"] == pytest.approx(cell["gluon-ws"] / cell["gluon-pipelined"])
    assert t.loc[(32768, 8192), "met: >= 0.98x gluon-pipelined"] == ("met" if cell["gluon-ws"] / cell["gluon-pipelined"] >= 0.98 else "MISSED")
    s = W.norm_summary(targets).set_index("op")
    r = t["ws / pipelined"]
    assert s.loc["layer_norm", "geomean ws / pipelined"] == pytest.approx(plots.geomean(r))
    assert s.loc["layer_norm", "cells met (>= 0.98x)"] == f"{int((r >= 0.98).sum())}/6"
    b = W.by_blocks(targets)
    assert b["cells"].sum() == 6 + 6 + 2 and list(b.index) == ["2-8", "8-32", "> 32"]
    views = W.target_views(ctx, grids, targets, W.norm_summary(targets), b)
    assert views[-2] == "**gluon-ws / gluon-pipelined by row blocks per CTA** (all ops):"
    grid_html = views[1].to_html()  # the coloured grid of rms_norm: the ratio in each cell, green / red
    rr = targets["rms_norm"]["ws / pipelined"]
    assert all(f">{v:.3f}<" in grid_html for v in rr) and "#fcbba1" in grid_html and "NaN" not in grid_html
    summ = views[-3].to_html()
    assert "within 2% of gluon-pipelined (pattern 3) or faster" in views[-4] and "✗ not all" in summ
    det = W.target_details(grids, targets)
    assert all(not d.isna().any().any() for d in det if isinstance(d, pd.DataFrame))


def test_headline_numbers(ctx, recs, grids, gm):
    use, use03 = recs
    nums = dict(W.headline_numbers(grids, use, use03))
    r = pd.concat([W.ws_frame(grids[op]) for op in ("rms_norm", "layer_norm")])["ratio"]
    assert nums["gluon-ws vs gluon-pipelined"] == (f"{plots.geomean(r):.3f}× geomean; within 2% or faster in "
                                                   f"{int((r >= 0.98).sum())} of {len(r)} cells")
    b = pd.concat([ng.vs_best_frame(grids[op], "gluon-ws") for op in ("rms_norm", "layer_norm")])["ratio"]
    assert nums["gluon-ws vs best baseline"].startswith(f"{plots.geomean(b):.2f}× geomean over {len(b)} cells")
    t = G.gemm_table(gm)
    sq = GG.square_ratio(t, "gluon-ws / cuBLAS")
    assert nums["GEMM vs cuBLAS at 8192³"].startswith(f"{sq:.2f}× cuBLAS, {GG.square_ratio(t, 'gluon-ws'):.0f} TFLOP/s bf16")
    e = P.EMPTY
    assert dict(W.headline_numbers({}, e, e)) == {
        "gluon-ws vs best baseline": "missing: no RMSNorm / LayerNorm grid with gluon-ws and a baseline",
        "GEMM vs cuBLAS at 8192³": "missing: no GEMM run holding gluon-ws, gluon-pipelined, Triton and cuBLAS"}


def test_headline_ratio_map_marks_missed_cells(grids):
    fig = W.headline_figure(grids, "h200")
    assert len(fig.axes) == 2 * 2  # rms_norm and layer_norm (not add_rms_norm), each ratio map with its colour bar
    ratio_ax = fig.axes[0]
    assert ratio_ax.get_title() == "RMSNorm bf16" and ratio_ax.images[0].norm.vcenter == 1.0
    texts = [t.get_text() for t in ratio_ax.texts]
    assert len(texts) == 6 and all(t.endswith(" ✗") for t in texts)  # no rms_norm cell of the fixture within 2%
    full = W.grid_figure(grids, "h200")
    assert len(full.axes) == 2 * 3 * 2 and full.axes[2].get_title() == "rms_norm: gluon-ws / gluon-pipelined (speed)"
    assert W.headline_figure({}, "h200") is None
    maps = ng.variant_maps(W.heat_grids(grids), "gluon-pipelined", "gluon-ws", with_timer=False)
    assert sum(isinstance(m, plt.Figure) for m in maps) == 4 and "**rms_norm: gluon-pipelined -> gluon-ws** (% of ceiling, speed change)" in [
        m for m in maps if isinstance(m, str)]


def test_norm_sweep(recs, grids):
    sw = W.norm_sweep_records(recs[0])
    full, per_knob, eff = W.norm_sweep_tables(sw)
    assert full.shape == (2, 18) and set(per_knob) == {"num_stages", "num_warps", "producer_regs"}
    sub = [d for d in raw() if (d["config"] or {}).get("study") == "norm-sweep" and d["op"] == "rms_norm"]
    best = max(d["gbps"] for d in sub)
    at2 = max(d["gbps"] for d in sub if d["config"]["num_stages"] == 2)
    lay = [d for d in raw() if (d["config"] or {}).get("study") == "norm-sweep" and d["op"] == "layer_norm"]
    lay2 = max(d["gbps"] for d in lay if d["config"]["num_stages"] == 2) / max(d["gbps"] for d in lay)
    assert eff.loc[("num_stages", 2), "geomean best-at-value / best overall"] == pytest.approx(plots.geomean([at2 / best, lay2]))
    heur = W.sweep_vs_heuristic(sw, grids)
    assert heur.loc[("rms_norm", 8192, 8192), "best GB/s"] == round(best)
    assert heur.loc[("rms_norm", 8192, 8192), "gluon-ws GB/s in the norms grid (later run)"] is not None
    assert len(W.norm_sweep_views(full, per_knob, eff, heur)) == 2 + 2 * 3 + 4


def test_racecheck_accesses_mapped_to_the_source(ctx):
    san, n_old = P.load_sanitizer(P.sanitizer_path(ctx))
    t = S.sanitizer_table(san)
    assert t.loc[t.kernel == "ws-norm", "case"].iloc[0] == "rms_norm gluon-ws 37x1000"
    assert list(t.columns[:4]) == ["kernel", "case", "tool", "warp_specialize"]
    src_lines, defs = S.ws_source_lines()
    race, tails = S.race_accesses(san, src_lines, defs, None)  # without the diagnostic's generated file
    assert len(tails) == 3 and tails[0].startswith("**ws-gemm / racecheck** (exit code 3, matmul gluon-ws 300x264x520)")
    first = race[(race.kernel == "ws-gemm") & (race.role == "first access")].iloc[0]
    assert (first.access, first.offset) == ("Read", "ws_gemm_kernel+0xf0")
    assert first["maps to"] == f"gemm_ws.py:{defs['ws_gemm_kernel']} now"  # the report's def line, shifted
    assert first["source line"].startswith("def ws_gemm_kernel(")
    noinval = race[race.kernel == "ws-gemm-noinval"]
    assert (noinval["maps to"] == "?").all()  # its generated file was not given
    assert S.def_shift_line(race, defs).startswith("def lines: ws_gemm_kernel reported at line")
    summ = S.sanitizer_summary(san, race, P.EMPTY)
    assert "- synccheck: 3/3 kernels clean" in summ and "- racecheck, warp_specialize kernels: 3/3 report hazards" in summ
    assert "- Outputs under the sanitizer matched the float64 reference in" in summ
    assert "**Explained: a racecheck false positive.**" in summ  # the committed dispatch reproduction log


def test_takeaways(ctx, recs, grids, gm, timelines):
    use, _ = recs
    TL4, TL3 = timelines
    targets = W.target_tables(grids, ctx.spec)
    t = G.gemm_table(gm)
    san = P.load_sanitizer(P.sanitizer_path(ctx))[0]
    lines = W.takeaways(gm=gm, gemm_tab=t, gt=G.gemm_targets(t), targets=targets, summary=W.norm_summary(targets),
                        blocks=W.by_blocks(targets), TL4=TL4, ws_tl=WT.ws_timeline_stats(TL4),
                        spread=WT.spread_table(WT.finish_spreads(TL3, TL4)), san=san)
    text = "\n".join(lines)
    rp = plots.geomean(t["gluon-ws / gluon-pipelined"])
    assert lines[0].startswith(f"**GEMM: {W.verdict(rp)} (vs gluon-pipelined)**") and f"geomean {rp:.3f}x" in lines[0]
    assert lines[1].startswith("  GEMM targets: >= 1.00x cuBLAS at 8192^3 (target)")
    assert f"**rms_norm: {W.verdict(plots.geomean(targets['rms_norm']['ws / pipelined']))}**" in text
    assert "The ratio rises with the blocks each CTA walks" in text  # 0.85 / 0.99 / 1.00 in the fixture
    assert "Persistent tail at NUM_STAGES=3" in text and "compute-sanitizer: 4/7 runs clean" in text and "Triton's dispatch protocol" in text
    assert W.takeaways() == [G.pingpong_takeaway(W.EMPTY), G.shape_sweep_takeaway(W.EMPTY)]
    assert "nothing is claimed" in W.takeaways()[0] and "has not run" in W.takeaways()[1]


def test_no_records_give_notes_not_errors(ctx, tmp_path):
    c = cm.setup(W.NB, mode="replay", results_dir=tmp_path)
    empty = cm.load(c)
    assert W.norm_grids(empty) == {} and W.target_tables({}, c.spec) == {} and W.by_blocks({}).empty
    assert W.norm_sweep_tables(W.norm_sweep_records(empty))[0].empty
    assert WT.ws_timeline_stats(None).empty and WT.finish_spreads(None, None) == {}
    assert S.sanitizer_views(P.EMPTY, 0, tmp_path / "sanitizer.jsonl")[0].startswith("**No compute-sanitizer records:**")
    assert S.sanitizer_summary(P.EMPTY, P.EMPTY, P.EMPTY) is None
    assert W.census_notes(P.EMPTY, P.EMPTY) == "**No census rows** (compile failed above)."


@pytest.mark.slow
def test_census_and_sass_at_the_reported_offsets_on_cpu(ctx):
    cen, errors = W.norm_census(cases=(("rms_norm", 4096), ))
    assert not errors and len(cen) == 2
    ws = cen.xs("gluon-ws", level="variant").iloc[0]
    assert ws["setmaxnreg producer"] == ws["producer warps"] * 40 and ws["setmaxnreg consumer"] > ws["setmaxnreg producer"]
    assert cen.xs("gluon-pipelined", level="variant").iloc[0]["USETMAXREG (SASS)"] == 0
    notes = W.census_notes(cen, P.EMPTY)
    assert "wait sites gluon-ws minus gluon-pipelined" in notes
    san, _ = P.load_sanitizer(P.sanitizer_path(ctx))
    sz = P.sanitize_driver()
    src_lines, defs = S.ws_source_lines()
    diag, err = S.diag_source_lines(sz)
    assert err is None and diag
    race, _ = S.race_accesses(san, src_lines, defs, diag)
    tab, contexts, errors = S.sass_check(race[race.kernel == "ws-norm"], sz)
    assert not errors and len(tab) == len(race[race.kernel == "ws-norm"])
    assert tab["SASS here"].iloc[0].startswith("LDS.U8") and tab["kind matches (Read=LDS / Write=STS)"].all()
    assert S.sass_contexts(contexts)[0].startswith("`ws-norm` around `ws_norm_kernel+0xf0`")

