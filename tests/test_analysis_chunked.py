"""gluon_lab.analysis.chunked (notebook 02) on the fixture records (tests/fixtures/records/h200).

The functions take the records the notebook passes (non-stale ones there); the tests pass every
fixture record, so they keep testing the analysis while the kernel sources change."""
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from gluon_lab import plots
from gluon_lab.analysis import chunked as ana, common as cm

FIX = Path(__file__).resolve().parent / "fixtures" / "records"
GRID_RUN, OTHER_RUN = "20261129T171347Z-e8b2f9a8", "20261129T172120Z-3089b260"
GN_RUNS = ("20261129T171916Z-09969c9f", "20261129T172552Z-179e7056")


@pytest.fixture(scope="module")
def allrec():
    return cm.load(cm.setup(ana.NB, mode="replay", results_dir=FIX))


def test_current_drops_stale_records(allrec):
    cur = cm.current(allrec)
    assert len(cur) == len(allrec) - int(allrec.stale.sum()) and not cur.stale.any()


def test_headline_table(allrec):
    heads = ana.headline(allrec)
    run, t = heads["rms_norm"]
    assert run == GRID_RUN and t.shape == (6, 5)  # 2 M x 3 N
    cell = allrec[(allrec.run_id == GRID_RUN) & (allrec.op == "rms_norm") & (allrec.dtype == "bfloat16")
                  & (allrec.M == 16384) & (allrec.N == 5120)].set_index("variant")
    base = cell.drop(index="gluon-chunked")
    assert t.loc[(16384, 5120), "speedup vs best"] == pytest.approx(
        round(base.ms_median.min() / cell.loc["gluon-chunked", "ms_median"], 3))
    assert t.loc[(16384, 5120), "best baseline"] == base.ms_median.idxmin()
    assert t.loc[(16384, 5120), "gluon-chunked SOL%"] == round(cell.loc["gluon-chunked", "sol_datasheet_pct"], 1)
    g = cell.loc["gluon-chunked"]
    assert g.sol_datasheet_pct == pytest.approx(100 * g.bytes / (g.ms_median * 1e-3) / 1e9 / 4800, rel=1e-6)
    items = ana.headline_items(heads)
    assert items[0] == f"**rms_norm bf16** (run {GRID_RUN})" and len(items) == 4


def test_headline_figure_and_heatmaps(allrec):
    heads = ana.headline(allrec)
    fig = ana.headline_figure(heads)
    assert len(fig.axes) == 2 and all(len(ax.lines) == 2 + 1 for ax in fig.axes)  # one line per M, and the 1.0 line
    run, t = heads["rms_norm"]
    y = fig.axes[0].lines[0].get_ydata()  # M = the smaller one, evenly spaced N
    sub = t.xs(sorted(t.index.get_level_values("M").unique())[0], level="M")["speedup vs best"]
    assert list(y) == pytest.approx(list(sub.sort_index()))
    assert [x.get_text() for x in fig.axes[0].get_xticklabels()] == [plots.fmt_size(n) for n in sorted(sub.index)]
    hm, title, table = ana.grid_section(allrec, "layer_norm")
    assert len(hm.axes) == 2 * 5 and table.shape == (2, 3) and title.endswith("torch.compile -> gluon-chunked**")
    plt.close("all")


def test_other_sections(allrec):
    md, table = ana.other_section(allrec, "rms_norm", "float32")
    assert md.startswith(f"**rms_norm float32** (run {OTHER_RUN})") and table.shape == (2, 2)
    _, vb, _ = ana.best_vs(ana.grid(allrec, "l2_norm"))
    md, _ = ana.other_section(allrec, "l2_norm", "bfloat16")
    assert f"geomean {plots.geomean(vb):.3f}x" in md and f"in {int((vb >= 0.98).sum())}/2 cells" in md
    assert ana.other_section(allrec, "l2_norm", "float16") == ["**l2_norm float16: missing**"]


