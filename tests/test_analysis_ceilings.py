"""gluon_lab.analysis.ceilings (notebook 00) on the fixture records (tests/fixtures/records/h200)."""
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from gluon_lab import plots
from gluon_lab.analysis import ceilings as ana, common as cm

FIX = Path(__file__).resolve().parent / "fixtures" / "records"


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(ana.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def df(ctx):
    return cm.load(ctx, newest_only=True)


def test_ceilings_table_recomputed_from_bytes_and_ms(df, ctx):
    t = ana.ceilings_table(df, ctx.spec)
    copy = df[(df.op == "copy") & df.M.isna()].iloc[0]
    mm = df[df.op == "matmul"].iloc[0]
    gbps = copy.bytes / (copy.ms_median * 1e-3) / 1e9
    tflops = mm.flops / (mm.ms_median * 1e-3) / 1e12
    assert t.shape == (2, 4)
    assert t.iloc[0]["measured (this run)"] == pytest.approx(round(gbps, 1), abs=0.05)
    assert t.iloc[0]["measured / datasheet %"] == pytest.approx(round(100 * gbps / 4800, 1), abs=0.05)
    assert t.iloc[1]["measured (this run)"] == pytest.approx(round(tflops, 1), abs=0.05)
    assert t.index[0] == f"copy GB/s ({copy.bytes / 2**30:.0f} GiB moved)"
    assert ana.ceilings_table(df, None) is None and ana.ceilings_table(df.iloc[0:0], ctx.spec) is None


def test_baseline_grid_and_sol_from_bytes(df):
    g = ana.baseline_grid(df)
    assert g.variant.value_counts().to_dict() == {"copy": 20, "torch": 20, "inductor": 20, "triton": 20}
    r = g[(g.variant == "triton") & (g.M == 4096) & (g.N == 5120)].iloc[0]
    assert r.sol_datasheet_pct == pytest.approx(100 * r.bytes / (r.ms_median * 1e-3) / 1e9 / 4800, rel=1e-6)


def test_delta_tables_one_cell(df):
    g = ana.baseline_grid(df)
    items = ana.delta_tables(g)
    assert items[0] == "**torch -> inductor**" and len(items) == 6
    t = items[1]
    assert t.shape == (4, 5)  # M x N
    b = g[(g.variant == "torch") & (g.M == 8192) & (g.N == 12288)].iloc[0]
    v = g[(g.variant == "inductor") & (g.M == 8192) & (g.N == 12288)].iloc[0]
    d = (b.ms_median / v.ms_median - 1) * 100
    assert t.loc[8192, 12288] == f"{b.sol_datasheet_pct:.1f}% -> {v.sol_datasheet_pct:.1f}% ({d:+.1f}%)"


def test_timer_study(df):
    repeats, versus = ana.timer_study(df)
    t = ana.timer_records(df)
    assert len(t) == 48 and repeats.shape == (16, 4) and versus.shape == (8, 3)
    assert (repeats["repeats"] == 3).all()
    cell = t[(t.variant == "triton") & (t.M == 4096) & (t.N == 4096)]
    ratio = (cell[cell.timer == "do_bench-l2flush"].ms_median.median() / cell[cell.timer == "cudagraph"].ms_median.median())
    assert versus.loc[("triton", "4096x4096"), "do_bench / graph (x)"] == pytest.approx(round(ratio, 2))
    assert ana.timer_study(df[df.op == "copy"]) == (None, None)


def test_figures(df, ctx):
    g = ana.baseline_grid(df)
    fig = ana.grid_heatmaps(g, ctx.spec, ctx.slug)
    assert len(fig.axes) == 8  # torch, inductor, triton, copy + colorbars
    assert [a.get_title() for a in fig.axes[:4]] == ["torch", "inductor", "triton", "copy"]
    fig2 = ana.measured_heatmaps(g)
    assert len(fig2.axes) == 6
    fig3 = ana.roofline(df, ctx.spec, ctx.slug)
    assert len(fig3.axes) == 1 and len(fig3.axes[0].lines) == 2  # datasheet roof + measured roof
    plt.close("all")


def test_headline_numbers_and_figure(df, ctx):
    nums = dict(ana.headline_numbers(df, ctx.spec))
    copy = df[(df.op == "copy") & df.M.isna()].sort_values("timestamp").iloc[-1]
    gbps = copy.bytes / (copy.ms_median * 1e-3) / 1e9
    assert nums["copy ceiling"].startswith(f"{gbps:.0f} GB/s = {100 * gbps / 4800:.0f}% of the 4800 GB/s datasheet")
    mm = df[df.op == "matmul"].sort_values("timestamp").iloc[-1]
    tf = mm.flops / (mm.ms_median * 1e-3) / 1e12
    assert nums["bf16 matmul ceiling"].startswith(f"{tf:.0f} TFLOP/s = {100 * tf / ctx.spec.bf16_tflops:.0f}% of the")
    g = ana.baseline_grid(df)
    g = g[g.variant != "copy"]
    best = g.loc[g.groupby(["M", "N"]).ms_median.idxmin()].sol_datasheet_pct
    assert nums["best RMSNorm baseline"].startswith(f"{best.min():.0f}–{best.max():.0f}% of datasheet bandwidth over 20 M×N cells")
    assert nums["host path per call"].startswith("missing") or "µs for the gluon-lab variants" in nums["host path per call"]
    fig = ana.headline_figure(ana.baseline_grid(df), ctx.spec, ctx.slug)
    assert [a.get_title() for a in fig.axes] == ["fastest baseline per cell", "y.copy_(x), same shape"]
    assert all("\n" in t.get_text() for t in fig.axes[0].texts)  # the value and which baseline
    plt.close(fig)


def test_takeaways_are_computed(df, ctx):
    lines = ana.takeaways(df, ctx.spec)
    g = ana.baseline_grid(df)
    g = g[g.variant != "copy"]
    piv = g.pivot_table(index=["M", "N"], columns="variant", values="ms_median")
    n_inductor = int((piv.idxmin(axis=1) == "inductor").sum())
    assert f"inductor in {n_inductor} of 20" in lines[1]
    assert f"geomean {plots.geomean(piv['torch'] / piv['inductor']):.2f}x" in lines[2]
    assert any(ln.startswith("N=5120 (not a power of two)") and "8192 lanes" in ln for ln in lines)
    assert lines[-1].startswith(f"{len(df)} records shown, {int(df['stale'].sum())} stale")


def test_everything_degrades_without_records(df, ctx):
    e = df.iloc[0:0]
    g = ana.baseline_grid(e)
    assert ana.grid_heatmaps(g, ctx.spec, ctx.slug) is None and ana.measured_heatmaps(g) is None
    assert ana.roofline(e, ctx.spec, ctx.slug) is None and ana.delta_tables(g) == []
    assert ana.headline_figure(g, ctx.spec, ctx.slug) is None
    assert dict(ana.headline_numbers(e, ctx.spec)) == {
        "ceilings": "missing: no copy / matmul ceiling record for this GPU",
        "best RMSNorm baseline": "missing: no RMSNorm baseline grid in the records",
        "host path per call": "missing: no dispatch study in the records"}
    assert ana.timer_study(e) == (None, None)
    assert ana.dispatch_table(e) is None and ana.dispatch_targets(e) is None and ana.fastpath_grid(e) is None
    assert ana.block_table(e) is None and ana.block_targets(e) is None
    assert ana.takeaways(e, ctx.spec) == [
        "SM clock: not recorded (no record carries one), so the matmul ceiling is not tied to a clock.",
        "0 records shown, 0 stale (kernel source changed since they were measured)."]


@pytest.mark.slow
def test_kernel_facing_census_on_cpu():
    assert "def rms_norm_triton_kernel" in ana.baseline_source()
    t = ana.census_table(Ns=(5120, ))
    assert list(t.index) == ["triton rms_norm N=5120"]
