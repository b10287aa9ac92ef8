"""gluon_lab.analysis.common: where records are found (any cwd), the notebook context, helpers that
degrade to notes on missing data, and the fixture records the per-pattern tests use."""
from pathlib import Path

import pandas as pd
import pytest

from gluon_lab.analysis import common as cm

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "records"


def test_results_dir_none_is_the_repository_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever the cwd
    assert cm.results_root(None) == ROOT / "results"
    assert cm.results_root("") == ROOT / "results"
    assert (cm.results_root(None) / "h200" / "00-ceilings.jsonl").exists()


def test_relative_results_dir_resolves_against_the_cwd(monkeypatch):
    monkeypatch.chdir(ROOT / "tests")
    assert cm.results_root("fixtures/records") == FIX
    assert cm.results_root(FIX) == FIX


def test_missing_results_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'\.\./results' resolves to .* does not exist"):
        cm.results_root("../results")
    assert cm.results_root("nowhere", must_exist=False) == tmp_path / "nowhere"


def test_setup_and_load_the_fixture_records():
    ctx = cm.setup("00-ceilings", mode="replay", gpu=None, results_dir=FIX)
    assert (ctx.run_mode, ctx.slug, ctx.results_dir) == ("replay", "h200", FIX)
    assert ctx.spec.hbm_gbps == 4800.0
    assert ctx.path(".inductor-kernels.json") == FIX / "h200" / "00-ceilings.inductor-kernels.json"
    df = cm.load(ctx)
    assert len(df) == sum(1 for ln in (FIX / "h200" / "00-ceilings.jsonl").open() if ln.strip())
    assert "stale" in df and df["stale"].dtype == bool
    prov, note = cm.overview(ctx, df)
    assert len(prov) == df["run_id"].nunique() and note is None
    with pytest.raises(FileNotFoundError):
        cm.setup("00-ceilings", mode="replay", results_dir=FIX / "absent")


def test_no_records_gives_notes_not_errors(tmp_path):
    ctx = cm.setup("00-ceilings", mode="replay", results_dir=tmp_path)
    df = cm.load(ctx)
    assert len(df) == 0
    prov, note = cm.overview(ctx, df)
    assert prov is None and "No records for 00-ceilings on h200" in note
    assert cm.heatmaps(df, ["torch"]) is None
    piv, r, who = cm.vs_best_baseline(df, "gluon-tma")
    assert piv.empty and r.empty and who.empty
    assert cm.current(df) is df


def test_heatmaps_skip_variants_without_records():
    import matplotlib.pyplot as plt
    df = pd.DataFrame({"variant": ["torch", "gluon-tma"], "M": [1024, 1024], "N": [4096, 4096],
                       "sol_datasheet_pct": [50.0, 60.0]})
    assert cm.heatmaps(df, ["liger"]) is None  # matplotlib refuses 0 columns: no figure, the caller notes it
    fig = cm.heatmaps(df, ["torch", "liger", "gluon-tma"])
    assert len(fig.axes) == 4  # two heatmaps + their colorbars
    plt.close(fig)


def test_vs_best_baseline_and_ratio():
    df = pd.DataFrame({"M": [1] * 4, "N": [8] * 4, "variant": ["torch", "inductor", "gluon-x", "liger"],
                       "ms_median": [4.0, 2.0, 1.6, 3.0], "passed": [True, True, True, False]})
    piv, r, who = cm.vs_best_baseline(df, "gluon-x")
    assert list(piv.columns) == ["gluon-x", "inductor", "torch"]  # the failed liger record is left out
    assert r.loc[(1, 8)] == pytest.approx(2.0 / 1.6) and who.loc[(1, 8)] == "inductor"
    assert cm.ratio(piv, "torch", "gluon-x").iloc[0] == pytest.approx(2.5)
    assert cm.ratio(piv, "liger", "gluon-x").empty


def test_show_renders_in_order(monkeypatch):
    import matplotlib.pyplot as plt
    import IPython.display as ipd
    shown = []
    monkeypatch.setattr(ipd, "display", lambda x: shown.append(x))
    fig = plt.figure()
    cm.show("**a**", None, [pd.DataFrame({"x": [1]}), None], fig)
    assert [type(x).__name__ for x in shown] == ["Markdown", "DataFrame", "Figure"]
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend will not draw it twice
    assert cm.takeaways(["one.", None, "two."]) == "- one.\n- two."
    assert cm.takeaways([]).startswith("**Takeaways: missing**")