def test_chunk_sweep_and_heuristic(allrec):
    sw = ana.chunk_sweep(allrec)
    assert len(sw) == 42 and set(sw.run_id) == {GRID_RUN}
    t = ana.sweep_table(sw)
    assert list(t.index) == [("layer_norm", 2880), ("layer_norm", 14336), ("rms_norm", 2880), ("rms_norm", 14336)]
    h = ana.heuristic_vs_best(sw).set_index(["op", "N"])
    sub = sw[(sw.op == "rms_norm") & (sw.N == 14336)]
    assert h.loc[("rms_norm", 14336), "best SOL%"] == round(sub.sol_datasheet_pct.max(), 1)
    assert h.loc[("rms_norm", 14336), "heuristic"] == "8w x 1r"


def test_streaming_study(allrec):
    st, copies = ana.stream_records(allrec)
    assert set(st.run_id) == {OTHER_RUN} and len(copies) == 3
    assert {"cached", "stream S=2", "stream S=4", "stream S=8", "inductor"} <= set(st.label)
    t = ana.stream_table(st)
    assert t.shape[0] == 6 and (t.loc[("rms_norm", 131072), "cached"] != t.loc[("rms_norm", 131072), "cached"])
    r = st[(st.op == "rms_norm") & (st.N == 65536) & (st.label == "stream S=4")].iloc[0]
    assert t.loc[("rms_norm", 65536), "stream S=4"] == round(r.sol_datasheet_pct, 1)
    fig = ana.stream_figure(st, copies)
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log"
    plt.close("all")
    refused = ana.refused(st)
    assert not refused or len(refused[1]) == int((~st.passed.astype(bool)).sum())


def test_group_norm(allrec):
    gn = ana.group_records(allrec)
    assert set(gn[gn.variant == "gluon-chunked"].run_id) == {GN_RUNS[1]}  # the re-measured kernel
    assert set(gn[gn.variant == "torch"].run_id) == {GN_RUNS[0]}
    assert "compare records of different runs" in ana.group_runs(gn)
    t = ana.group_table(gn)
    key = ("group_norm", "nchw", "8x320x64x64")  # B x C x H x W
    ms = gn.set_index(["op", "layout", "shape", "variant"]).ms_median
    # the fixture predates gluon-split: the best gluon variant is gluon-chunked
    assert t.loc[key, "best gluon vs eager"] == round(ms[key + ("torch", )] / ms[key + ("gluon-chunked", )], 2)
    assert t.loc[key, "best gluon vs inductor"] == round(ms[key + ("inductor", )] / ms[key + ("gluon-chunked", )], 2)
    assert t.shape == (12, 5)  # 2 ops x 2 layouts x 3 shapes
    fig = ana.group_figure(gn)  # one panel per (op, layout) with a gluon variant: the fixture's NCHW only
    assert [a.get_title() for a in fig.axes if a.get_title()] == ["GroupNorm, nchw", "InstanceNorm, nchw"]
    plt.close("all")
    assert ana.group_figure(gn.iloc[0:0]) is None


def test_targets_and_takeaways(allrec):
    t = ana.targets(allrec)
    assert t.shape == (5, 3)
    _, vb, _ = ana.best_vs(ana.grid(allrec, "layer_norm"))
    assert bool(t.iloc[2].met) == bool((vb >= 0.98).all())
    assert t.iloc[4].target.startswith("GroupNorm + InstanceNorm bf16, nchw") and not t.iloc[4].met
    assert "over 6 cells" in t.iloc[4].measured  # the fixture's NCHW cells (channels-last: no gluon records)
    assert not any("issue" in x for x in t.target)  # targets in words, no issue numbers
    assert t.iloc[1].target == "RMSNorm bf16: geometric-mean speed over the grid at least 1.15× torch.compile"
    html = ana.targets_view(allrec).to_html()
    assert "✗ missed" in html and "background-color" in html
    lines = ana.takeaways(allrec)
    assert lines[1].startswith("**layer_norm bf16**") and "loses in no cell" in lines[1]
    assert any("16 warps would win this cell" in ln for ln in lines)
    assert any(ln.startswith("GroupNorm/InstanceNorm nchw: the faster gluon variant vs torch.compile") for ln in lines)


