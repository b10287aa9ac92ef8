"""Helpers shared by several notebooks: where the records are, the notebook context (mode, GPU,
datasheet), loading with stale flags, newest-run selection, provenance / missing / stale notes,
"vs best baseline" ratios, heatmaps that degrade to a note, and `show` for a cell's outputs.

The record-level helpers of `gluon_lab.notebook` (newest_run, ceilings, config_value, ...) are
re-exported here unchanged, so a pattern module needs one import: `from . import common as cm`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import device, plots
from ..notebook import (archived_records, ceilings, config_value, copy_reference_table,  # noqa: F401
                        device_disagreement, device_note, graph_output_caveat, inductor_kernels, load_sanitizer,
                        missing_note, newest_run,
                        no_records, provenance_table, resolve_mode, section_line, stale_note, stale_table)
from ..notebook import gpu_slug as _gpu_slug
from ..notebook import load as _load

geomean = plots.geomean

#: The repository's committed results/ (what `results_dir = None` means in every notebook).
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"


def results_root(results_dir: str | os.PathLike | None = None, must_exist: bool = True) -> Path:
    """The results directory a notebook reads (and in measure mode appends to), as an absolute path.

    None -> the repository's committed `results/` (found from the package location, so a notebook
    shows the same records whatever directory papermill or Jupyter runs it from). A relative path
    is resolved against the current working directory; with must_exist, a directory that does not
    exist is an error naming both the path given and what it resolved to."""
    if results_dir is None or (isinstance(results_dir, str) and not results_dir.strip()):
        p = RESULTS
    else:
        p = Path(results_dir).expanduser()
        p = p if p.is_absolute() else Path.cwd() / p
        p = p.resolve()
    if must_exist and not p.is_dir():
        raise FileNotFoundError(
            f"results_dir {str(results_dir)!r} resolves to {p}, which does not exist "
            f"(cwd: {Path.cwd()}). Pass results_dir=None for the repository's committed results ({RESULTS}), "
            "or an absolute path.")
    return p


@dataclass(frozen=True)
class Context:
    """What every cell after the parameters needs: the notebook, the resolved mode, which GPU's
    records are shown, its datasheet entry (None if unknown) and the absolute results directory."""
    notebook: str
    run_mode: str
    slug: str
    spec: object
    results_dir: Path
    run: str | None = None  # replay: show only this run (None: each section picks its newest run)

    def path(self, suffix: str = ".jsonl") -> Path:
        """results/<gpu>/<notebook><suffix>, e.g. '.inductor-kernels.json' or '.timeline.json'."""
        return self.results_dir / self.slug / f"{self.notebook}{suffix}"

    def describe(self) -> str:
        return (f"mode={self.run_mode}  gpu={self.slug}  datasheet={self.spec}  results={self.results_dir}"
                + (f"  run={self.run}" if self.run else ""))


def setup(notebook: str, mode: str = "auto", gpu: str | None = None, results_dir=None, run: str | None = None,
          quick: bool = False, width: int = 220, max_columns: int = 30, max_rows: int | None = None,
          max_colwidth: int | None = None) -> Context:
    """Resolve the parameters cell into a Context and set the pandas display options.

    In measure mode results_dir may not exist yet (the plan creates it); in replay it must. `run`
    (replay) restricts every section to one run: an id, a unique prefix or "newest"; `quick` only
    shapes a measure run, so replay with quick=True says so instead of ignoring it silently."""
    import pandas as pd
    pd.set_option("display.width", width)
    pd.set_option("display.max_columns", max_columns)
    if max_rows is not None:
        pd.set_option("display.max_rows", max_rows)
    if max_colwidth is not None:
        pd.set_option("display.max_colwidth", max_colwidth)
    run_mode = resolve_mode(mode)
    slug = _gpu_slug(gpu, run_mode)
    root = results_root(results_dir, must_exist=run_mode != "measure")
    if run is not None and run_mode == "measure":
        raise ValueError("run: a measure run makes a new run; `run` selects a recorded run in replay (mode='replay')")
    if quick and run_mode == "replay":
        import warnings
        warnings.warn("quick=True has no effect in replay: it shapes what a measure run measures; "
                      "the records are shown as recorded", stacklevel=2)
    ctx = Context(notebook, run_mode, slug, device.DATASHEET.get(slug), root)
    if run is not None:  # resolve now: a run that does not exist fails in the setup cell, naming the runs there are
        from ..compare import resolve_run
        ctx = Context(notebook, run_mode, slug, ctx.spec, root, resolve_run(_load(root, slug, notebook, newest_only=False, history=True), run))
    return ctx


def load(ctx: Context, newest_only: bool = False):
    """Every record of ctx.notebook on ctx.slug (stale-marked), only ctx.run's when the notebook shows
    one run; newest per case with newest_only. The live store holds every run a page shows by
    default (archive.live_runs); a run named by ctx.run may be archived, so then the history is
    read too."""
    from .. import results
    df = _load(ctx.results_dir, ctx.slug, ctx.notebook, newest_only=False, history=ctx.run is not None)
    if ctx.run is not None and len(df):
        df = df[df["run_id"] == ctx.run].reset_index(drop=True)
    return results.latest(df) if newest_only and len(df) else df


def archived(ctx: Context):
    """The records of ctx.notebook's superseded runs (<notebook>.history.jsonl.gz, stale-marked), for
    what a page says about every run (a spread between runs, the provenance table); empty when the
    page shows one run (ctx.run) or nothing is archived."""
    if ctx.run is not None:
        return no_records()
    return archived_records(ctx.results_dir, ctx.slug, ctx.notebook)


def compare_runs(ctx: Context, compare_to: str | None = None) -> list:
    """The outputs of the "Compare runs" section: run B = ctx.run (default the newest run), run A =
    compare_to (default: the newest earlier run that shares cases with B). See gluon_lab.compare.
    The default pair is always in the live store (archive.live_runs); a run named by ctx.run or
    compare_to may be archived, so then the history is read too."""
    from .. import compare
    df = _load(ctx.results_dir, ctx.slug, ctx.notebook, newest_only=False,
               history=ctx.run is not None or compare_to is not None)
    if not len(df):
        return [missing_note(df, f"{ctx.notebook} on {ctx.slug}")]
    runs = compare.runs_table(df[df["pattern"] != "ceiling"])
    if not len(runs):
        return ["**Compare runs:** these records hold only ceilings; nothing to compare."]
    b = ctx.run or runs["run_id"].iloc[-1]
    return compare.section(df, compare_to or "previous", b, notebook=ctx.notebook)


def current(df):
    """The records whose kernel source is unchanged since they were measured (not stale)."""
    if not len(df) or "stale" not in df:
        return df
    return df[~df["stale"].astype(bool)]


def overview(ctx: Context, df) -> list:
    """The outputs of a notebook's "measure or replay" cell: the provenance table (one row per run,
    the superseded runs archived in <notebook>.history.jsonl.gz too unless the page shows one run),
    and a missing note when there is no record at all (then no empty table)."""
    if not len(df):
        return [None, missing_note(df, f"{ctx.notebook} on {ctx.slug}")]
    return [provenance_table(df, archived(ctx)), device_note(df)]


def passed(df):
    return df[df["passed"].astype(bool)] if len(df) else df


def heatmaps(df, variants, suptitle: str = "", **kw):
    """plots.sol_heatmaps for the variants that have records in df; None when none has (the caller
    shows a missing note instead; matplotlib refuses a figure of zero columns)."""
    if not len(df):
        return None
    have = set(df["variant"])
    variants = [v for v in variants if v in have]
    if not variants or not df["M"].notna().any() or not df["N"].notna().any():
        return None
    return plots.sol_heatmaps(df, variants, suptitle=suptitle, **kw)


def vs_best_baseline(g, variant: str, only_passed: bool = True):
    """Speed of `variant` against the fastest non-Gluon variant of each (M, N) cell of one run.

    Returns (piv, ratio, who): piv = ms_median pivot (index M, N; one column per variant), ratio =
    best-baseline ms / variant ms (> 1: the variant is faster), who = the best baseline per cell.
    Baselines are the variants whose name does not start with 'gluon'."""
    import pandas as pd
    g = passed(g) if only_passed else g
    if not len(g):
        e = pd.Series(dtype=float)
        return pd.DataFrame(), e, e.astype(object)
    piv = g.pivot_table(index=["M", "N"], columns="variant", values="ms_median")
    base = [c for c in piv.columns if not str(c).startswith("gluon")]
    if variant not in piv or not base:
        e = pd.Series(dtype=float)
        return piv, e, e.astype(object)
    return piv, piv[base].min(axis=1) / piv[variant], piv[base].idxmin(axis=1)


def ratio(piv, baseline: str, variant: str):
    """ms(baseline) / ms(variant) per row of a ms_median pivot; empty when a column is missing."""
    import pandas as pd
    if baseline not in piv or variant not in piv:
        return pd.Series(dtype=float)
    return piv[baseline] / piv[variant]


def sol_range(s) -> str:
    """'lo-hi' of a series of percentages, '?' when empty."""
    s = s.dropna() if hasattr(s, "dropna") else s
    return f"{s.min():.1f}-{s.max():.1f}" if len(s) else "?"


# ---- tables a reader can read: reasons instead of NaN, coloured targets ---------------------------
def is_missing(v) -> bool:
    """NaN, None, pd.NA, NaT."""
    import pandas as pd
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):  # lists, tuples, dicts
        return False


def fill_reasons(t, reason, columns=None):
    """A copy of the table with every missing cell (NaN, None, <NA>) replaced by the reason it is empty:
    a str, or reason(index, column) -> str. columns: only those columns (default all). Numbers stay
    numbers (the columns that get a reason become object columns). None / empty stay as they are."""
    if t is None or not len(t):
        return t
    out = t.copy()
    cols = [c for c in (out.columns if columns is None else columns) if c in out.columns]
    for c in cols:
        col = out[c]
        miss = [is_missing(v) for v in col]
        if not any(miss):
            continue
        vals = col.astype(object).tolist()
        for k, (idx, m) in enumerate(zip(out.index, miss)):
            if m:
                vals[k] = reason(idx, c) if callable(reason) else reason
        out[c] = pd_series(vals, out.index)
    return out


def pd_series(values, index):
    import pandas as pd
    return pd.Series(values, index=index, dtype=object)


def refusal(op: str, variant: str, shape: dict, dtype: str = "bfloat16", knobs: dict | None = None) -> str | None:
    """Why the variant's configure hook refuses this case now (its ValueError, shortened), None if it takes it.

    Kernel-facing (the registry imports the kernel modules): gluon_lab.registry.get_variant(op, variant)
    .resolve(shape, dtype, knobs)."""
    from .. import registry
    try:
        registry.get_variant(op, variant).resolve(shape, dtype, dict(knobs or {}))
    except Exception as e:  # ValueError from configure; an unknown variant / op too
        msg = str(e).split(". Use ")[0].split("; use ")[0]
        return f"refused: {msg}"
    return None


MET_CSS = {"met": "background-color:#c7e9c0;color:#00441b;font-weight:600",
           "missed": "background-color:#fcbba1;color:#67000d;font-weight:600",
           "near": "background-color:#fee6ce;color:#7f2704;font-weight:600",
           "n/a": "background-color:#f0f0f0;color:#777777"}


def _status(v) -> str:
    """'met' / 'missed' / 'n/a' of a met cell (bool, or a text starting with met / MISSED / n/a)."""
    if v is True or (isinstance(v, str) and v.lower().startswith("met")):
        return "met"
    if v is False or (isinstance(v, str) and v.lower().startswith("missed")):
        return "missed"
    if isinstance(v, (bool,)) or type(v).__name__ == "bool_":
        return "met" if bool(v) else "missed"
    return "n/a"


def target_list(t, met: str = "met", result: str = "result"):
    """A (target, measured, met) table as a coloured Styler: `met` becomes a `result` column reading
    '✓ met' (green) or '✗ missed' (red); text left-aligned, no index. None when t is empty."""
    if t is None or not len(t):
        return None
    d = t.copy()
    status = [_status(v) for v in d[met]]
    d[met] = ["✓ met" if s == "met" else "✗ missed" if s == "missed" else str(v) for s, v in zip(status, d[met])]
    d = d.rename(columns={met: result})
    d = fill_reasons(d, "not computed (missing records)")
    css = {result: [MET_CSS[s] + ";white-space:nowrap" for s in status]}

    def paint(col):
        return css.get(col.name, [""] * len(col))

    text = [c for c in d.columns if c != result]
    return (d.style.hide(axis="index").apply(paint, axis=0)
            .set_properties(subset=text, **{"text-align": "left", "white-space": "normal"})
            .set_properties(subset=[result], **{"text-align": "left"})
            .set_table_styles([{"selector": "th", "props": "text-align:left"}]))


def met_grid(values, status, fmt: str = "{:.2f}", legend: dict | None = None):
    """A grid (rows: M, columns: [(target, N)] or N) of numbers coloured by whether each meets its target.

    values: the numbers (or reason strings) per cell; status: same shape, 'met' / 'missed' / 'near' /
    'n/a' (or the met/MISSED/n/a texts of a target table). Numbers are formatted with fmt; a missing
    number reads 'n/a'. Returns a pandas Styler (inline CSS: it renders in nbconvert HTML)."""
    if values is None or not len(values):
        return None
    st = status.reindex(index=values.index, columns=values.columns)
    norm = st.map(lambda v: v if v in MET_CSS else _status(v))
    shown = values.astype(object).copy()
    for c in shown.columns:
        shown[c] = [fmt.format(v) if isinstance(v, (int, float)) and not is_missing(v) else
                    ("n/a" if is_missing(v) else str(v)) for v in values[c]]
    sty = shown.style.apply(lambda _: norm.map(lambda s: MET_CSS.get(s, "")), axis=None)
    sty = sty.set_properties(**{"text-align": "center", "min-width": "3.2em", "white-space": "nowrap"})
    sty = sty.set_table_styles([{"selector": "th.col_heading", "props": "text-align:center"}])
    if legend:
        sty = sty.set_caption(" · ".join(f"{k}: {v}" for k, v in legend.items()))
    return sty


CENSUS_NAMES = {"tma_load": "TMA loads", "tma_store": "TMA stores", "ld_global": "ld.global",
                "ld_global_by_bits": "ld.global bits", "st_global": "st.global", "st_global_by_bits": "st.global bits",
                "ld_shared": "ld.shared", "st_shared": "st.shared", "mbarrier_wait": "mbar waits",
                "mbarrier_arrive": "mbar arrives", "bar_sync": "bar.sync", "wgmma": "wgmma", "setmaxnreg": "setmaxnreg",
                "smem_bytes": "smem B", "registers": "regs", "spill_bytes": "spill B", "num_warps": "warps"}


def _bits(v):
    """{128: 4} -> '128b x4' (a census 'by bits' cell); anything else unchanged."""
    if isinstance(v, dict):
        return ", ".join(f"{k}b ×{n}" for k, n in sorted(v.items())) or "none"
    return v


def _zero(v) -> bool:
    return v is None or (isinstance(v, (dict, list, tuple, str)) and v in ({}, [], (), "", "-")) or \
        (not isinstance(v, (dict, list, tuple, str)) and not is_missing(v) and v == 0)


def compact_census(ct, keep=(), names: dict | None = None, transpose: bool | None = None) -> list:
    """[table, note] of a codegen census: the columns that are zero in every row dropped (the note lists
    them), the others renamed short (CENSUS_NAMES) and the 'by bits' dicts written as '128b ×4'.
    transpose (default: when there are more counters than kernels) puts the kernels in the columns and
    the counters in the rows, so the table stays as narrow as the page."""
    if ct is None or not len(ct):
        return [ct, None]
    zero = [c for c in ct.columns if c not in keep and all(_zero(v) for v in ct[c])]
    t = ct.drop(columns=zero)
    for c in t.columns:
        if any(isinstance(v, dict) for v in t[c]):
            t[c] = [_bits(v) for v in t[c]]
    nm = {**CENSUS_NAMES, **(names or {})}
    t = t.rename(columns=nm)
    if transpose if transpose is not None else t.shape[1] > max(8, t.shape[0]):
        t = t.astype(object).T
        t.columns.names = [n or "kernel" for n in t.columns.names] if t.columns.nlevels > 1 else ["kernel"]
    note = (f"Zero in every kernel (not shown): {', '.join(nm.get(c, c) for c in zero)}." if zero else None)
    return [t, note]


def short_columns(t, names: dict):
    """t with columns renamed (names: old -> new); columns not in names keep their name."""
    return t.rename(columns={k: v for k, v in names.items() if k in t.columns}) if t is not None and len(t) else t


def run_short(run_id) -> str:
    """'20261201T094335Z' of a run id (its timestamp part)."""
    return str(run_id).split("-")[0] if run_id else "?"


def headline_fonts(fig, title: float = 14, label: float = 13, tick: float = 12, cells: float | None = 12,
                   suptitle: float = 14):
    """Big fonts for a headline figure (read at ~900 px on the index card): axes titles, labels, tick
    labels, colour-bar labels and, with cells, the in-cell annotations. (Not rc_context: leaving one
    resets pyplot's interactive flag when the backend was resolved inside it, and the inline backend
    then stops drawing the figures of later cells.)"""
    for a in fig.axes:
        a.title.set_fontsize(title)
        a.xaxis.label.set_fontsize(label)
        a.yaxis.label.set_fontsize(label)
        a.tick_params(labelsize=tick)
        if cells:
            for t in a.texts:
                t.set_fontsize(cells)
    if fig._suptitle is not None:
        fig._suptitle.set_fontsize(suptitle)
    return fig


def dashed(df):
    """The table with its missing cells shown as an em dash. Cast to object first: a str fill into a float
    column is deprecated (pandas 3 warns Pandas4Warning into the page, pandas 4 raises); the HTML is the same."""
    return df.astype(object).where(df.notna(), "—")


def show(*items) -> None:
    """Display a cell's outputs in order, skipping None: a str is rendered as Markdown, a list or tuple
    is shown item by item, a matplotlib figure is displayed and closed (so the inline backend does not
    draw it a second time at the end of the cell), anything else goes to IPython's display."""
    from IPython.display import Markdown, display
    for it in items:
        if it is None:
            continue
        if isinstance(it, (list, tuple)):
            show(*it)
        elif isinstance(it, str):
            display(Markdown(it))
        elif type(it).__name__ == "Figure":
            import matplotlib.pyplot as plt
            display(it)
            plt.close(it)
        else:
            display(it)


