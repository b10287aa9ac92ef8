"""gluon_lab.analysis.convolution (notebook 06) on fixture records (a subset of the H200 runs of
2026-12-01, tests/fixtures/records/h200/06-convolution.jsonl: the final run 20261201T173305Z's fprop (incl.
the gather-only shapes), dgrad, wgrad and part of its sweeps, plus an earlier run's cuDNN records; and that
run's timeline JSON): every number it shows is recomputed here from the records, and it degrades to missing
notes without them."""
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


def _key(r):
    return tuple(r["shape"][k] for k in ana.KEYS)


def test_tflops_and_ratios_are_recomputed_within_one_run(df, ctx):
    import pandas as pd
    t = ana.tflops_table(df)
    run_id = max(x["run_id"] for x in _raw() if x["op"] == "conv2d")
    run = [r for r in _raw() if r["op"] == "conv2d" and r["run_id"] == run_id and "study" not in r["config"]]
    by = {_key(r): r for r in run if r["variant"] == "torch"}
    # the Gluon fprop of a shape: gluon-pipelined where it ran (the TMA path), else gluon-gather
    ours = {_key(r): r for r in run if r["variant"] == "gluon-gather"}
    ours.update({_key(r): r for r in run if r["variant"] == "gluon-pipelined"})
    want = {k: by[k]["ms_median"] / ours[k]["ms_median"] for k in by}  # same FLOPs: time ratio = TFLOP/s ratio
    got = t["gluon-pipelined vs cuDNN (x)"]
    assert len(got) == len(want) == 8
    assert sorted(round(x, 2) for x in got) == sorted(round(x, 2) for x in want.values())
    nums = dict(ana.headline_numbers(df, ctx.spec))
    assert nums["Gluon fprop vs cuDNN"].startswith(f"{plots.geomean(list(want.values())):.2f}× geomean over 8 shapes")
    g = ana.targets(df)
    assert g is not None and len(g.data) == 8
    for op, col, n in (("conv2d_input_grad", "dgrad ≥ 1.5× cuDNN", 6), ("conv2d_weight_grad", "wgrad ≥ 1.0× cuDNN", 6)):
        d = [r for r in _raw() if r["op"] == op and "study" not in r["config"]]
        base = {_key(r): r["ms_median"] for r in d if r["variant"] == "torch"}
        want_d = [base[_key(r)] / r["ms_median"] for r in d if r["variant"] == "gluon-pipelined"]
        vals = pd.to_numeric(g.data[col], errors="coerce").dropna()
        assert sorted(round(x, 2) for x in vals) == sorted(round(x, 2) for x in want_d) and len(want_d) == n, op
        name = "Gluon dgrad vs cuDNN" if op == "conv2d_input_grad" else "Gluon wgrad vs cuDNN"
        assert nums[name].startswith(f"{plots.geomean(want_d):.2f}× geomean over {n} shapes"), nums[name]
    assert (g.data.loc[[k for k in g.data.index if "65x65" in k], "dgrad ≥ 1.5× cuDNN"] == "n/a").all()
    import matplotlib.pyplot as plt
    fig = ana.headline_figure(df, ctx.spec, ctx.slug)
    assert len(fig.axes[0].patches) == 8 * 5  # 8 shapes x 5 variants (absent ones are zero-height NaN bars)
    plt.close("all")


def test_sweeps_paths_timeline_and_takeaways(df, ctx):
    sw = ana.sweep_table(df)
    assert sw is not None and "heuristic" in sw.columns and len(sw) == 1  # the fixture keeps SD 3x3's sweep
    raw = [r for r in _raw() if r["config"].get("study") == "fprop-sweep"]
    assert sw.drop(columns="heuristic").max(axis=1).iloc[0] == round(max(r["tflops"] for r in raw), 1)
    assert ana.sweep_table(df, "wgrad-sweep") is not None and ana.sweep_table(df, "gather-sweep") is not None
    ap = ana.a_paths()
    assert set(ap["A path"]) == {"tma", "cp.async", "pad + cp.async"}
    assert set(ap.loc[ap["A path"] != "tma", "Gluon variant"]) == {"gluon-gather"}
    TL = ana.load_timeline(ctx)
    st = ana.timeline_stats(TL)
    assert st is not None and len(st) == 2 and (st["CTAs"] == 132).all()
    c0 = [c for c in TL["timelines"]["128,384,384,64,64,3,1,1"]["ns"] if c]
    import numpy as np
    loop = np.median(np.concatenate([np.asarray(c, float).reshape(-1, 4) @ np.array([0, -1, 1, 0]) for c in c0]))
    assert round(loop / 1e3, 3) == st["k-loop (µs)"].iloc[0]
    import matplotlib.pyplot as plt
    assert ana.timeline_figure(TL) is not None and ana.timeline_figure(None) is None
    plt.close("all")
    lines = ana.takeaways(df, ctx.spec)
    assert any(l.startswith("cuDNN (cudnn.benchmark) varies between runs") for l in lines)
    assert any(l.startswith("Not built yet: a stream-K split of the last wave") for l in lines)
    assert any(l.startswith("dgrad (the fprop kernel on grad_output, one launch per output parity") for l in lines)
    assert any(l.startswith("gluon-gather (16-byte cp.async") for l in lines)


