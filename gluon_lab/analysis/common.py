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
from ..notebook import (ceilings, config_value, copy_reference_table, graph_output_caveat,  # noqa: F401
                        inductor_kernels, load_sanitizer, missing_note, newest_run, provenance_table,
                        resolve_mode, section_line, stale_note, stale_table)
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

    def path(self, suffix: str = ".jsonl") -> Path:
        """results/<gpu>/<notebook><suffix>, e.g. '.inductor-kernels.json' or '.timeline.json'."""
        return self.results_dir / self.slug / f"{self.notebook}{suffix}"

    def describe(self) -> str:
        return f"mode={self.run_mode}  gpu={self.slug}  datasheet={self.spec}  results={self.results_dir}"


def setup(notebook: str, mode: str = "auto", gpu: str | None = None, results_dir=None,
          width: int = 220, max_columns: int = 30, max_rows: int | None = None,
          max_colwidth: int | None = None) -> Context:
    """Resolve the parameters cell into a Context and set the pandas display options.

    In measure mode results_dir may not exist yet (the plan creates it); in replay it must."""
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
    return Context(notebook, run_mode, slug, device.DATASHEET.get(slug), root)


def load(ctx: Context, newest_only: bool = False):
    """Every record of ctx.notebook on ctx.slug (stale-marked); newest per case with newest_only."""
    return _load(ctx.results_dir, ctx.slug, ctx.notebook, newest_only=newest_only)


def current(df):
    """The records whose kernel source is unchanged since they were measured (not stale)."""
    if not len(df) or "stale" not in df:
        return df
    return df[~df["stale"].astype(bool)]


def overview(ctx: Context, df) -> list:
    """The outputs of a notebook's "measure or replay" cell: the provenance table (one row per run),
    and a missing note when there is no record at all (then no empty table)."""
    if not len(df):
        return [None, missing_note(df, f"{ctx.notebook} on {ctx.slug}")]
    return [provenance_table(df), None]


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