def takeaways(lines) -> str:
    """Markdown bullet list from computed lines (each line a finished sentence, without the dash); a
    missing note when no line could be computed."""
    lines = [ln for ln in lines if ln]
    if not lines:
        return "**Takeaways: missing** (no records to draw them from)."
    return "\n".join(f"- {ln}" for ln in lines)


#: MIME type of a notebook's headline numbers: the report builder reads them from the executed
#: notebook for the page's headline block and the index card (text/markdown is what Jupyter shows).
HEADLINE_MIME = "application/vnd.gluonlab.headline+json"


class Headline:
    """A notebook's headline numbers, computed from its records: [(label, value), ...].

    Displayed (``cm.show(cm.headline(...))`` in the cell tagged ``headline-numbers``) as a Markdown
    list for Jupyter and as HEADLINE_MIME JSON for `gluon_lab.report`. A value that could not be
    computed is a reason ("missing: no RMSNorm grid in this run"), never NaN."""

    def __init__(self, items):
        self.items = [(str(k), str(v)) for k, v in items if k]

    def _repr_mimebundle_(self, include=None, exclude=None):
        md = "\n".join(f"- **{k}**: {v}" for k, v in self.items) or "**Headline: missing** (no records)."
        return {"text/markdown": md,
                HEADLINE_MIME: {"numbers": [{"label": k, "value": v} for k, v in self.items]}}


