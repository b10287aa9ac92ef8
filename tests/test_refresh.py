"""refresh (what is due on the GPU) and the pages' cell composition, on synthetic records (CPU)."""
import json

import pandas as pd
import pytest

from gluon_lab import notebook, refresh

PLAN = [
    {"op": "rms_norm", "variant": "torch", "shape": {"M": 64, "N": 128}, "dtype": "bfloat16"},
    {"op": "rms_norm", "variant": "triton", "shape": {"M": 64, "N": 128}, "dtype": "bfloat16"},
    {"op": "rms_norm", "variant": "torch", "shape": {"M": 64, "N": 256}, "dtype": "bfloat16"},
    {"op": "rms_norm", "variant": "triton", "shape": {"M": 64, "N": 256}, "dtype": "bfloat16"},
    {"op": "rms_norm", "variant": "triton", "shape": {"M": 64, "N": 256}, "dtype": "bfloat16",
     "config": {"study": "s", "num_warps": 4}},
    {"op": "rms_norm", "variant": "triton", "shape": {"M": 64, "N": 512}, "dtype": "bfloat16",
     "config": {"study": "s", "num_warps": 4}},
]


def _rec(case, stale, ts, run="r1", extra=None):
    cfg = {**(case.get("config") or {}), **(extra or {})}
    return {"op": case["op"], "variant": case["variant"], "shape": case["shape"], "dtype": case["dtype"], "config": cfg,
            "config_key": json.dumps(cfg, sort_keys=True), "timer": "cudagraph", "stale": stale, "timestamp": ts,
            "run_id": run, "pattern": "baseline"}


@pytest.fixture
def plan(monkeypatch):
    monkeypatch.setattr(refresh, "plan_cases", lambda nb: [dict(c) for c in PLAN])
    monkeypatch.setattr(refresh, "predicted_config", lambda c: dict(c.get("config") or {}))


def test_due_cells_grid_first_whole_cells(plan):
    df = pd.DataFrame([_rec(PLAN[0], False, "1"), _rec(PLAN[1], False, "1"),  # cell N=128 current
                       _rec(PLAN[2], False, "1"), _rec(PLAN[3], True, "1"),  # N=256 grid: one stale
                       _rec(PLAN[4], False, "1")])  # the study at N=256 is current; N=512 missing
    cells, counts = refresh.due("x", df)
    assert counts["stale"] == 1 and counts["missing"] == 1
    assert [[(c["shape"]["N"], c["variant"]) for c in cs] for cs in cells] == [
        [(256, "torch"), (256, "triton")],  # the grid cell first, whole (its torch peer re-measured too)
        [(512, "triton")]]


def test_a_current_cell_split_over_runs_is_due_last(plan):
    """Every record current, but the cell's newest records come from two runs: no same-run ratio (the pages and
    auto's evidence need one), so the whole cell is due, after the stale and the never-measured cells."""
    df = pd.DataFrame([_rec(PLAN[0], False, "1", run="r1"), _rec(PLAN[1], False, "2", run="r2"),  # N=128: split
                       _rec(PLAN[2], False, "1"), _rec(PLAN[3], True, "1"),  # N=256 grid: one stale
                       _rec(PLAN[4], False, "1"), _rec(PLAN[5], False, "1")])  # the studies: one run each
    cells, counts = refresh.due("x", df)
    assert counts["split"] == 1 and counts["stale"] == 1 and counts["missing"] == 0
    assert [[(c["shape"]["N"], c["variant"]) for c in cs] for cs in cells] == [
        [(256, "torch"), (256, "triton")], [(128, "torch"), (128, "triton")]]


def test_newest_record_decides_and_added_config_fields_match(plan):
    older_stale = _rec(PLAN[4], True, "1")
    newer_current = _rec(PLAN[4], False, "2", extra={"new_field": 0})  # a field added since still matches
    df = pd.DataFrame([older_stale, newer_current, _rec(PLAN[5], True, "1")])
    index = refresh._record_index(df)
    assert refresh.newest_state(PLAN[4], index) is False
    assert refresh.newest_state(PLAN[5], index) is True
    other_knob = {**PLAN[5], "config": {"study": "s", "num_warps": 8}}
    assert refresh.newest_state(other_knob, index) is None


def _nb_rec(run, ts, N, variant, ms, stale=False):
    return {"run_id": run, "timestamp": ts, "dtype": "bfloat16", "M": 64, "N": N, "variant": variant,
            "ms_median": ms, "stale": stale}


def test_newest_run_composes_refreshed_cells():
    full = [_nb_rec("A", "1", n, v, 1.0, stale=(n == 256)) for n in (128, 256) for v in ("torch", "gluon-tma")]
    partial = [_nb_rec("B", "2", 256, v, 2.0) for v in ("torch", "gluon-tma")]  # a refresh of the stale cell
    lonely = [_nb_rec("C", "3", 128, "torch", 3.0)]  # a newer run with only one variant of a cell: not taken
    df = pd.DataFrame(full + partial + lonely)
    got = notebook.newest_run(df, require=("torch", "gluon-tma"))
    assert sorted(zip(got["N"], got["variant"], got["run_id"])) == [
        (128, "gluon-tma", "A"), (128, "torch", "A"), (256, "gluon-tma", "B"), (256, "torch", "B")]
    assert not got["stale"].any()
    only_a = notebook.newest_run(df[df.run_id == "A"])
    assert set(only_a["run_id"]) == {"A"} and len(only_a) == 4


def test_a_study_case_with_tuple_knobs_finds_its_record():
    """predicted_config is what a record stores (JSON: tuples are lists), so a study case whose resolved config
    holds tuples (group_norm gluon-chunked's threads / warps) is not 'missing' after it was measured."""
    from gluon_lab import holdout, refresh
    c = next(c for c in holdout.evidence_cases() if c["op"] == "group_norm" and c["variant"] == "gluon-chunked")
    pred = refresh.predicted_config(c)
    assert isinstance(pred["threads"], list)
    index = {(c["op"], c["variant"], c["dtype"], refresh._shape_key(c["shape"]), c["config"]["study"]):
             [(json.loads(json.dumps(pred)), "cudagraph", False, "r1")]}
    assert refresh.newest_record(c, index) == (False, "r1")
