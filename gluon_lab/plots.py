"""matplotlib figures from Record DataFrames (gluon_lab.results.load): roofline, SOL heatmap,
"baseline -> variant (delta)" tables, speedup bars. Every function takes the data it shows and
nothing else; a cell with no record is drawn as "missing", never filled in."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt  # headless machines fall back to Agg by themselves
import numpy as np

from . import specs as _specs

VARIANT_COLORS = {"torch": "#7f7f7f", "inductor": "#1f77b4", "triton": "#ff7f0e", "liger": "#8c564b",
                  "gluon-tma": "#2ca02c", "gluon-chunked": "#17becf", "gluon-pipelined": "#9467bd",
                  "gluon-ws": "#d62728", "copy": "#000000"}
OP_MARKERS = {**{s.name: s.marker for s in _specs.all_specs()}, "copy": "x"}


class PhysicsError(ValueError):
    """A record claims more than the datasheet allows: the measurement is wrong, not the GPU."""


def check_physical(df, limit_pct: float = 100.0):
    if not len(df) or "sol_datasheet_pct" not in df:
        return
    bad = df[df["sol_datasheet_pct"].astype(float) > limit_pct]
    if len(bad):
        rows = "; ".join(f"{r.get('op')}/{r.get('variant')} M={r.get('M')} N={r.get('N')} "
                         f"{r['sol_datasheet_pct']:.1f}% {r.get('source', '')}" for _, r in bad.iterrows())
        raise PhysicsError(f"{len(bad)} record(s) exceed {limit_pct:.0f}% of the datasheet: {rows}")


def _color(variant: str) -> str:
    return VARIANT_COLORS.get(variant, "#bcbd22")


def roofline(df, spec, ceilings: dict | None = None, ax=None, title: str = "Roofline"):
    """Achieved TFLOP/s vs arithmetic intensity (nominal FLOPs / compulsory bytes), log-log.
    Lines: datasheet roof (bandwidth x AI, capped by dense bf16 peak) and, when given, the roof of
    the ceilings measured in the same run (copy GB/s, matmul TFLOP/s)."""
    ax = ax or plt.subplots(figsize=(10, 5))[1]
    d = df[(df["flops"].fillna(0) > 0) & df["ms_median"].notna()]  # includes the matmul ceiling (cuBLAS)
    ai_lo, ai_hi = 0.1, 2000.0
    xs = np.logspace(math.log10(ai_lo), math.log10(ai_hi), 200)
    if spec is not None:
        ax.plot(xs, np.minimum(spec.hbm_gbps * xs / 1e3, spec.bf16_tflops), "k-", lw=1.5,
                label=f"datasheet {spec.hbm_gbps / 1e3:.2f} TB/s, {spec.bf16_tflops:.0f} TF/s")
    if ceilings:
        ax.plot(xs, np.minimum(ceilings["copy_gbps"] * xs / 1e3, ceilings["matmul_tflops"]), "k--", lw=1.2,
                label=f"measured {ceilings['copy_gbps'] / 1e3:.2f} TB/s copy, {ceilings['matmul_tflops']:.0f} TF/s matmul")
    for (op, variant, pattern), g in d.groupby(["op", "variant", "pattern"]):
        ai = g["flops"].astype(float) / g["bytes"].astype(float)
        tf = g["flops"].astype(float) / (g["ms_median"].astype(float) * 1e-3) / 1e12
        ax.scatter(ai, tf, s=22, marker=OP_MARKERS.get(op, "o"), color=_color(variant), alpha=0.8,
                   label=f"{op} · {variant}" + (" (ceiling)" if pattern == "ceiling" else ""), edgecolors="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of compulsory DRAM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.figure.tight_layout()
    return ax.figure


def sol_heatmap(df, value: str = "sol_datasheet_pct", row: str = "M", col: str = "N", rows=None, cols=None,
                ax=None, title: str = "", vmax: float = 100.0, fmt: str = "{:.0f}", cmap: str = "viridis"):
    """One cell per (row, col) of a single variant's records; missing cells are hatched and labelled."""
    ax = ax or plt.subplots(figsize=(1.1 * max(4, len(cols or df[col].unique())) + 1.5, 3.2))[1]
    rows = list(rows if rows is not None else sorted(df[row].dropna().unique()))
    cols = list(cols if cols is not None else sorted(df[col].dropna().unique()))
    grid = np.full((len(rows), len(cols)), np.nan)
    for r in df.itertuples():
        i, j = getattr(r, row), getattr(r, col)
        if i in rows and j in cols and getattr(r, value) is not None:
            grid[rows.index(i), cols.index(j)] = float(getattr(r, value))
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
    ax.set_facecolor("#eeeeee")
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid[i, j]
            if np.isnan(v):
                ax.text(j, i, "missing", ha="center", va="center", fontsize=7, color="#777777")
            else:
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=8,
                        color="white" if v < 0.6 * vmax else "black")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(col)
    ax.set_ylabel(row)
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax.figure


