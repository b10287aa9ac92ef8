"""matplotlib figures from Record DataFrames (gluon_lab_old.results.load): roofline, SOL heatmap,
"baseline -> variant (delta)" tables, speedup bars. Every function takes the data it shows and
nothing else; a cell with no record is drawn as "missing", never filled in."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt  # headless machines fall back to Agg by themselves
import numpy as np

from . import results as _results
from . import specs as _specs

VARIANT_COLORS = {"torch": "#7f7f7f", "inductor": "#1f77b4", "triton": "#ff7f0e", "liger": "#8c564b", "quack": "#bcbd22",
                  "gluon-tma": "#2ca02c", "gluon-chunked": "#17becf", "gluon-pipelined": "#9467bd",
                  "gluon-ws": "#d62728", "copy": "#000000"}
OP_MARKERS = {**{s.name: s.marker for s in _specs.all_specs()}, "copy": "x"}


# One class: results.load() raises it for a record whose recomputed physics exceeds the datasheet,
# check_physical() for a DataFrame row that does.
PhysicsError = _results.PhysicsError


def check_physical(df, limit_pct: float = 100.0):
    """PhysicsError naming every row that exceeds limit_pct of its GPU's datasheet.

    The physics is recomputed (results.physics): gbps / tflops from the row's bytes / flops /
    ms_median, the SOL from those and the datasheet of its gpu_name; where the columns do not allow
    it (no bytes, no gpu_name, a frame built by hand) the row's gbps / tflops / sol_datasheet_pct
    are taken as they are. Frames from results.load were checked line by line already (load raises
    PhysicsError with file:line), so on those this is a thin second check."""
    if not len(df):
        return
    bad = []
    for r in df.to_dict("records"):
        v = _results.physics_violations(_results.physics(r), limit_pct)
        if v:
            where = r.get("source", "") + ("" if _results._missing(r.get("line")) else f":{int(r['line'])}")
            dims = " ".join(f"{k}={r[k]}" for k in ("M", "N", "K") if k in r and not _results._missing(r[k]))
            bad.append(f"{r.get('op')}/{r.get('variant')} {dims} {'; '.join(v)} {where}".strip())
    if bad:
        raise PhysicsError(f"{len(bad)} record(s) exceed {limit_pct:.0f}% of the datasheet: " + " | ".join(bad))


def _color(variant: str) -> str:
    return VARIANT_COLORS.get(variant, "#bcbd22")


VARIANT_MARKERS = {"torch": "o", "inductor": "s", "inductor-max-autotune": "D", "triton": "^", "liger": "v", "quack": "<",
                   "gluon-tma": "P", "gluon-tma (TMA store)": "X", "gluon-chunked": "h", "gluon-pipelined": "*",
                   "gluon-ws": "p", "copy": "x", "cuBLAS ceiling": "d"}


def _marker(variant: str) -> str:
    return VARIANT_MARKERS.get(variant, "o")


def fmt_size(n) -> str:
    """A shape size as a short tick label: 16384 -> '16K', 5120 -> '5K', 1536 -> '1.5K', 2880 -> '2880'."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return str(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    if n >= 1024 and n % 512 == 0:
        return f"{n / 1024:g}K"
    return str(n)


def _size_ticks(ax, axis: str, values, label: str, fontsize: float = 9):
    """Short labels (16K) on a heatmap axis; the x labels turn 45 degrees past 8 columns."""
    labels = [fmt_size(v) for v in values]
    if axis == "x":
        rot = 45 if len(values) > 8 else 0
        ax.set_xticks(range(len(values)), labels, rotation=rot, ha="right" if rot else "center", fontsize=fontsize)
        ax.set_xlabel(label)
    else:
        ax.set_yticks(range(len(values)), labels, fontsize=fontsize)
        ax.set_ylabel(label)


def _cell_fontsize(ncols: int) -> float:
    return 9 if ncols <= 6 else 8 if ncols <= 9 else 7


NICE = [k * 10.0 ** e for e in range(-2, 5) for k in (1, 2, 3, 5)]


