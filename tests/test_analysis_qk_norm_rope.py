"""gluon_lab.analysis.qk_norm_rope (notebook 05) on fixture records (a subset of the H200 runs of
2026-12-01 15:43-15:55 UTC: the D = 128 sweep with its per-size copies and part of the TMA knob sweep
(run ...d5df5b6a), D = 256 cells (run ...631c6872), gluon-fused's warps (run ...2504bc2a), and one case
of the Inductor PTX capture; tests/fixtures/records/h200/05-fused-qk-norm-rope.*): every number it
shows is recomputed here from the records, and it degrades to missing notes without them."""
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
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


def _raw(D=128):
    rows = [json.loads(l) for l in (FIX / "h200" / "05-fused-qk-norm-rope.jsonl").read_text().splitlines()]
    return [r for r in rows if r["op"] == "qk_norm_rope" and not (r.get("config") or {}).get("study")
            and r["shape"]["D"] == D]


def test_best_gluon_vs_torch_compile_is_recomputed(df, ctx):
    rows = _raw()
    us = {}
    for r in rows:
        us.setdefault((r["shape"]["Hq"], r["shape"]["Hk"], r["shape"]["T"]), {})[r["variant"]] = r["ms_median"]
    want = {k: v["inductor"] / min(v[g] for g in ana.GLUON) for k, v in us.items()}
    got = ana.ratios(df)
    assert len(got) == len(want) == 42
    for k, x in got.items():
        assert x == pytest.approx(want[tuple(int(i) for i in k)], rel=1e-9)
    nums = dict(ana.headline_numbers(df, ctx.spec))
    assert nums["best Gluon vs torch.compile"].startswith(f"{plots.geomean(got):.2f}× geomean over the 42-case")
    lines = ana.takeaways(df, ctx.spec)
    assert lines[0].startswith(f"best Gluon vs torch.compile (D = 128, 42 cells): geomean {plots.geomean(got):.2f}×")
    vr = ana.variant_ratios(df)
    tma = {k: v["inductor"] / v["gluon-tma"] for k, v in us.items()}
    assert vr.loc["gluon-tma", "geomean (x)"] == pytest.approx(plots.geomean(list(tma.values())), abs=0.006)


def test_large_t_against_the_copy_of_the_same_bytes(df):
    lt = ana.large_t(df)
    row = lt.loc[(128, 32, 8, 8192)]
    recs = {r["variant"]: r for r in _raw() if r["shape"]["T"] == 8192 and r["shape"]["Hq"] == 32}
    best = min(ana.GLUON, key=lambda v: recs[v]["ms_median"])
    assert row["best Gluon"] == best
    copy = [json.loads(l) for l in (FIX / "h200" / "05-fused-qk-norm-rope.jsonl").read_text().splitlines()]
    copy = [r for r in copy if r["op"] == "copy" and r["shape"].get("M") == 8192 and r["shape"].get("N") == 40 * 128]
    gbps = recs[best]["bytes"] / recs[best]["ms_median"] / 1e6
    assert row["% same-size copy"] == pytest.approx(100 * gbps / copy[-1]["gbps"], abs=0.06)
    assert (256, 32, 8, 8192) in lt.index and not np.isnan(lt.loc[(256, 32, 8, 8192), "% same-size copy"])


def test_targets_sweeps_and_figures(df, ctx):
    t = ana.targets(df)
    assert t is not None and 8192 in t.data.index
    ts = ana.tma_sweep(df)
    assert ts is not None and "gluon-tma (heuristic)" in ts.columns and len(ts) == 2
    fs = ana.fused_sweep(df)
    assert fs is not None and len(fs.columns) == 4
    fig = ana.headline_figure(df, ctx.spec, ctx.slug)
    assert [a.get_title() for a in fig.axes][:2] == ["Hq=16, Hk=8, D=128", "Hq=32, Hk=8, D=128"]
    assert any(l.get_label() == "copy of the same bytes" for l in fig.axes[0].lines)
    assert ana.dims_figure(df, ctx.spec, ctx.slug, 256) is not None and ana.dims_figure(df, ctx.spec, ctx.slug, 64) is None
    plt.close("all")


def test_inductor_census_counts_the_recorded_ptx(ctx):
    from gluon_lab import codegen
    ic = ana.inductor_census(ctx)
    art = json.loads(ctx.path(".inductor-kernels.json").read_text())
    entries = next(iter(art["kernels"].values()))
    assert len(ic) == len(entries)
    e = entries[0]
    c = codegen.ptx_census(e["ptx"])
    assert ic.iloc[0]["ld.global by bits"] == c["ld_global_by_bits"] and ic.iloc[0]["bar.sync"] == c["bar_sync"]
    assert ic["registers"].notna().all()  # the .version header lowered for the wheel's ptxas
    s = ana.inductor_summary(ic)
    assert int(s.iloc[0]["kernels launched"]) == len({x["name"] for x in entries}) == 5


def test_degrades_without_records(df, ctx):
    e = df.iloc[0:0]
    assert ana.speed_table(e) is None and ana.targets(e) is None and ana.persistent_sweep(e) is None
    assert ana.tma_sweep(e) is None and ana.large_t(e) is None and ana.fused_sweep(e) is None
    assert ana.headline_figure(e, ctx.spec, ctx.slug) is None and ana.roofline(e, ctx.spec, ctx.slug) is None
    assert dict(ana.headline_numbers(e, ctx.spec)) == {
        "best Gluon vs torch.compile": "missing: no D = 128 sweep with both variants in the records"}
    assert ana.inductor_summary(None) is None