def sol_heatmaps(df, variants, value: str = "sol_datasheet_pct", suptitle: str = "", **kw):
    """Side-by-side heatmaps, one per variant, on the same rows/cols/scale."""
    rows = sorted(df["M"].dropna().unique())
    cols = sorted(df["N"].dropna().unique())
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4), squeeze=False)
    for ax, v in zip(axes[0], variants):
        sol_heatmap(df[df["variant"] == v], value=value, rows=rows, cols=cols, ax=ax, title=v, **kw)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    return fig


def delta_table(df, baseline: str, variant: str, metric: str = "sol_datasheet_pct", row: str = "M",
                col: str = "N", unit: str = "%"):
    """Seed-format table: each cell reads `baseline -> variant (delta)` where the values are the
    metric (SOL % by default) and delta is the speed change of variant vs baseline
    (ms_baseline / ms_variant - 1). A cell without both records reads 'missing'."""
    import pandas as pd
    rows = sorted(df[row].dropna().unique())
    cols = sorted(df[col].dropna().unique())
    out = pd.DataFrame(index=pd.Index(rows, name=row), columns=pd.Index(cols, name=col), dtype=object)
    for i in rows:
        for j in cols:
            cell = df[(df[row] == i) & (df[col] == j)]
            b = cell[cell["variant"] == baseline]
            v = cell[cell["variant"] == variant]
            if not len(b) or not len(v):
                out.loc[i, j] = "missing"
                continue
            b, v = b.iloc[-1], v.iloc[-1]
            d = (b["ms_median"] / v["ms_median"] - 1) * 100
            out.loc[i, j] = f"{b[metric]:.1f}{unit} -> {v[metric]:.1f}{unit} ({d:+.1f}%)"
    return out


def speedup_bars(df, baseline: str, variants, by=("M", "N"), ax=None, title: str = ""):
    """Speed of each variant relative to baseline (ms_baseline / ms_variant) per case."""
    import pandas as pd
    by = list(by)
    piv = df.pivot_table(index=by, columns="variant", values="ms_median", aggfunc="median")
    if baseline not in piv:
        raise ValueError(f"no records of baseline {baseline!r}")
    sp = pd.DataFrame({v: piv[baseline] / piv[v] for v in variants if v in piv})
    ax = ax or plt.subplots(figsize=(max(6, 0.45 * len(sp)), 3.6))[1]
    x = np.arange(len(sp))
    w = 0.8 / max(1, sp.shape[1])
    for k, v in enumerate(sp.columns):
        ax.bar(x + k * w - 0.4 + w / 2, sp[v].values, w, label=v, color=_color(v))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, ["×".join(str(int(t)) for t in (i if isinstance(i, tuple) else (i, ))) for i in sp.index],
                  rotation=60, fontsize=7)
    ax.set_ylabel(f"speed vs {baseline} (×)")
    ax.set_title(title or f"speedup over {baseline}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.figure.tight_layout()
    return ax.figure


def geomean(xs) -> float:
    xs = [float(x) for x in xs if x is not None and x == x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def save(fig, path) -> str:
    from pathlib import Path
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110, bbox_inches="tight")
    return str(p)