def headline(items) -> Headline:
    return Headline(items)


def sweep_best_vs_heuristic(sweep, heuristic, knobs: tuple):
    """Per (op, M, N) of a knob sweep's passing records: (op, M, N, records, best record, the
    heuristic's knob values, the heuristic's GB/s in the sweep). heuristic(op, N, M) returns the
    config the current code picks; its GB/s is NaN when that config was not swept, and its knobs are
    the exception's name when the heuristic refuses the shape."""
    import numpy as np
    ok = sweep[sweep.passed.astype(bool)]
    for (op, M, N), sub in ok.groupby(["op", "M", "N"]):
        best = sub.loc[sub.gbps.idxmax()]
        try:
            h = heuristic(op, int(N), int(M))
            hk = tuple(getattr(h, k) for k in knobs)
            hs = sub[np.logical_and.reduce([sub[k] == v for k, v in zip(knobs, hk)])]
            hg = float(hs.gbps.max()) if len(hs) else np.nan
        except Exception as e:  # noqa: BLE001 - a refused shape is a table cell, not a crash
            hk, hg = f"{type(e).__name__}", np.nan
        yield op, M, N, sub, best, hk, hg


# ---- issue-16 style scoreboard: the best Gluon variant against the best peer, cell by cell ---------
GLUON_PREFIXES = ("gluon", )  # a variant is a peer when its name does not start with one of these


