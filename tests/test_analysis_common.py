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


def test_fill_reasons_leaves_no_nan():
    import numpy as np
    t = pd.DataFrame({"a": [1.0, np.nan], "b": [None, "x"], "c": pd.array([1, None], dtype="Int64")}, index=[10, 20])
    f = cm.fill_reasons(t, lambda idx, col: f"why {idx}/{col}")
    assert f.loc[20, "a"] == "why 20/a" and f.loc[10, "b"] == "why 10/b" and f.loc[20, "c"] == "why 20/c"
    assert f.loc[10, "a"] == 1.0 and not f.isna().any().any()
    assert cm.is_missing(cm.fill_reasons(t, "n/a", columns=["a"]).loc[10, "b"])  # only the named columns
    assert cm.fill_reasons(pd.DataFrame(), "x").empty and cm.fill_reasons(None, "x") is None


def test_target_list_and_met_grid_render_coloured_html():
    t = pd.DataFrame({"target": ["RMSNorm: at least as fast as the fastest baseline", "geomean >= 1.05x"],
                      "measured": ["8 of 12 cells", None], "met": [True, False]})
    html = cm.target_list(t).to_html()
    assert "✓ met" in html and "✗ missed" in html and "not computed (missing records)" in html
    assert cm.MET_CSS["met"].split(";")[0].split(":")[1] in html and cm.MET_CSS["missed"].split(";")[0].split(":")[1] in html
    assert cm.target_list(t.iloc[0:0]) is None
    v = pd.DataFrame({4096: [1.02, 0.9], 5120: ["N ≠ 2ᵏ", 1.1]}, index=[256, 1024])
    s = pd.DataFrame({4096: ["met", "MISSED"], 5120: ["n/a", "met"]}, index=[256, 1024])
    g = cm.met_grid(v, s, legend={"green": "met"}).to_html()
    assert "1.02" in g and "0.90" in g and "N ≠ 2ᵏ" in g and "green: met" in g and "NaN" not in g


def test_compact_census_drops_all_zero_columns():
    ct = pd.DataFrame({"tma_load": [2, 0], "wgmma": [0, 0], "st_global_by_bits": [{128: 2}, {}], "registers": [32, 40]},
                      index=["a", "b"])
    t, note = cm.compact_census(ct)
    assert list(t.columns) == ["TMA loads", "st.global bits", "regs"] and t.loc["a", "st.global bits"] == "128b ×2"
    assert t.loc["b", "st.global bits"] == "none" and note == "Zero in every kernel (not shown): wgmma."
    wide = pd.DataFrame({f"c{k}": [k + 1, k + 2] for k in range(12)}, index=["a", "b"])
    tt, _ = cm.compact_census(wide)  # more counters than kernels: kernels become the columns
    assert tt.shape == (12, 2) and list(tt.columns) == ["a", "b"] and tt.loc["c3", "b"] == 5


def test_refusal_is_the_configure_hooks_reason():
    r = cm.refusal("rms_norm", "gluon-tma", {"M": 4096, "N": 5120}, "bfloat16")
    assert r.startswith("refused: ") and "power-of-2 N" in r
    assert cm.refusal("rms_norm", "gluon-tma", {"M": 4096, "N": 4096}, "bfloat16") is None


def test_headline_bundle_carries_reasons_not_nan():
    h = cm.headline([("copy ceiling", "4270 GB/s"), ("SM clock", "not recorded"), ("", "dropped")])
    b = h._repr_mimebundle_()
    assert b[cm.HEADLINE_MIME]["numbers"] == [{"label": "copy ceiling", "value": "4270 GB/s"},
                                              {"label": "SM clock", "value": "not recorded"}]
    assert b["text/markdown"].startswith("- **copy ceiling**: 4270 GB/s")