def test_degrades_without_records(df, ctx):
    e = df.iloc[0:0]
    assert ana.tflops_table(e) is None and ana.targets(e) is None and ana.sweep_table(e) is None
    assert ana.roofline(e, ctx.spec, ctx.slug) is None and ana.headline_figure(e, ctx.spec, ctx.slug) is None
    assert dict(ana.headline_numbers(e, ctx.spec)) == {"Gluon fprop vs cuDNN": "missing: no run with both in the records"}


def test_schedule_table_and_wave_map_from_the_committed_records():
    """The 'schedule' study of the committed H200 records (gluon-ws fprop / dgrad under every schedule): each
    cell is the record's median in µs, and the wave map's split plans are the ones the kernel's rule picks
    (split-K on the SM-idle shapes, data-parallel where the tiles fill the SMs)."""
    root = Path(__file__).resolve().parent.parent / "results"
    c = cm.setup(ana.NB, mode="replay", results_dir=root)
    d = cm.load(c)
    t = ana.schedule_table(d)
    raw = [json.loads(l) for l in (root / "h200" / "06-convolution.jsonl").read_text().splitlines()]
    run = t.columns.name.split("run ")[1].rstrip(")")
    rec = [r for r in raw if r["run_id"] == run and r["op"] == "conv2d" and r["variant"] == "gluon-ws"
           and r["config"].get("study") == "schedule" and r["config"].get("split_k") == 8
           and r["shape"]["H"] == 8 and r["shape"]["Ci"] == 1280 and r["shape"]["R"] == 3]
    c8 = rec[-1]["config"]  # the tile is part of the column: BN 128 and 256 apart, and the ring depth
    col = f"8x8x{c8['BN']} s{c8['num_stages']} w{c8['num_warps']} split-K 8"
    assert col in t.columns and any(c.endswith("data-parallel") for c in t.columns), list(t.columns)
    assert t.loc["2x1280→1280 8x8 3x3 s1", col] == round(1000 * rec[-1]["ms_median"], 1)
    w = ana.wave_map()  # BN 128 under split-K where it fills more SMs (conv_ws._split_bn): 20 tiles x 6 slices
    assert tuple(w.loc["2x1280→1280 8x8 3x3 s1", ["patch", "schedule", "units"]]) == ("8x8x128", "split-K 6", 120)
    assert tuple(w.loc["2x1280→1280 16x16 3x3 s1", ["patch", "schedule"]]) == ("8x16x256", "split-K 6")  # long slices
    assert w.loc["128x384→384 64x64 3x3 s1", "schedule"] == "data-parallel"
    assert ana.wave_map(op=ana.DGRAD).loc["4x1280→1280 8x8 1x1 s1", "schedule"] == "split-K 3"
    ww = ana.wave_map(op=ana.WGRAD)  # wgrad on the template: 900 tiles of 2 k-steps fill the SMs; SD 3x3 splits
    assert tuple(ww.loc["2x1280→1280 8x8 3x3 s1", ["patch", "tiles", "k-steps / tile", "schedule"]]) == \
        ("8x8 128x128", 900, 2, "data-parallel")
    assert ww.loc["8x320→320 64x64 3x3 s1", "schedule"] == "split-K 8"