def scoreboard(g):
    """Per (M, N) cell of ONE run's records of one op (every variant side by side): the fastest passing
    Gluon variant and the fastest passing peer (every non-Gluon variant: torch, torch.compile, Triton,
    Liger, QuACK, ...), their medians (us) and `ratio` = best peer ms / best gluon ms (>= 1: Gluon leads).
    `% of ceiling` (the best gluon's) when g carries `pct_ceiling`. Empty frame without both sides."""
    import pandas as pd
    cols = ["M", "N", "best gluon", "gluon us", "best peer", "peer us", "ratio"]
    g = passed(g) if len(g) else g
    if not len(g):
        return pd.DataFrame(columns=cols)
    gl = g[g.variant.str.startswith(GLUON_PREFIXES)]
    pe = g[~g.variant.str.startswith(GLUON_PREFIXES)]
    if not len(gl) or not len(pe):
        return pd.DataFrame(columns=cols)

    def best(d, name):
        i = d.groupby(["M", "N"]).ms_median.idxmin()
        b = d.loc[i.values].set_index(["M", "N"])
        out = pd.DataFrame({f"best {name}": b.variant, f"{name} us": 1000 * b.ms_median})
        if name == "gluon" and "pct_ceiling" in b:
            out["% of ceiling"] = b.pct_ceiling
        return out

    t = best(gl, "gluon").join(best(pe, "peer"), how="inner")
    t["ratio"] = t["peer us"] / t["gluon us"]
    return t.reset_index()


