"""gluon_lab.analysis.tma_cache (notebook 01) on the fixture records (tests/fixtures/records/h200)."""
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from gluon_lab import plots
from gluon_lab.analysis import common as cm, tma_cache as ana

FIX = Path(__file__).resolve().parent / "fixtures" / "records"
GRID_RUN, SWEEP_RUN, LN_RUN = "20261129T154542Z-ca640dbf", "20261129T152638Z-c7b518ef", "20261129T154140Z-f27fed65"


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(ana.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def allrec(ctx):
    return cm.load(ctx)


def test_rms_run_is_the_newest_grid_run(allrec, ctx):
    rms, copies, ceil, run = ana.rms_run(allrec)
    assert run == GRID_RUN and set(rms.run_id) == {GRID_RUN}
    assert rms.label.value_counts().to_dict() == {l: 6 for l in ana.RMS_LABELS if l != "copy"}
    assert len(copies) == 6 and set(copies.label) == {"copy"}
    sess = allrec[(allrec.run_id == GRID_RUN) & (allrec.op == "copy") & allrec.M.isna()].iloc[0]
    assert ceil["copy_gbps"] == pytest.approx(sess.bytes / (sess.ms_median * 1e-3) / 1e9, rel=1e-6)
    line = ana.run_line(rms, ceil, ctx.spec, run)
    assert line.startswith(f"run {GRID_RUN}: copy ceiling {ceil['copy_gbps']:.0f} GB/s") and "passed: 42/42" in line


def test_ratio_table_against_the_best_baseline(allrec):
    piv, vb = ana.ratio_table(allrec, "rms_norm")
    assert piv.shape == (6, 6) and "gluon-tma" in piv  # 2 M x 3 N; the TMA-store path is left out
    g = allrec[(allrec.run_id == GRID_RUN) & (allrec.op == "rms_norm") & (allrec.M == 32768) & (allrec.N == 8192)]
    plain = g[~cm.config_value(g, "tma_store", False).fillna(False).astype(bool)]
    base = plain[~plain.variant.str.startswith("gluon")].ms_median.min()
    assert vb.loc[(32768, 8192)] == pytest.approx(base / plain[plain.variant == "gluon-tma"].ms_median.iloc[0])


def test_targets(allrec):
    t = ana.targets(allrec)
    assert t.shape == (7, 3) and t.met.dtype == bool
    piv, vb = ana.ratio_table(allrec, "add_rms_norm")
    row = t[t.target == "add+RMSNorm bf16: at least as fast as the fastest baseline in every cell (ratio ≥ 0.98 ties)"].iloc[0]
    k = vb.idxmin()
    assert row.measured == f"{int((vb >= 0.98).sum())} of 6 cells; slowest cell {vb.min():.3f}× at M×N = {k[0]}×{k[1]}"
    assert bool(row.met) == bool((vb >= 0.98).all())
    gi = plots.geomean(piv["inductor"] / piv["gluon-tma"])
    assert t[t.target == "add+RMSNorm bf16: geometric-mean speed over the grid at least 1.15× torch.compile"
             ].measured.iloc[0] == f"{gi:.3f}×"
    assert not any("issue" in x or ">=" in x for x in t.target)  # in words, no issue numbers
    html = ana.targets_view(allrec).to_html()
    assert html.count("✗ missed") + html.count("✓ met") == 7 and "background-color" in html


def test_headline_numbers_and_figure(allrec):
    rms, _, _, run = ana.rms_run(allrec)
    piv, vb = ana.ratio_table(allrec, "rms_norm")
    nums = dict(ana.headline_numbers(allrec))
    assert nums["gluon-tma vs best baseline"] == (
        f"{plots.geomean(vb):.2f}× geomean over 6 RMSNorm bf16 cells (M 4K–32K × N 4K–16K); wins or ties (≥ 0.98×) "
        f"in {int((vb >= 0.98).sum())} of them (run {run.split('-')[0]})")
    sol = rms[rms.label == "gluon-tma"].set_index(["M", "N"]).sol_datasheet_pct
    b = sol.idxmax()
    assert nums["best SOL"] == f"{sol.max():.0f}% of datasheet bandwidth at {b[0]}×{b[1]} (RMSNorm bf16, gluon-tma)"
    assert nums["vs torch.compile"] == f"{plots.geomean(piv['inductor'] / piv['gluon-tma']):.2f}× geomean (RMSNorm bf16)"
    assert nums["all norms"].startswith("gluon-tma wins or ties the best baseline in ")
    fig = ana.headline_figure(rms)
    assert [a.get_title() for a in fig.axes[:2]] == ["gluon-tma: % of datasheet bandwidth", "gluon-tma speed / fastest baseline"]
    im = fig.axes[1].images[0]
    assert im.norm.vcenter == 1.0  # the ratio panel diverges around 1
    worst = min(vb)
    assert im.norm(worst) < 0.5 if worst < 1 else True
    plt.close(fig)


def test_delta_tables_and_best_per_cell(allrec):
    rms, copies, ceil, _ = ana.rms_run(allrec)
    items = ana.rms_delta_tables(rms)
    assert items[0] == "**inductor -> gluon-tma**" and len(items) == 8
    who = items[-1]
    assert who.shape == (2, 3)
    cell = rms[(rms.M == 4096) & (rms.N == 16384) & ~rms.variant.str.startswith("gluon")]
    assert who.loc[4096, 16384] == cell.loc[cell.ms_median.idxmin(), "label"]
    caveat, _ = ana.rms_caveats(rms, copies, ceil, cm.setup(ana.NB, mode="replay", results_dir=FIX).spec)
    slow = copies[copies.sol_datasheet_pct < 70]
    assert len(slow) and all(f"{int(r.M)}x{int(r.N)}" in caveat for r in slow.itertuples())


def test_other_ops_and_figures(allrec, ctx):
    rms, copies, _, _ = ana.rms_run(allrec)
    f1, f2 = ana.rms_heatmaps(rms, copies)
    assert len(f1.axes) == 2 * len(ana.STRONGEST)
    assert [a.get_title() for a in f2.axes[:4]] == ["torch", "triton", "gluon-tma (TMA store)", "copy"]
    fig, title, table = ana.other_op_section(allrec, "l2_norm")
    assert len(fig.axes) == 2 * 4  # l2_norm: torch, inductor, triton, gluon-tma (no liger)
    assert title == "**l2_norm: best baseline -> gluon-tma**" and table.shape == (2, 3)
    roof = ana.roofline(allrec, ctx.spec, ctx.slug)
    assert [a.get_title() for a in roof.axes] == ["rms_norm", "layer_norm", "l2_norm", "add_rms_norm"]  # a panel per op
    assert all(len(a.lines) == 2 for a in roof.axes)  # datasheet + measured roof in each
    assert len(roof.legends) == 1  # one compact legend, outside the panels
    plt.close("all")


def test_sweeps(allrec):
    sw = ana.sweep_records(allrec)
    assert len(sw) == 80 and set(sw.run_id) == {SWEEP_RUN} and sw.stale.all()  # measured before the heuristic
    best = ana.sweep_best_plain(sw)
    sub = sw[(sw.N == 4096) & (sw.num_warps == 8) & (sw.rows_per_cta == 2) & ~sw.tma_store.astype(bool)]
    assert best.loc[(4096, 8), 2] == pytest.approx(round(sub.sol_datasheet_pct.max(), 1))
    eff = ana.flag_effects(sw)
    assert eff.shape == (3, 3)  # N = 1024, 4096, 16384 x three flags
    piv = sw.pivot_table(index=["N", "num_warps", "rows_per_cta", "one_box", "param_tma"], columns="tma_store",
                         values="ms_median")
    r = (piv[False] / piv[True]).xs(16384, level="N").median()
    assert eff.loc[16384, "tma_store=True speed vs False (median ratio)"] == pytest.approx(round(r, 3))
    items = ana.sweep_section(allrec)
    assert items[0].startswith(f"sweep run `{SWEEP_RUN}`: 80 configs, 80 stale")
    ln = items[-2]
    assert ln.shape == (6, 4)  # (N x warps) x (rows x param_tma) of the LayerNorm sweep


def test_inductor_capture(ctx):
    ik = ana.inductor_kernels(ctx)
    t = ana.inductor_table(ik)
    assert set(t.op) == {"rms_norm", "layer_norm"}
    assert t.set_index(["op", "N"]).loc[("layer_norm", 4096), "global reads of the reused row"] == 3
    assert ana.inductor_example(ik, "rms_norm", 4096).startswith("def triton_")


def test_takeaways(allrec, ctx):
    lines = ana.takeaways(allrec, ana.inductor_kernels(ctx))
    piv, vb = ana.ratio_table(allrec, "rms_norm")
    assert lines[0].startswith("**rms_norm**: gluon-tma") and f"geomean {plots.geomean(vb):.3f}x" in lines[0]
    assert any("Inductor reads the reused row from global memory 2x for rms_norm" in ln for ln in lines)
    assert any(ln.startswith("Sweep N=1024: only 4 warps fit the row") for ln in lines)
    assert any(ln.startswith("TMA store vs plain 128-bit stores") and "not a win" in ln for ln in lines)


def test_no_records_no_crash(allrec, ctx):
    e = allrec.iloc[0:0]
    rms, copies, ceil, run = ana.rms_run(e)
    assert run is None and ana.run_line(rms, ceil, ctx.spec, run) is None
    assert ana.rms_heatmaps(rms, copies) == (None, None)  # was: matplotlib "Number of columns must be a positive integer"
    assert ana.rms_caveats(rms, copies, ceil, ctx.spec) == [None, None]
    assert ana.other_op_section(e, "layer_norm") == ["**layer_norm: missing**"]
    assert ana.roofline(e, ctx.spec, ctx.slug) is None
    assert ana.sweep_section(e) == ["**Sweep: missing**"]
    assert all(m.startswith("missing: ") for m in ana.targets(e).measured)
    assert ana.headline_numbers(e) == [("gluon-tma vs best baseline", "missing: no RMSNorm grid with gluon-tma and a "
                                        "baseline in the records")]
    assert ana.headline_figure(rms) is None
    assert len(ana.takeaways(e, e)) == 1


@pytest.mark.slow
def test_kernel_facing_on_cpu():
    assert "def tma_cache_norm_kernel" in ana.kernel_source()
    assert "def rms_row" in ana.norm_math_sources() and "def heuristic" in ana.heuristic_source()
    assert ana.max_n_table().loc["rms_norm", "bfloat16"] == 65536
    t = ana.census_table(Ns=(4096, ))
    assert len(t) == 3 and t["UTMALDG (SASS)"].iloc[0] >= 1 and t["TMA box"].iloc[2] == "no TMA"
    v, note = ana.census_view(t)
    assert "UTMALDG (SASS)" in v.index and list(v.columns) == list(t.index)  # transposed: a column per kernel
    assert note is None or note.startswith("Zero in every kernel")
