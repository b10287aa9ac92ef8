"""gluon_lab.analysis.convolution (notebook 06) on fixture records (a subset of the H200 runs of
2026-12-01 16:13-16:31 UTC, tests/fixtures/records/h200/06-convolution.jsonl: the final fprop, dgrad and
wgrad runs, part of the knob sweep, and the first run's cuDNN records): every number it shows is recomputed here from
the records, and it degrades to missing notes without them."""
import json
from pathlib import Path

import pytest

from gluon_lab import plots
from gluon_lab.analysis import common as cm, convolution as ana

FIX = Path(__file__).resolve().parent / "fixtures" / "records"


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(ana.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def df(ctx):
    return cm.load(ctx)


def _raw():
    return [json.loads(l) for l in (FIX / "h200" / "06-convolution.jsonl").read_text().splitlines()]


def test_tflops_and_ratios_are_recomputed_within_one_run(df, ctx):
    t = ana.tflops_table(df)
    run = [r for r in _raw() if r["op"] == "conv2d" and r["run_id"] == max(x["run_id"] for x in _raw() if x["op"] == "conv2d")]
    by = {(r["shape"]["Ci"], r["shape"]["R"], r["shape"]["stride"], r["shape"]["B"]): r for r in run if r["variant"] == "torch"}
    ours = {(r["shape"]["Ci"], r["shape"]["R"], r["shape"]["stride"], r["shape"]["B"]): r for r in run
            if r["variant"] == "gluon-pipelined"}
    want = {k: by[k]["ms_median"] / ours[k]["ms_median"] for k in by}  # same FLOPs: time ratio = TFLOP/s ratio
    got = t["gluon-pipelined vs cuDNN (x)"]
    assert len(got) == len(want) == 6
    assert sorted(round(x, 2) for x in got) == sorted(round(x, 2) for x in want.values())
    nums = dict(ana.headline_numbers(df, ctx.spec))
    assert nums["Gluon fprop vs cuDNN"].startswith(f"{plots.geomean(list(want.values())):.2f}× geomean over 6 shapes")
    g = ana.targets(df)
    assert g is not None and len(g.data) == 6
    # dgrad: the Gluon (stride-1) vs cuDNN ratio of the dgrad run, shown where it ran
    d = [r for r in _raw() if r["op"] == "conv2d_input_grad"]
    key = lambda r: (r["shape"]["Ci"], r["shape"]["R"], r["shape"]["stride"], r["shape"]["B"])  # noqa: E731
    base = {key(r): r["ms_median"] for r in d if r["variant"] == "torch"}
    want_d = sorted(round(base[key(r)] / r["ms_median"], 2) for r in d if r["variant"] == "gluon-pipelined")
    import pandas as pd
    col = pd.to_numeric(g.data["dgrad ≥ 1.5× cuDNN"], errors="coerce")
    assert sorted(round(x, 2) for x in col.dropna()) == want_d and len(want_d) == 4
    wg = [r for r in _raw() if r["op"] == "conv2d_weight_grad"]
    wb = {key(r): r["ms_median"] for r in wg if r["variant"] == "torch"}
    wr = [wb[key(r)] / r["ms_median"] for r in wg if r["variant"] == "gluon-pipelined"]
    assert sorted(round(x, 2) for x in pd.to_numeric(g.data["wgrad ≥ 1.0× cuDNN"], errors="coerce").dropna()) == \
        sorted(round(x, 2) for x in wr) and len(wr) == 6
    assert nums["Gluon wgrad vs cuDNN"].startswith(f"{plots.geomean(wr):.2f}× geomean over 6 shapes")
    assert nums["Gluon dgrad vs cuDNN"].startswith(f"{plots.geomean([base[key(r)] / r['ms_median'] for r in d if r['variant'] == 'gluon-pipelined']):.2f}× geomean over 4 stride-1 shapes")
    import matplotlib.pyplot as plt
    fig = ana.headline_figure(df, ctx.spec, ctx.slug)
    assert len(fig.axes[0].patches) == 24  # 6 shapes x 4 variants
    plt.close("all")


def test_sweep_paths_and_takeaways(df, ctx):
    sw = ana.sweep_table(df)
    assert sw is not None and "heuristic" in sw.columns and len(sw) == 2
    ap = ana.a_paths()
    assert set(ap["A path"]) == {"tma", "none"}
    lines = ana.takeaways(df, ctx.spec)
    assert any(l.startswith("cuDNN (cudnn.benchmark) varies between runs") for l in lines)
    assert any(l.startswith("Not built yet: the stride-2 dgrad in Gluon") for l in lines)
    assert any(l.startswith("dgrad (stride 1: the fprop kernel on grad_output") for l in lines)


def test_degrades_without_records(df, ctx):
    e = df.iloc[0:0]
    assert ana.tflops_table(e) is None and ana.targets(e) is None and ana.sweep_table(e) is None
    assert ana.roofline(e, ctx.spec, ctx.slug) is None and ana.headline_figure(e, ctx.spec, ctx.slug) is None
    assert dict(ana.headline_numbers(e, ctx.spec)) == {"Gluon fprop vs cuDNN": "missing: no run with both in the records"}