def scoreboard_summary(boards: dict):
    """One row per board ({label: scoreboard frame}): cells, cells >= 1.0, worst cell, geomean ratio."""
    import pandas as pd
    rows = []
    for label, t in boards.items():
        if not len(t):
            continue
        w = t.loc[t.ratio.idxmin()]
        rows.append({"grid": label, "cells": len(t), "best gluon >= best peer": int((t.ratio >= 1.0).sum()),
                     "geomean ratio": round(geomean(t.ratio), 3), "worst ratio": round(float(w.ratio), 3),
                     "worst cell": f"{int(w.M)} x {int(w.N)} ({w['best peer']} leads)"})
    return pd.DataFrame(rows)


def scoreboard_targets(boards: dict, geomean_targets: dict, every_cell: float = 1.0):
    """(target, measured, met) rows: every cell of each board >= every_cell, and the geomean target of
    each board whose label is in geomean_targets ({label: target})."""
    import pandas as pd
    rows = []
    for label, t in boards.items():
        if not len(t):
            rows.append({"target": f"{label}: every cell >= {every_cell:.2f}x", "measured": None, "met": None})
            continue
        n_ok = int((t.ratio >= every_cell).sum())
        rows.append({"target": f"{label}: best gluon >= best peer in every cell",
                     "measured": f"{n_ok}/{len(t)} cells (worst {t.ratio.min():.3f}x)", "met": n_ok == len(t)})
        if label in geomean_targets:
            gm = geomean(t.ratio)
            rows.append({"target": f"{label}: geomean >= {geomean_targets[label]:.2f}x", "measured": f"{gm:.3f}x",
                         "met": gm >= geomean_targets[label]})
    return pd.DataFrame(rows)


