"""gluon_lab.analysis.qk_norm_rope (notebook 05) on fixture records (a subset of the H200 run
20261201T144800Z, tests/fixtures/records/h200/05-fused-qk-norm-rope.jsonl): every number it shows is
recomputed here from the records, and it degrades to missing notes without them."""
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from gluon_lab import plots
from gluon_lab.analysis import common as cm, qk_norm_rope as ana

FIX = Path(__file__).resolve().parent / "fixtures" / "records"


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(ana.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def df(ctx):
    return cm.load(ctx)


def test_speed_vs_torch_compile_is_recomputed(df, ctx):
    d = ana.sweep(df)
    d = d[d.D == 128]
    piv = d.pivot_table(index=["Hq", "Hk", "T"], columns="variant", values="ms_median")
    r = piv["inductor"] / piv["gluon-fused"]
    assert ana.ratios(df).round(3).equals(r.round(3))
    nums = dict(ana.headline_numbers(df, ctx.spec))
    assert nums["gluon-fused vs torch.compile"].startswith(f"{plots.geomean(r):.2f}× geomean over the {len(r)}-case")
    lines = ana.takeaways(df, ctx.spec)
    assert lines[0].startswith(f"gluon-fused vs torch.compile (D = 128, {len(r)} cells): geomean {plots.geomean(r):.2f}×")


def test_targets_and_tables(df, ctx):
    t = ana.targets(df)
    assert t is not None and 8192 in t.data.index
    assert ana.persistent_sweep(df) is not None
    fig = ana.headline_figure(df, ctx.spec, ctx.slug)
    assert [a.get_title() for a in fig.axes][:2] == ["Hq=16, Hk=8, D=128", "Hq=32, Hk=8, D=128"]
    plt.close("all")


def test_degrades_without_records(df, ctx):
    e = df.iloc[0:0]
    assert ana.speed_table(e) is None and ana.targets(e) is None and ana.persistent_sweep(e) is None
    assert ana.headline_figure(e, ctx.spec, ctx.slug) is None and ana.roofline(e, ctx.spec, ctx.slug) is None
    assert dict(ana.headline_numbers(e, ctx.spec)) == {
        "gluon-fused vs torch.compile": "missing: no D = 128 sweep with both variants in the records"}
