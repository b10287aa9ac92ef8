"""The held-out check of variant="auto": the draw (gluon_lab.holdout) and its page section
(gluon_lab.analysis.auto) on records written here. CPU-only."""
import json
import math

import pandas as pd
import pytest

from gluon_lab import experiments, holdout, specs
from gluon_lab.analysis import auto


@pytest.fixture(scope="module")
def plan_shapes():
    return experiments.plan_shapes()


def test_the_draw_is_seeded_covers_every_op_and_dtype_and_avoids_the_plans(plan_shapes):
    a = holdout.draw(1234, plan_shapes)
    assert a == holdout.draw(1234, plan_shapes)  # the same seed: the same cells on any machine
    assert a != holdout.draw(1235, plan_shapes)
    want = {(op, dt) for op, _ in holdout.HoldoutPlan().per_cell for dt in specs.get(op).dtypes}
    assert {(op, dt) for op, _, dt in a} == want
    assert len(a) == sum(n * len(specs.get(op).dtypes) for op, n in holdout.HoldoutPlan().per_cell)
    assert not {holdout.key(*c) for c in a} & plan_shapes
    rows = [s for op, s, _ in a if op == "rms_norm"]
    assert any(s["N"] % 2 for op, s, _ in a if op == "rms_norm")  # odd row lengths are drawn
    for op, s, dt in a:
        assert specs.get(op).bytes(s, dt) <= 6 * holdout.MAX_BYTES, (op, s)
    assert rows


def test_a_plan_shape_is_never_drawn():
    first = holdout.draw(99, set())
    again = holdout.draw(99, {holdout.key(*first[0])})
    assert holdout.key(*first[0]) not in {holdout.key(*c) for c in again}


def _rec(op, variant, shape, ms, dtype="bfloat16", chosen=None, passed=True, run="20261203T120000Z-aaaaaaaa", seed=5):
    cfg = {"study": "auto-check", "table_seed": seed, "call": "api"}
    if chosen:
        cfg["chosen"] = chosen
    return {"op": op, "variant": variant, "shape": shape, "dtype": dtype, "config": cfg,
            "config_key": json.dumps(cfg, sort_keys=True), "ms_median": ms, "passed": passed,
            "run_id": run, "timestamp": run[:15], "notes": None}


def _df():
    s1, s2, s3 = {"M": 3, "N": 1001}, {"M": 5000, "N": 4096}, {"M": 700, "N": 300}
    rows = [_rec("rms_norm", "auto", s1, 0.010, chosen="gluon-regs"), _rec("rms_norm", "torch", s1, 0.020),
            _rec("rms_norm", "gluon-regs", s1, 0.0102), _rec("rms_norm", "gluon-chunked", s1, 0.012),
            _rec("rms_norm", "auto", s2, 0.050, chosen="gluon-chunked"), _rec("rms_norm", "torch", s2, 0.060),
            _rec("rms_norm", "gluon-tma", s2, 0.040), _rec("rms_norm", "gluon-chunked", s2, 0.049),
            _rec("rms_norm", "gluon-ws", s2, 0.030, passed=False),  # a failed variant is never the best
            _rec("layer_norm", "auto", s3, 0.011, dtype="float16", chosen="torch"),
            _rec("layer_norm", "torch", s3, 0.010, dtype="float16")]
    return pd.DataFrame(rows)


def test_table_ratios_and_targets():
    t = auto.holdout_table(_df())
    assert len(t) == 3
    r = t[(t.op == "rms_norm") & (t["shape"] == "M=5000 N=4096")].iloc[0]
    assert r["best"] == "gluon-tma" and r["auto / best"] == pytest.approx(0.040 / 0.050)
    assert r["auto / torch"] == pytest.approx(0.060 / 0.050) and not r["same kernel"]
    r = t[t["shape"] == "M=3 N=1001"].iloc[0]
    assert r["same kernel"] and r["auto / best"] == pytest.approx(1.02)
    ln = t[t.op == "layer_norm"].iloc[0]
    assert math.isnan(ln["auto / best"]) and ln["auto / torch"] == pytest.approx(10 / 11)
    tg = auto.holdout_targets(t).set_index("target")["met"]
    assert list(tg) == [False, False, False, True]  # 1 of 2 cells >= 0.97; worst 0.8; torch 0.909; none failed
    s = auto.holdout_summary(t).set_index(["op", "dtype"])
    assert s.loc[("rms_norm", "bf16"), "cells"] == 2 and s.loc[("layer_norm", "fp16"), "auto ran torch"] == 1
    m = auto.misses(t)
    assert list(m["shape"]) == ["M=5000 N=4096", "M=700 N=300"]  # under 0.97 x best, or under 0.98 x torch
    assert any("same kernel" in x for x in auto.takeaways(t)) or any("fastest variant itself" in x for x in auto.takeaways(t))