def test_best_gluon_and_issue_targets_recomputed_from_the_records(df):
    """best_gluon: per shape of the newest run with cuDNN, the fastest Gluon variant and cuDNN's time ÷ its time
    (recomputed here from the raw records of that run); issue_targets: the geomean and every-shape bars on those
    ratios, met only where the numbers say so."""
    t = ana.best_gluon(df, ana.OP)
    raw = [r for r in _raw() if r["op"] == "conv2d" and "study" not in r["config"] and r["passed"]]
    run = max((r for r in raw if r["variant"] == "torch"), key=lambda r: r["timestamp"])["run_id"]
    by = {}
    for r in (r for r in raw if r["run_id"] == run):
        by.setdefault(_key(r), {})[r["variant"]] = r["ms_median"]
    want = {}
    for k, us in by.items():
        ours = {v: us[v] for v in ana.GLUON if v in us}
        if "torch" in us and ours:
            pick = min(ours, key=ours.get)
            want[k] = (pick, us["torch"] / ours[pick])
    assert len(t) == len(want) > 0
    assert sorted((p, round(x, 6)) for p, x in want.values()) == \
        sorted((p, round(x, 6)) for p, x in zip(t["best Gluon"], t["vs cuDNN (x)"]))
    it = ana.issue_targets(df).set_index("target")
    r = t["vs cuDNN (x)"]
    row = it.loc["fprop ≥ 1.0× cuDNN geomean"]
    assert row["measured"].startswith(f"{plots.geomean(list(r)):.3f}× over {len(r)} shapes")
    assert row["met"] == ("met" if plots.geomean(list(r)) >= 1.0 else "missed")
    row = it.loc["fprop ≥ 0.90× cuDNN on every shape"]
    assert row["measured"].startswith(f"{int((r >= 0.9).sum())} of {len(r)} shapes; worst {r.min():.2f}×")
    assert row["met"] == ("met" if (r >= 0.9).all() else "missed")
    assert "dgrad ≥ 1.50× cuDNN on every shape" in it.index and "dgrad ≥ 1.5× cuDNN geomean" not in it.index
    e = df.iloc[0:0]
    assert ana.best_gluon(e) is None and ana.issue_targets(e) is None


def test_ws_timeline_in_the_gemm_view():
    """The split-K timeline (capture_conv_ws_timeline's JSON): the GEMM's per-unit statistics with each schedule's
    K-slices, one lane per CTA in the figure, and a note naming the capture when there is none."""
    from gluon_lab.analysis import convolution as C
    WT = {"run_id": "r1", "gpu": "NVIDIA H200", "timelines": {"2,1280,1280,8,8,3,1,1": {
        "data-parallel": {"split_k": 1, "ns": [[[1, 0, 900, 950]], [[1, 10, 905, 960]]]},
        "split-K (heuristic)": {"split_k": 2, "ns": [[[1, 0, 450, 480]], [[2, 5, 455, 490]], [[1, 8, 452, 485]]]}}}}
    t = C.ws_timeline_stats(WT).set_index("schedule")
    assert t.loc["data-parallel", "K-slices"] == 1 and t.loc["split-K (heuristic)", "K-slices"] == 2
    assert t.loc["data-parallel", "kernel span us"] == 1.0 and t.loc["split-K (heuristic)", "kernel span us"] == 0.5
    assert t.loc["split-K (heuristic)", "CTAs"] == 3 and t.loc["split-K (heuristic)", "units / CTA"] == 1
    assert C.ws_timeline_figure(WT) is not None and C.ws_timeline_figure(None) is None
    assert C.ws_timeline_stats(None).empty
    assert "r1" in C.ws_timeline_note(WT) and "--parts ws-timeline" in C.ws_timeline_note(None)


def test_schedule_label_names_the_reduction():
    """A schedule-study column says how a split tile is summed: serial (in the kernel) or the fixup launch (no
    suffix); data-parallel has nothing to sum, so a serial knob there leaves its label alone. The ring depth and
    warps are in the tile, so BN 64 data-parallel at 3 and at 6 stages are two columns (not one averaged cell)."""
    tile = {"TH": 8, "TW": 8, "BN": 128, "num_stages": 3, "num_warps": 4}
    assert ana._schedule_label({**tile, "split_k": 4}) == "8x8x128 s3 w4 split-K 4"
    assert ana._schedule_label({**tile, "split_k": 4, "serial": True}) == "8x8x128 s3 w4 split-K 4 serial"
    assert ana._schedule_label({**tile, "split_k": 0, "serial": True}) == "8x8x128 s3 w4 split-K auto serial"
    assert ana._schedule_label({**tile, "split_k": 1, "serial": True}) == "8x8x128 s3 w4 data-parallel"
    assert ana._schedule_label({**tile, "TH": 1, "TW": 128, "split_k": 1, "flat": True}) == \
        "1x128x128 s3 w4 data-parallel flat"
    assert ana._schedule_label({**tile, "BN": 64, "split_k": 1}) != \
        ana._schedule_label({**tile, "BN": 64, "split_k": 1, "num_stages": 6})
    assert ana._schedule_label({"TH": 8, "TW": 8, "BN": 128, "split_k": 2}) == "8x8x128 split-K 2"  # no ring known
