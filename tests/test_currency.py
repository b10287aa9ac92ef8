"""The staleness rule (gluon_lab.currency): source hash first, then what the case launches.

Synthetic records against a LaunchCache written to a temp folder; current_hash is a stub so each rule
is exercised on its own. test_launches.py covers the launch hashes themselves."""
import json

import pandas as pd
import pytest

from gluon_lab import currency


def _rec(variant="gluon-ws", src="s_old", config=None, shape=None, op="matmul", sms=132):
    return {"op": op, "variant": variant, "shape": shape or {"M": 256, "N": 512, "K": 128}, "dtype": "bfloat16",
            "config": config or {}, "kernel_source_hash": src, "sm_count": sms}


def _df(*recs):
    return pd.DataFrame(list(recs))


def _now(table):
    def current_hash(op, variant):
        if (op, variant) not in table:
            raise KeyError((op, variant))
        return table[(op, variant)]
    return current_hash


def _rk(r):
    return currency.request_key(currency.request_of(r["op"], r["variant"], r["shape"], r["dtype"], r["config"],
                                                    r["sm_count"]))


@pytest.fixture
def lc(tmp_path):
    return currency.LaunchCache(tmp_path / currency.CACHE_NAME)


def test_request_follows_the_labs_notion_of_a_case():
    grid = currency.request_of("rms_norm", "gluon-tma", {"M": 8, "N": 64}, "bfloat16",
                               {"num_warps": 4, "tma_store": True, "sm_clock_mhz": 1980}, 132)
    assert grid["overrides"] == {"tma_store": True} and grid["call"] == "fn"  # a grid record: the heuristic
    cfg = {"study": "s", "BM": 64, "BN": 128, "num_warps": 8}
    study = currency.request_of("matmul", "gluon-ws", {"M": 8}, "bfloat16", cfg, 132, {"s": frozenset({"BM", "BN"})})
    assert study["overrides"] == {"study": "s", "BM": 64, "BN": 128}  # the knobs its study sets; num_warps: heuristic
    retired = currency.request_of("matmul", "gluon-ws", {"M": 8}, "bfloat16", cfg, 132, {})
    assert retired["overrides"] == cfg  # a study no plan measures any more: its whole config
    heur = currency.request_of("matmul", "gluon-ws", {"M": 8}, "bfloat16", {"study": "s", "heuristic": True, "BM": 64}, 132)
    assert heur["overrides"] == {}
    api = currency.request_of("rms_norm", "gluon-tma", {"M": 8}, "bfloat16", {"study": "dispatch", "call": "api"}, 132)
    assert api["call"] == "api" and api["overrides"] == {}
    # the SM clock is a measurement beside the case: two records differing only there ask the same
    a = currency.request_of("matmul", "gluon-ws", {"M": 8}, "bfloat16", {"study": "s", "sm_clock_mhz": 1500}, 132)
    b = currency.request_of("matmul", "gluon-ws", {"M": 8}, "bfloat16", {"study": "s", "sm_clock_mhz": 1980}, 132)
    assert currency.request_key(a) == currency.request_key(b)


def test_the_rule(lc):
    same_src = _rec(src="s_new")
    refactored = _rec(shape={"M": 1, "N": 2, "K": 3})
    changed = _rec(shape={"M": 4, "N": 5, "K": 6})
    unknown = _rec(shape={"M": 7, "N": 8, "K": 9})
    not_computed = _rec(shape={"M": 10, "N": 11, "K": 12})
    torch_rec = _rec(variant="torch")
    ceiling = {**_rec(variant="torch"), "kernel_source_hash": None}
    removed = _rec(variant="gone")
    for r, old, new in [(refactored, "h1", "h1"), (changed, "h2", "h3")]:
        lc.put("matmul", "gluon-ws", "s_old", _rk(r), {"h": old, "s": f"k[{old}]"})
        lc.put("matmul", "gluon-ws", "s_new", _rk(r), {"h": new, "s": f"k[{new}]"})
    lc.put("matmul", "gluon-ws", "s_old", _rk(not_computed), {"h": "h4", "s": "k"})
    lc.put("matmul", "torch", "s_old", _rk(torch_rec), {"h": None, "s": "-"})
    lc.put("matmul", "torch", "t_new", _rk(torch_rec), {"h": None, "s": "-"})
    df = currency.mark_stale(_df(same_src, refactored, changed, unknown, not_computed, torch_rec, ceiling, removed),
                             _now({("matmul", "gluon-ws"): "s_new", ("matmul", "torch"): "t_new"}), lc)
    assert df["stale"].tolist() == [False, False, True, True, True, True, False, True]
    why = df["stale_why"].tolist()
    assert why[0] is None and why[1] == "same launch"
    assert why[2] == "launch changed: k[h2] -> k[h3]"
    assert "not recorded" in why[3] and "python -m gluon_lab launches" in why[4]
    assert "no Triton kernel" in why[5] and why[6] is None and why[7] == "variant removed"


def test_cache_round_trip_prune_and_deterministic_bytes(lc):
    lc.put("matmul", "gluon-ws", "s1", "k1", {"h": "a", "s": "x"})
    lc.put("matmul", "gluon-ws", "s2", "k2", {"e": "ValueError: no"})
    lc.save()
    first = lc.path.read_bytes()
    again = currency.LaunchCache(lc.path)
    assert again.get("matmul", "gluon-ws", "s1", "k1") == {"h": "a", "s": "x"} and len(again) == 2
    again.save()
    assert lc.path.read_bytes() == first
    assert json.loads(first)["format"] == 1
    assert again.prune({("matmul", "gluon-ws", "s1", "k1")}) == 1 and len(again) == 1
    assert again.get("matmul", "gluon-ws", "s1", "k1") and not again.get("matmul", "gluon-ws", "s2", "k2")


def test_needed_lists_current_and_known_records(lc):
    cur = _rec(src="s_new")
    known = _rec(shape={"M": 1, "N": 2, "K": 3})
    unknown = _rec(shape={"M": 4, "N": 5, "K": 6})
    lc.put("matmul", "gluon-ws", "s_old", _rk(known), {"h": "h", "s": "k"})
    df = _df(cur, known, unknown).assign(git_commit="c" * 40)
    todo, unk = currency.needed(df, lc, {("matmul", "gluon-ws"): "s_new"})
    assert {k[2] for k in todo} == {_rk(cur), _rk(known)}
    assert [u[1] for u in unk] == ["s_old"] and unk[0][2]["shape"] == {"M": 4, "N": 5, "K": 6}


def test_committed_cache_has_every_launch_the_records_need():
    """What CI checks: after a kernel change, `python -m gluon_lab launches` must have been run."""
    from gluon_lab import refresh
    assert currency.refresh(check=True, log=lambda m: None, study_knobs=refresh.study_knobs()) == 0, \
        "results/launch-hashes.json lacks launch hashes under today's code: run `python -m gluon_lab launches`"