def _nice_log_ticks(ax, axis: str, lo: float, hi: float):
    """Plain-number ticks (0.5, 1, 2, 5, ...) on a log axis instead of 10^x labels."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ticks = [t for t in NICE if lo <= t <= hi]
    if len(ticks) > 7:
        ticks = [t for t in ticks if str(t).lstrip("0.").startswith(("1", "3"))] or ticks
    if len(ticks) < 3:  # a narrow range (e.g. 450-1100 TFLOP/s): every 1..9 x 10^e
        ticks = [k * 10.0 ** e for e in range(-2, 5) for k in range(1, 10) if lo <= k * 10.0 ** e <= hi]
        ticks = [round(t, 6) for t in ticks]
    a = ax.xaxis if axis == "x" else ax.yaxis
    if len(ticks) >= 2:
        a.set_ticks(ticks)
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def roofline(df, spec, ceilings: dict | None = None, ax=None, title: str = "Roofline", ops=None):
    """Achieved TFLOP/s vs arithmetic intensity (nominal FLOPs / compulsory bytes), log-log, one panel per op.

    Each variant is one marker (its colour and shape) per distinct intensity: the best TFLOP/s over the
    shapes there, with a vertical bar down to the slowest shape (so ~60 records read as a handful of
    points), nudged sideways per variant so that they do not hide each other. Lines: the datasheet roof
    (bandwidth x AI, capped by dense bf16 peak) and, when given, the roof of the ceilings measured in the
    same run (copy GB/s, matmul TFLOP/s). The matmul ceiling record itself is drawn only in a matmul
    panel (it is what the dashed roof says). One compact legend, outside the panels. ax: draw every op
    into that one axes (old behaviour, no per-op panels)."""
    d = df[(df["flops"].fillna(0) > 0) & df["ms_median"].notna()].copy()
    if not len(d):
        return None
    d["ai"] = d["flops"].astype(float) / d["bytes"].astype(float)
    d["tf"] = d["flops"].astype(float) / (d["ms_median"].astype(float) * 1e-3) / 1e12
    d.loc[d["pattern"] == "ceiling", "variant"] = "cuBLAS ceiling"
    have = list(dict.fromkeys(d.loc[d["pattern"] != "ceiling", "op"]))
    order = [o for o in (ops or list(OP_MARKERS)) if o in have] + [o for o in have if o not in (ops or OP_MARKERS)]
    if not order:  # ceilings only
        order = list(dict.fromkeys(d["op"]))
    legend_ax = None
    if ax is not None:
        axes, groups = [ax], [(None, d)]
        fig = ax.figure
    else:  # two panels per row (readable at page width); the legend takes a free slot, else sits beside / below
        n = len(order)
        per_row = 1 if n == 1 else 2
        rows = -(-n // per_row)
        fig, axs = plt.subplots(rows, per_row, figsize=(5.4 * per_row + (3.6 if n == 1 else 0), 4.3 * rows + (0.9 if n > 1 and n % 2 == 0 else 0)),
                                squeeze=False)
        axes = list(axs.ravel())
        if len(axes) > n:
            legend_ax = axes[n]
            legend_ax.axis("off")
            for extra in axes[n + 1:]:
                extra.remove()
        axes = axes[:n]
        groups = [(op, d[d["op"] == op]) for op in order]
    variants = [v for v in list(VARIANT_COLORS) + ["gluon-tma (TMA store)", "inductor-max-autotune", "cuBLAS ceiling"]
                if v in set(d["variant"])]
    variants += [v for v in sorted(set(d["variant"])) if v not in variants]
    handles = {}
    for a, (op, g) in zip(axes, groups):
        if not len(g):
            continue
        lo, hi = g["ai"].min() / 2.5, g["ai"].max() * 2.5
        xs = np.logspace(math.log10(lo), math.log10(hi), 100)
        if spec is not None:
            h, = a.plot(xs, np.minimum(spec.hbm_gbps * xs / 1e3, spec.bf16_tflops), "k-", lw=1.5)
            handles.setdefault(f"datasheet roof: {spec.hbm_gbps / 1e3:.2f} TB/s, {spec.bf16_tflops:.0f} TFLOP/s", h)
        if ceilings:
            h, = a.plot(xs, np.minimum(ceilings["copy_gbps"] * xs / 1e3, ceilings["matmul_tflops"]), "k--", lw=1.2)
            handles.setdefault(f"measured roof: {ceilings['copy_gbps'] / 1e3:.2f} TB/s copy, "
                               f"{ceilings['matmul_tflops']:.0f} TFLOP/s matmul", h)
        vs = [v for v in variants if v in set(g["variant"])]
        for k, v in enumerate(vs):
            gv = g[g["variant"] == v]
            gv = gv.assign(bin=np.round(np.log10(gv["ai"]) / 0.05))
            agg = gv.groupby("bin").agg(ai=("ai", "median"), best=("tf", "max"), worst=("tf", "min"), n=("tf", "size"))
            nudge = 10 ** (0.025 * (k - (len(vs) - 1) / 2))
            x = agg["ai"].to_numpy() * nudge
            a.vlines(x, agg["worst"], agg["best"], color=_color(v), lw=1.6, alpha=0.7)
            h = a.scatter(x, agg["best"], s=46, marker=_marker(v), color=_color(v), edgecolors="k", linewidths=0.4,
                          zorder=3)
            handles.setdefault(v, h)
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlim(lo, hi)
        _nice_log_ticks(a, "x", lo, hi)
        ylo, yhi = a.get_ylim()
        _nice_log_ticks(a, "y", ylo, yhi)
        a.grid(True, which="both", alpha=0.25)
        a.set_title(op if op else title, fontsize=11)
        a.set_xlabel("FLOP / byte (compulsory DRAM traffic)", fontsize=9)
        a.set_ylabel("achieved TFLOP/s", fontsize=9)
    labels = list(handles)
    kw = dict(fontsize=10, frameon=False, title="marker: best shape; bar: down to the slowest", title_fontsize=9)
    W, H = fig.get_figwidth(), fig.get_figheight()
    rect = (0, 0, 1, 0.95 if ax is None else 1)
    if legend_ax is not None:  # the free panel slot
        legend_ax.legend([handles[k] for k in labels], labels, loc="center", **kw)
    elif ax is None and len(axes) > 1:  # below the panels
        fig.legend([handles[k] for k in labels], labels, loc="lower center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(4, len(labels)), **kw)
        rect = (0, 0.9 / H + 0.04 * (len(labels) > 8), 1, 0.95)
    else:  # beside the one panel
        right = 1 - 3.4 / W
        fig.legend([handles[k] for k in labels], labels, loc="upper left", bbox_to_anchor=(right + 0.005, 0.9), **kw)
        rect = (0, 0, right, 0.95 if ax is None else 1)
    if ax is None:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=rect)
    return fig


def _grid(df, value: str, row: str, col: str, rows: list, cols: list):
    """rows x cols array of df[value] (NaN where a cell has no finite value)."""
    grid = np.full((len(rows), len(cols)), np.nan)
    for r in df.itertuples():
        i, j = getattr(r, row), getattr(r, col)
        v = getattr(r, value)
        if i in rows and j in cols and v is not None and v == v:
            grid[rows.index(i), cols.index(j)] = float(v)
    return grid


def sol_heatmap(df, value: str = "sol_datasheet_pct", row: str = "M", col: str = "N", rows=None, cols=None,
                ax=None, title: str = "", vmax: float = 100.0, fmt: str = "{:.0f}", cmap: str = "viridis",
                colorbar: bool = True):
    """One cell per (row, col) of a single variant's records; missing cells are hatched and labelled.
    Tick labels are short (16K for 16384) and turn past 8 columns."""
    rows = list(rows if rows is not None else sorted(df[row].dropna().unique()))
    cols = list(cols if cols is not None else sorted(df[col].dropna().unique()))
    ax = ax or plt.subplots(figsize=(max(4.0, 0.6 * len(cols) + 1.8), max(2.6, 0.42 * len(rows) + 1.2)))[1]
    grid = _grid(df, value, row, col, rows, cols)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
    ax.set_facecolor("#eeeeee")
    fs = _cell_fontsize(len(cols))
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid[i, j]
            if np.isnan(v):
                ax.text(j, i, "missing", ha="center", va="center", fontsize=fs - 1, color="#777777")
            else:
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=fs,
                        color="white" if v < 0.6 * vmax else "black")
    _size_ticks(ax, "x", cols, col)
    _size_ticks(ax, "y", rows, row)
    ax.set_title(title, fontsize=10)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax.figure


def ratio_span(values, lo_min: float = 1.15, hi_max: float = 2.0) -> float:
    """The half-width (as a factor) of a ratio map's colour scale: the largest |log| deviation from 1 of
    the values, at least lo_min, at most hi_max (so 0.5 and 2.0 are the same distance from 1)."""
    v = np.asarray([x for x in np.ravel(values) if x == x and x > 0], dtype=float)
    dev = float(np.exp(np.abs(np.log(v)).max())) if len(v) else lo_min
    return float(min(hi_max, max(lo_min, math.ceil(dev * 20) / 20)))


def ratio_norm(span: float):
    """Diverging norm centred on 1.0: 1/span and span sit at the two ends (symmetric in log)."""
    from matplotlib.colors import TwoSlopeNorm
    return TwoSlopeNorm(vmin=1.0 / span, vcenter=1.0, vmax=span)


RATIO_CMAP = "RdYlGn"  # red: slower than the reference, green: faster; 1.0 sits in the pale middle


def ratio_heatmap(df, value: str = "ratio", row: str = "M", col: str = "N", rows=None, cols=None, ax=None,
                  title: str = "", faster: str = "faster", slower: str = "slower", fmt: str | None = None,
                  target: float | None = None, span: float | None = None, colorbar: bool = True, fontsize=None):
    """A speed ratio per (row, col) cell on a diverging scale centred on 1.0 (TwoSlopeNorm: a 0.85 cell is
    red, 1.15 green, 1.0 pale), each cell annotated with its value (x marks a cell below `target`), the
    colour bar saying which side is faster. A cell without a value is grey and says 'missing'. fmt
    defaults to 3 decimals when a target is marked (0.975 must not read 0.98 next to a 0.98 target)."""
    fmt = fmt or ("{:.3f}" if target is not None else "{:.2f}")
    rows = list(rows if rows is not None else sorted(df[row].dropna().unique()))
    cols = list(cols if cols is not None else sorted(df[col].dropna().unique()))
    ax = ax or plt.subplots(figsize=(max(4.5, 0.7 * len(cols) + 2.6), max(2.8, 0.45 * len(rows) + 1.3)))[1]
    grid = _grid(df, value, row, col, rows, cols)
    span = span or ratio_span(grid)
    norm = ratio_norm(span)
    cm_ = plt.get_cmap(RATIO_CMAP)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cm_, norm=norm, aspect="auto")
    ax.set_facecolor("#eeeeee")
    fs = fontsize or _cell_fontsize(len(cols))
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = grid[i, j]
            if np.isnan(v):
                ax.text(j, i, "missing", ha="center", va="center", fontsize=fs - 1, color="#777777")
                continue
            rgb = cm_(norm(v))[:3]
            dark = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.45
            miss = target is not None and v < target
            ax.text(j, i, fmt.format(v) + (" ✗" if miss else ""), ha="center", va="center", fontsize=fs,
                    color="white" if dark else "black")
    _size_ticks(ax, "x", cols, col, fontsize=fs)
    _size_ticks(ax, "y", rows, row, fontsize=fs)
    ax.set_title(title, fontsize=max(10, fs + 1))
    if colorbar:
        cb = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, ticks=[1 / span, 1.0, span])
        cb.ax.set_yticklabels([f"{1 / span:.2f}", "1.00", f"{span:.2f}"], fontsize=fs - 1)
        cb.set_label(f"{slower}  \u25c0  1.0  \u25b6  {faster}", fontsize=fs - 1)
    return ax.figure


def sol_heatmaps(df, variants, value: str = "sol_datasheet_pct", suptitle: str = "", max_width: float = 18.5, **kw):
    """Side-by-side heatmaps, one per variant, on the same rows/cols/scale; a panel is as wide as its
    columns need, and the panels wrap onto more rows rather than squeeze past max_width inches."""
    rows = sorted(df["M"].dropna().unique())
    cols = sorted(df["N"].dropna().unique())
    w = max(3.6, 0.58 * len(cols) + 1.5)
    h = max(2.6, 0.42 * len(rows) + 1.3)
    per_row = max(1, min(len(variants), int(max_width // w)))
    nrows = -(-len(variants) // per_row)
    fig, axes = plt.subplots(nrows, per_row, figsize=(w * per_row, h * nrows + (0.5 if suptitle else 0)), squeeze=False)
    flat = list(axes.ravel())
    for extra in flat[len(variants):]:
        extra.remove()
    for ax, v in zip(flat, variants):
        sol_heatmap(df[df["variant"] == v], value=value, rows=rows, cols=cols, ax=ax, title=v, **kw)
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    return fig


def delta_table(df, baseline: str, variant: str, metric: str = "sol_datasheet_pct", row: str = "M",
                col: str = "N", unit: str = "%", missing=None):
    """Seed-format table: each cell reads `baseline -> variant (delta)` where the values are the
    metric (SOL % by default) and delta is the speed change of variant vs baseline
    (ms_baseline / ms_variant - 1). A cell without both records says which is absent: missing(row value,
    col value, absent variant) -> the reason, or by default '<variant> not measured'."""
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
                absent = variant if not len(v) else baseline
                out.loc[i, j] = missing(i, j, absent) if callable(missing) else (missing or f"{absent} not measured")
                continue
            b, v = b.iloc[-1], v.iloc[-1]
            d = (b["ms_median"] / v["ms_median"] - 1) * 100
            out.loc[i, j] = f"{b[metric]:.1f}{unit} -> {v[metric]:.1f}{unit} ({d:+.1f}%)"
    return out


def shape_label(idx) -> str:
    """'8K×8K×8K' of an (M, N, K) tuple (or one size)."""
    return "×".join(fmt_size(t) for t in (idx if isinstance(idx, tuple) else (idx, )))


def speedup_bars(df, baseline: str, variants, by=("M", "N"), ax=None, title: str = ""):
    """Speed of each variant relative to baseline (ms_baseline / ms_variant) per case: bars grow up
    (faster) or down (slower) from 1.0, each labelled with its value; the legend sits above the plot,
    outside the bars."""
    import pandas as pd
    by = list(by)
    piv = df.pivot_table(index=by, columns="variant", values="ms_median", aggfunc="median")
    if baseline not in piv:
        raise ValueError(f"no records of baseline {baseline!r}")
    sp = pd.DataFrame({v: piv[baseline] / piv[v] for v in variants if v in piv})
    ax = ax or plt.subplots(figsize=(max(7.5, 1.25 * len(sp) + 2), 4.2))[1]
    x = np.arange(len(sp))
    w = 0.8 / max(1, sp.shape[1])
    for k, v in enumerate(sp.columns):
        vals = sp[v].to_numpy(dtype=float)
        xs = x + k * w - 0.4 + w / 2
        ax.bar(xs, vals - 1.0, w, bottom=1.0, label=v, color=_color(v))
        for xx, val in zip(xs, vals):
            if val == val:
                ax.text(xx, val + (0.004 if val >= 1 else -0.004), f"{val:.2f}", ha="center",
                        va="bottom" if val >= 1 else "top", fontsize=7, rotation=90)
    ax.axhline(1.0, color="k", lw=0.9)
    vals = sp.to_numpy(dtype=float)
    vals = vals[vals == vals]
    if len(vals):
        pad = 0.06 * max(0.1, vals.max() - vals.min())
        ax.set_ylim(min(vals.min(), 1.0) - 2 * pad, max(vals.max(), 1.0) + 2 * pad)
    ax.set_xticks(x, [shape_label(i) for i in sp.index], fontsize=9, rotation=30 if len(sp) > 6 else 0,
                  ha="right" if len(sp) > 6 else "center")
    ax.set_ylabel(f"speed vs {baseline} (×, > 1 faster)")
    ax.set_title(title or f"speedup over {baseline}", fontsize=10, pad=26)
    ax.legend(fontsize=9, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=max(1, sp.shape[1]), frameon=False)
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