def test_no_records_no_crash(allrec):
    e = allrec.iloc[0:0]
    assert ana.headline(e) == {} and ana.headline_figure({}) is None
    assert ana.headline_items({}) == ["**rms_norm bf16: missing**", "**layer_norm bf16: missing**"]
    assert ana.grid_section(e, "rms_norm") == [] and len(ana.chunk_sweep(e)) == 0
    st, copies = ana.stream_records(e)
    assert len(st) == 0 and ana.stream_figure(st, copies) is None
    assert len(ana.group_records(e)) == 0 and ana.group_runs(e) is None
    assert all(m.startswith("missing: ") for m in ana.targets(e).measured) and ana.takeaways(e) == []
    assert ana.headline_numbers(e) == [("gluon-chunked vs best baseline", "missing: no bf16 RMSNorm / LayerNorm grid with "
                                        "gluon-chunked and a baseline in the current records")]
    assert ana.sweep_view(e) == [] and ana.group_view(e) == []


def test_headline_numbers_computed_from_the_grid(allrec):
    heads = ana.headline(allrec)
    import pandas as pd
    allt = pd.concat({op: t for op, (_, t) in heads.items()}, names=["op"])
    nums = dict(ana.headline_numbers(allrec))
    r = allt["speedup vs best"]  # every N of the grid is not a power of two
    assert nums["gluon-chunked vs best baseline, non-power-of-2 N"].startswith(
        f"{plots.geomean(r):.2f}× geomean over {len(r)} cells (RMSNorm + LayerNorm bf16")
    assert f"wins or ties (≥ 0.98×) in {int((r >= 0.98).sum())} of them (run 20261129T171347Z)" in \
        nums["gluon-chunked vs best baseline, non-power-of-2 N"]
    b = allt["gluon-chunked SOL%"].idxmax()
    assert nums["best SOL"].startswith(f"{allt.loc[b, 'gluon-chunked SOL%']:.0f}% of datasheet bandwidth at {b[1]}×{b[2]}")
    assert nums["vs torch.compile"] == f"{plots.geomean(allt['vs torch.compile']):.2f}× geomean over the same cells"


def test_tables_say_why_a_cell_is_empty(allrec):
    sw = ana.chunk_sweep(allrec)
    t, legend = ana.sweep_view(sw)
    assert not t.isna().any().any() and "not swept" in legend
    assert t.loc[("rms_norm", 2880), (16, 1)] == "not swept"  # the plan times 16 warps only for N >= 8192
    st, _ = ana.stream_records(allrec)
    sv = ana.stream_view(st)
    assert not sv.isna().any().any()
    assert sv.loc[("rms_norm", 131072), "cached"] == "cannot cache: smem"  # the configure hook refuses it
    assert sv.loc[("rms_norm", 131072), "triton"] == "refused (error below)"  # an error record of the run
    gv = ana.group_view(ana.group_records(allrec))
    tabs = [x for x in gv if isinstance(x, pd.DataFrame)]
    assert len(tabs) == 2 and not any(x.isna().any().any() for x in tabs)
    assert "gluon-chunked: not measured" in gv[-1] and "gluon-chunked SOL%" not in tabs[1].columns


def test_plan_table_on_cpu():
    t = ana.plan_table((5120, 2880), dtypes=("bfloat16", ))
    assert t.shape == (2, 11)
    assert t.set_index("N").loc[5120, "pow2 waste %"] == 37.5  # 8192 lanes for 5120 elements
    assert ana.plan().stream_M == 4096


@pytest.mark.slow
def test_kernel_facing_on_cpu():
    assert "def chunked_norm_kernel" in ana.kernel_source()
    assert "def layer_row" in ana.norm_math_sources()
    assert "def for_row" in ana.plan_source() and "def make" in ana.group_plan_source()
    gc = ana.group_census_table(cases=(("nchw", 2, 64, 256, 8), ("channels_last", 2, 64, 256, 8)))
    assert len(gc) == 8 and all(i.split(" | ")[0] in ("split rows_stats", "split split_finalize", "split rows_apply",
                                                      "split cols_stats", "split cols_apply", "chunked")
                                for i in gc.index)
    assert gc.loc["split rows_stats | nchw B=2 C=64 S=256 G=8", "ld_global_by_bits"] == {128: 4}
    t = ana.census_table(Ns=(5120, ))
    assert list(t.index) == ["gluon-chunked N=5120", "triton N=5120"]