def test_the_newest_run_only_and_a_stale_seed_is_named():
    old = _df().assign(run_id="20261201T000000Z-bbbbbbbb", timestamp="20261201T000000")
    df = pd.concat([old, _df()])
    assert len(auto.holdout_records(df)) == len(_df())
    assert auto.seed_note(df, 5) is None
    assert "seed [5]" in auto.seed_note(df, 6) and "--parts auto-check" in auto.seed_note(df, 6)
    cells = {holdout.key(r["op"], r["shape"], r["dtype"]) for r in _df().to_dict("records")}
    assert auto.seed_note(df, 5, drawn=cells) is None
    assert "not what today's code draws" in auto.seed_note(df, 5, drawn=set(list(cells)[1:]))
    assert auto.holdout_table(df.iloc[0:0]).empty and auto.holdout_targets(pd.DataFrame()) is None


def test_a_failed_auto_is_a_miss():
    df = _df()
    df.loc[0, "passed"] = False
    df.loc[0, "notes"] = "error: ValueError: boom"
    t = auto.holdout_table(df)
    assert (~t["auto passed"]).sum() == 1
    assert auto.holdout_targets(t).set_index("target")["met"].iloc[3] == False  # noqa: E712
    assert "boom" in auto.misses(t)["note"].str.cat()


def test_half_the_gemm_and_instance_norm_draws_are_aligned():
    a = holdout.draw(4321, set())
    mm = [s for op, s, _ in a if op == "matmul"]
    assert any(s["N"] % 8 == 0 and s["K"] % 8 == 0 for s in mm)  # a Gluon GEMM takes these
    assert any(s["N"] % 8 or s["K"] % 8 for s in mm)  # and eager torch alone the others


def test_the_draw_avoids_the_tables_cells(monkeypatch):
    from gluon_lab import selection
    first = holdout.draw(77, experiments.plan_shapes())
    op, shape, dt = first[0]
    monkeypatch.setattr(selection, "_table", {"seed": 77, "entries": {"h200": {op: {"cells": [
        {"shape": shape, "dtype": dt, "run": "r", "ms": {"torch": 1.0}}], "always": []}}}})
    assert holdout.key(op, shape, dt) in holdout.exclude_keys(experiments.plan_shapes())
    assert holdout.key(op, shape, dt) not in {holdout.key(*c) for c in holdout.draw(77, holdout.exclude_keys(experiments.plan_shapes()))}


def test_the_evidence_grid_lists_what_takes_each_cell_and_is_a_plan_part():
    cases = holdout.evidence_cases()
    by = {}
    for c in cases:
        by.setdefault(holdout.key(c["op"], c["shape"], c["dtype"]), []).append(c["variant"])
        assert c["call"] == "api" and c["config"]["study"] == holdout.EVIDENCE_STUDY
        assert c["config"].get("heuristic") is (None if c["variant"] == "torch" else True)  # they vote
        assert c["config"].get("cudnn_benchmark") is (True if c["variant"] == "torch" and c["op"].startswith("conv")
                                                      else None)
    assert all(v[0] == "torch" and len(v) >= 2 for v in by.values())
    odd = by[holdout.key("rms_norm", {"M": 12, "N": 4999}, "bfloat16")]
    assert odd == ["torch", "gluon-regs"]  # the TMA / vector-load variants refuse an odd row
    assert "gluon-tma" in by[holdout.key("rms_norm", {"M": 12, "N": 4096}, "bfloat16")]
    assert set(by) <= experiments.plan_shapes()  # the check never draws them
    ops = {k[0] for k in by}
    assert {"rms_norm", "group_norm", "conv2d", "conv2d_input_grad", "conv2d_weight_grad"} <= ops