def scoreboard_grid(t):
    """The ratio of a scoreboard as an M x N grid coloured met (>= 1.0) / near (>= 0.98) / missed."""
    if t is None or not len(t):
        return None
    v = t.pivot(index="M", columns="N", values="ratio")
    st = v.map(lambda r: "met" if r >= 1.0 else "near" if r >= 0.98 else "missed")
    return met_grid(v, st, fmt="{:.3f}", legend={"green": ">= 1.0 (gluon leads)", "amber": "0.98-1.0",
                                                  "red": "< 0.98"})


def _knob(v):
    """A knob value as recorded (pandas turns integer columns with gaps into floats: 8.0 -> 8)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def study_vs_peers(st, knobs: tuple, heuristic):
    """A knob study with its peers side by side (one run; config 'study' labels both): per (op, M, N)
    the heuristic's config (heuristic(op, N, M) -> object with the knob attributes) and its us, the
    best swept config and its us, the best peer and its us, and best peer / heuristic, best peer / best
    (>= 1: the Gluon config leads)."""
    import pandas as pd
    ok = passed(st) if len(st) else st
    rows = []
    if not len(ok):
        return pd.DataFrame()
    ok = ok.copy()
    for k in knobs:
        ok[k] = config_value(ok, k)
    for (op, M, N), sub in ok.groupby(["op", "M", "N"]):
        gl, pe = sub[sub.variant.str.startswith(GLUON_PREFIXES)], sub[~sub.variant.str.startswith(GLUON_PREFIXES)]
        if not len(gl) or not len(pe):
            continue
        b, p = gl.loc[gl.ms_median.idxmin()], pe.loc[pe.ms_median.idxmin()]
        try:
            h = heuristic(op, int(N), int(M))
            hk = tuple(getattr(h, k) for k in knobs)
            hs = gl[[tuple(r) == hk for r in gl[list(knobs)].itertuples(index=False)]]
            hus = 1000 * float(hs.ms_median.min()) if len(hs) else float("nan")
        except Exception as e:  # noqa: BLE001 - a refused shape is a cell, not a crash
            hk, hus = type(e).__name__, float("nan")
        rows.append({"op": op, "M": int(M), "N": int(N), "heuristic": " ".join(f"{k}={v}" for k, v in zip(knobs, hk))
                     if isinstance(hk, tuple) else hk, "heuristic us": round(hus, 2),
                     "best config": " ".join(f"{k}={_knob(b[k])}" for k in knobs), "best us": round(1000 * b.ms_median, 2),
                     "best peer": p.variant, "peer us": round(1000 * p.ms_median, 2),
                     "peer / heuristic": round(p.ms_median * 1000 / hus, 3) if hus == hus else float("nan"),
                     "peer / best": round(p.ms_median / b.ms_median, 3)})
    return pd.DataFrame(rows)


# ---- records: stale policy, one run per section, notes ------------------------------------------
def keep(df, stale: str = "flag"):
    """stale='flag': every record (stale ones are shown, marked); 'drop': only the current ones."""
    if stale not in ("flag", "drop"):
        raise ValueError(f"stale must be 'flag' or 'drop', got {stale!r}")
    return df if stale == "flag" else current(df)


def mask(s):
    """NA-safe boolean mask (shape columns are nullable integers)."""
    import pandas as pd
    return pd.Series(s).fillna(False).astype(bool)


def study(df):
    """The `study` of each record's config (None for the grids)."""
    import pandas as pd
    if not len(df):
        return pd.Series([], dtype=object, index=df.index)
    return config_value(df, "study")


def pick(df, m=None, require=()):
    """The newest run holding this section's records (and every variant in require), one run only."""
    if not len(df):
        return df.copy()
    return newest_run(df, None if m is None else mask(m), require=require).copy()


def about(g, what: str, with_files: bool = False) -> list:
    """Which run, how many records, which timers (Markdown), and a STALE note when any record is."""
    if not len(g):
        return []
    return [section_line(g, what, with_files=with_files), stale_note(g, what)]


def where(ctx: Context, name: str | None = None) -> str:
    """results/<gpu>/<name> as shown in notes: relative to the repository when it lies inside it."""
    p = ctx.results_dir / ctx.slug / (name or "")
    try:
        p = p.relative_to(REPO)
    except ValueError:
        pass
    return str(p).rstrip("/") + ("" if name else "/")


def nodata(ctx: Context, what: str, stale: str = "flag", name: str | None = None) -> str:
    """'No records for <what> in <file>' (name=None: this notebook's .jsonl)."""
    name = f"{ctx.notebook}.jsonl" if name is None else name
    return (f"**No records for {what}** in `{where(ctx, name)}`"
            + (" (stale records dropped: `stale='drop'`)" if stale == "drop" else "") + ".")


def stale_records(allrec, title: str = "**Stale records** (kernel source changed since the run):") -> list:
    """The stale-records table under its title, or a line saying there is none."""
    t = stale_table(allrec)
    return [title, t] if len(t) else ["no stale records"]


def tag(g) -> str:
    """' (run `X`, STALE)' / ' (run `X`)' for a takeaway drawn from the records g."""
    return f" (run `{g.run_id.iloc[0]}`{', STALE' if g.stale.any() else ''})"


def shape_str(idx) -> str:
    return "x".join(str(int(d)) for d in idx)


def table(t):
    """t, or None when it is empty (common.show skips None: no empty table on the page)."""
    return t if t is not None and len(t) else None


def bullets(lines) -> str:
    """Markdown bullet list like common.takeaways, where a line that starts with two spaces is a
    sub-item of the line before it."""
    return "\n".join((f"  - {ln.strip()}" if ln.startswith("  ") else f"- {ln}") for ln in lines if ln)
