"""Notebook 07-backward: the row norms' backward — its grid against the peers, the copy ceiling, the knob and
statistics studies, the census.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()          gluon_lab.backward_plan.run_backward(results_dir=, quick=, parts=)
    kernel_source()    gluon_lab.kernels.norm_backward: the Gluon kernels' .fn sources
    census_table()     codegen.inspect_variant of the registered gluon-regs variants (compiled here for sm_90)
    heuristic()        gluon_lab.kernels.norm_backward.BwdConfig.make (what the grid ran at each shape)

"best Gluon" is gluon-regs (the one backward variant so far); a peer is every other variant measured in the same
run: torch (what eager autograd runs: aten's fused backward kernels), inductor (torch.compile of the closed-form
backward), Liger, QuACK (when installed on the measuring machine).
"""
from __future__ import annotations

import pandas as pd

from . import common as cm

NB = "07-backward"
OPS = ("rms_norm_backward", "layer_norm_backward", "add_rms_norm_backward")
GLUON = "gluon-regs"
PEERS = ("torch", "inductor", "liger", "quack")
CELL_TARGET, GEOMEAN_TARGET, CEILING_TARGET, CEILING_FROM = 1.0, 1.10, 85.0, 64 * 2 ** 20
KNOBS = ("num_warps", "ctas_per_sm", "partials", "prefetch")


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False,
            parts=("grid", "dtypes", "bwd-config", "bwd-stats", "train-step", "timeline")):
    from ..backward_plan import run_backward
    _, where = run_backward(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def kernel_source() -> str:
    import inspect
    from ..kernels import norm_backward as b
    return "\n\n".join(inspect.getsource(k.fn) for k in (b.norm_bwd_kernel, b.colsum_kernel))


def heuristic(op: str, N: int, M: int | None = None):
    from .. import specs
    from ..kernels.norm_backward import BwdConfig
    return BwdConfig.make(int(N), "bfloat16", specs.get(op).kind == "layer", M, "ds" in specs.get(op).input_names)


def copy_rows(op: str, M: int, N: int) -> tuple:
    from ..backward_plan import copy_shape
    c = copy_shape(op, int(M), int(N), "bfloat16")
    return c["M"], c["N"]


def census_table(Ns=(1536, 4096, 5120, 8192, 12288, 16384)):
    """sm_90 census of gluon-regs (heuristic configs, bf16), compiled here on the CPU: per thread, the
    128-bit loads (x, dy, w [, ds]) and stores (dx, the partial rows), 32-bit loads (the saved statistics),
    registers, spills, shared memory, barriers, atomics."""
    from .. import codegen
    rows = []
    for op in OPS:
        for N in Ns:
            cfg = heuristic(op, N)
            _, c = codegen.inspect_variant(op, GLUON, N=N, dtype="bfloat16")
            rows.append({"op": op.replace("_backward", ""), "N": N, "warps": cfg.num_warps, "rows": cfg.rows,
                         "programs/SM": cfg.ctas_per_sm, "partials": "smem" if cfg.partials else "registers",
                         "ld.128": c["ld_global_by_bits"].get(128, 0), "ld.32 (stats)": c["ld_global_by_bits"].get(32, 0),
                         "st.128": c["st_global_by_bits"].get(128, 0), "TMA": c["tma_load"],
                         "bar.sync": c.get("bar_sync", 0), "atomics": sum("ATOM" in k or "RED" in k for k in c["sass"]),
                         "registers": c["registers"], "spill B": c["spill_bytes"], "smem B": c["smem_bytes"]})
    return pd.DataFrame(rows)


# ---- the records ----------------------------------------------------------------------------------
def _study(df):
    return cm.config_value(df, "study") if len(df) else pd.Series([], dtype=object)


def grid(df, op: str, dtype: str = "bfloat16"):
    """One run's grid of op (every variant, no study), with each cell's copy reference: the copy of as many
    bytes as the backward's compulsory traffic (x, dy read, dx written; ds too for add+RMSNorm), measured in the
    same run, or where the copy's tensor reaches 64 Mi elements the larger of it and the run's session copy (the
    rule of notebook.copy_reference_table: graph-timed copies of >= 512 MiB fell to ~65% of the session copy);
    `pct_ceiling` = GB/s of the byte model / that reference."""
    if not len(df):
        return df.copy()
    st = _study(df)
    m = (df.op == op) & (df.dtype == dtype) & st.isna() & df.N.notna()
    if not m.any():
        return df[m].copy()
    g = cm.newest_run(df, m, require=(GLUON, "torch")).copy()
    cp = df[(df.op == "copy") & (df.run_id == g.run_id.iloc[0]) & (df.dtype == dtype)]
    ref = cp.sort_values("timestamp").groupby(["M", "N"]).gbps.last()
    ce = cm.ceilings(df[df.run_id == g.run_id.iloc[0]])
    session = ce["copy_gbps"] if ce else float("nan")

    def reference(M, N):
        cM, cN = copy_rows(op, M, N)
        v = ref.get((cM, cN), float("nan"))
        return max(v, session) if cM * cN >= CEILING_FROM and session == session else v

    g["reference GB/s"] = [reference(M, N) for M, N in zip(g.M, g.N)]
    g["pct_ceiling"] = 100 * g.gbps / g["reference GB/s"]
    return g


def about(df) -> list:
    """Which run each op's grid comes from, and a STALE note where its records' launches changed since."""
    out = []
    for op in OPS:
        g = grid(df, op)
        if len(g):
            out += [cm.section_line(g, f"{op} grid"), cm.stale_note(g, f"the {op} grid")]
    return out or [cm.missing_note(cm.no_records(), "the 07 backward grid")]


def scoreboards(df) -> dict:
    return {op.replace("_backward", ""): cm.scoreboard(grid(df, op)) for op in OPS}


def scoreboard_view(df) -> list:
    boards = {k: v for k, v in scoreboards(df).items() if len(v)}
    if not boards:
        return [cm.missing_note(cm.no_records(), "the 07 backward grid")]
    allcells = pd.concat(boards.values(), ignore_index=True)
    boards["all three ops"] = allcells
    return [cm.scoreboard_summary(boards),
            cm.target_list(cm.scoreboard_targets(boards, {k: GEOMEAN_TARGET for k in boards}))]


def scoreboard_grids(df) -> list:
    out = []
    for op, t in scoreboards(df).items():
        if len(t):
            out += [f"**{op} backward**: best peer / gluon-regs per cell (rows M, columns N)", cm.scoreboard_grid(t)]
    return out


def uncovered(df) -> pd.DataFrame:
    """The grid cells gluon-regs refuses (next_power_of_2(N) > 16384) and who is fastest there."""
    rows = []
    for op in OPS:
        g = cm.passed(grid(df, op))
        if not len(g):
            continue
        for (M, N), sub in g.groupby(["M", "N"]):
            if GLUON not in set(sub.variant):
                b = sub.loc[sub.ms_median.idxmin()]
                rows.append({"op": op, "M": int(M), "N": int(N), "fastest": b.variant, "us": round(1000 * b.ms_median, 1),
                             "why": cm.refusal(op, GLUON, {"M": int(M), "N": int(N)})})
    return pd.DataFrame(rows)


def ceiling_table(df) -> pd.DataFrame:
    """gluon-regs at M*N >= 64 Mi elements: GB/s of the byte model, % of the datasheet and of the copy ceiling."""
    rows = []
    for op in OPS:
        g = cm.passed(grid(df, op))
        g = g[(g.variant == GLUON) & (g.M * g.N >= CEILING_FROM)] if len(g) else g
        for _, r in g.iterrows():
            rows.append({"op": op.replace("_backward", ""), "M": int(r.M), "N": int(r.N), "GB/s": round(r.gbps),
                         "% datasheet": round(r.sol_datasheet_pct, 1), "copy GB/s": round(r["reference GB/s"]),
                         "% of copy": round(r.pct_ceiling, 1)})
    return pd.DataFrame(rows)


def ceiling_target(df) -> pd.DataFrame:
    t = ceiling_table(df)
    if not len(t):
        return pd.DataFrame([{"target": f">= {CEILING_TARGET:.0f}% of the copy ceiling at M*N >= 64 Mi",
                              "measured": None, "met": None}])
    n = int((t["% of copy"] >= CEILING_TARGET).sum())
    return pd.DataFrame([{"target": f"gluon-regs >= {CEILING_TARGET:.0f}% of the copy ceiling at M*N >= 64 Mi",
                          "measured": f"{n}/{len(t)} cells (min {t['% of copy'].min():.1f}%, median "
                                      f"{t['% of copy'].median():.1f}%)", "met": n == len(t)}])


def partials_share(df) -> pd.DataFrame:
    """The dw (db) reduction's cost, from the byte model: G programs write G fp32 partial rows per parameter and
    the column reduce reads them back (2 x G x N x 4 B), against the compulsory bytes (modelled, not timed: the
    reduce is one launch of its own, timed inside the op)."""
    from .. import specs
    from ..specs.norm_grad import backward_bytes
    from ..kernels.norm_backward import grid_size
    from ..kernels.hopper import H200_SMS
    rows = []
    for op in OPS:
        sp = specs.get(op)
        for M, N in ((4096, 4096), (16384, 4096), (16384, 8192), (16384, 16384)):
            cfg = heuristic(op, N, M)
            G = grid_size(M, cfg, H200_SMS)
            t = backward_bytes(M, N, 2, weight=True, bias=sp.kind == "layer", residual="ds" in sp.input_names,
                               partial_rows=G)
            rows.append({"op": op.replace("_backward", ""), "M": M, "N": N, "programs G": G,
                         "partials MiB": round(t["partials"] / 2 ** 20, 2),
                         "compulsory MiB": round((t["total"] - t["partials"]) / 2 ** 20, 1),
                         "partials share %": round(100 * t["partials"] / t["total"], 2)})
    return pd.DataFrame(rows)


def config_study(df) -> pd.DataFrame:
    """'bwd-config': every swept config per (op, N) at M = 16384, us, the heuristic's marked."""
    if not len(df):
        return pd.DataFrame()
    st = _study(df)
    s = cm.passed(df[st == "bwd-config"]).copy()
    if not len(s):
        return pd.DataFrame()
    s = cm.newest_run(s)
    for k in KNOBS:
        s[k] = cm.config_value(s, k).map(cm._knob)
    s["prefetch"] = s["prefetch"].map(bool)  # runs before the knob existed recorded none: off
    rows = []
    for (op, M, N), sub in s.groupby(["op", "M", "N"]):
        h = heuristic(op, N, M)
        hk = tuple(getattr(h, k) for k in KNOBS)
        best = sub.loc[sub.ms_median.idxmin()]
        hs = sub[[tuple(r) == hk for r in sub[list(KNOBS)].itertuples(index=False)]]
        rows.append({"op": op.replace("_backward", ""), "M": int(M), "N": int(N), "configs": len(sub),
                     "best (warps, programs/SM, partials, prefetch)": tuple(int(best[k]) for k in KNOBS),
                     "best us": round(1000 * best.ms_median, 1), "heuristic": hk,
                     "heuristic us": round(1000 * float(hs.ms_median.min()), 1) if len(hs) else None,
                     "heuristic / best": round(float(hs.ms_median.min()) / best.ms_median, 3) if len(hs) else None})
    return pd.DataFrame(rows)


def stats_study(df) -> pd.DataFrame:
    """'bwd-stats': the forward's statistics read (the grid's inputs) vs recomputed from x (what autograd does
    today): recomputed / saved time."""
    if not len(df):
        return pd.DataFrame()
    s = cm.passed(df[_study(df) == "bwd-stats"]).copy()
    if not len(s):
        return pd.DataFrame()
    s = cm.newest_run(s)
    s["recompute"] = cm.config_value(s, "recompute")
    p = s.pivot_table(index=["op", "M", "N"], columns="recompute", values="ms_median")
    out = pd.DataFrame({"saved us": (1000 * p[False]).round(1), "recomputed us": (1000 * p[True]).round(1),
                        "recomputed / saved": (p[True] / p[False]).round(3)})
    return out.reset_index()


def dtype_table(df) -> pd.DataFrame:
    """fp16 and fp32 on the 'dtypes' subset: us per variant, and torch / gluon-regs."""
    rows = []
    for dt in ("float16", "float32"):
        for op in OPS:
            g = cm.passed(grid(df, op, dt))
            if not len(g):
                continue
            p = g.pivot_table(index=["M", "N"], columns="variant", values="ms_median")
            for (M, N), r in p.iterrows():
                rows.append({"dtype": dt, "op": op.replace("_backward", ""), "M": int(M), "N": int(N),
                             **{f"{v} us": round(1000 * r[v], 1) for v in p.columns},
                             "best peer / gluon-regs": round(min(r[v] for v in p.columns if v != GLUON) / r[GLUON], 3)
                             if GLUON in p.columns else None})
    return pd.DataFrame(rows)


# ---- the page's headline and takeaways --------------------------------------------------------------
def headline_numbers(df) -> list:
    boards = {k: v for k, v in scoreboards(df).items() if len(v)}
    if not boards:
        return [("gluon-regs vs the best peer", "missing: no 07 grid in the records")]
    allc = pd.concat(boards.values(), ignore_index=True)
    w = allc.loc[allc.ratio.idxmin()]
    out = [("gluon-regs vs the best peer (bf16 grid)",
            f"{cm.geomean(allc.ratio):.3f}× geomean, {int((allc.ratio >= 1).sum())}/{len(allc)} cells ≥ 1.0 "
            f"(worst {w.ratio:.2f}× at {int(w.M)} × {int(w.N)}, {w['best peer']} leads)")]
    for op, t in boards.items():
        out.append((f"{op} backward", f"{cm.geomean(t.ratio):.3f}× geomean, {int((t.ratio >= 1).sum())}/{len(t)} cells"))
    ct = ceiling_table(df)
    if len(ct):
        out.append(("% of the copy ceiling (M·N ≥ 64 Mi)", f"{ct['% of copy'].min():.0f}–{ct['% of copy'].max():.0f}% "
                                                          f"(median {ct['% of copy'].median():.0f}%)"))
    q = quack_table(df)
    if len(q) and q["quack / gluon-regs"].notna().any():
        r = q["quack / gluon-regs"].dropna()
        out.append(("vs QuACK (its own run, M = 16384; not in the grid's best peer)",
                    f"{cm.geomean(r):.3f}× geomean, {int((r >= 1).sum())}/{len(r)} cells ≥ 1.0 (worst {r.min():.2f}×)"))
    un = uncovered(df)
    if len(un):
        out.append(("rows gluon-regs does not take", f"{len(un)} cells at N > 16384 (torch / inductor run them)"))
    return out


def headline_figure(df):
    """Best peer / gluon-regs per cell of the bf16 grid, one panel per M, a line per op (>= 1: Gluon leads)."""
    import matplotlib.pyplot as plt
    boards = {k: v for k, v in scoreboards(df).items() if len(v)}
    if not boards:
        return None
    Ms = sorted({int(m) for t in boards.values() for m in t.M})
    fig, axes = plt.subplots(1, len(Ms), figsize=(6.5 * len(Ms), 4.2), sharey=True, squeeze=False)
    for ax, M in zip(axes[0], Ms):
        for op, t in boards.items():
            d = t[t.M == M].sort_values("N")
            ax.plot(d.N, d.ratio, marker="o", label=op)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"M = {M}")
        ax.set_xlabel("N (hidden size)")
    axes[0][0].set_ylabel("best peer time / gluon-regs time")
    axes[0][0].legend()
    fig.suptitle("Row-norm backward, bf16, H200: gluon-regs against the fastest of torch / inductor / Liger / QuACK")
    fig.tight_layout()
    return fig


def takeaways(df) -> list:
    lines = []
    boards = {k: v for k, v in scoreboards(df).items() if len(v)}
    if boards:
        allc = pd.concat(boards.values(), ignore_index=True)
        lines.append(f"One kernel for the three backwards (rows of x and dy in registers, fp32 partials per "
                     f"persistent program, one fixed-order reduce) leads the best peer in "
                     f"{int((allc.ratio >= 1).sum())} of {len(allc)} bf16 cells, {cm.geomean(allc.ratio):.3f}× geomean: "
                     f"the geomean bar ({GEOMEAN_TARGET:.2f}×) is {'met' if cm.geomean(allc.ratio) >= GEOMEAN_TARGET else 'missed'}"
                     f", every-cell bar {'met' if (allc.ratio >= 1).all() else 'missed'}.")
    st = stats_study(df)
    if len(st):
        small, w = st[st.N <= 8192], st.loc[st["recomputed / saved"].idxmax()]
        lines.append(f"Reading the forward's statistics beats recomputing them from x by "
                     f"{100 * (small['recomputed / saved'].min() - 1):.0f}–{100 * (small['recomputed / saved'].max() - 1):.0f}% "
                     f"at N ≤ 8192 (one more row reduction and barrier per row): the training forward "
                     f"(`gluon_lab::<op>_train`) saves them in its own pass. Worst: {w.op.replace('_backward', '')} "
                     f"{int(w.M)} × {int(w.N)}, {w['recomputed / saved']:.1f}× slower recomputed: the heuristic config "
                     "is chosen with the statistics read, and the plain custom op's backward (named forward variants "
                     "other than auto / gluon-regs / torch) still recomputes.")
    q = quack_table(df)
    if len(q) and q["quack / gluon-regs"].notna().any():
        r = q["quack / gluon-regs"].dropna()
        lose = q[q["quack / gluon-regs"] < 1]
        lines.append(f"QuACK (its own run, M = 16384) is the strongest peer: gluon-regs leads it in {int((r >= 1).sum())} of "
                     f"{len(r)} cells, {cm.geomean(r):.3f}× geomean; QuACK leads at "
                     + ", ".join(f"{o} {int(n)}" for o, n in zip(lose.op, lose.N)) + ".")
    lines.append("The dw / db partials are 1–15% of the bytes by the model (more at small M): a few programs per SM, "
                 "not one per row tile; the timeline section times the column reduce alone beside the op.")
    return lines


def training_step(df) -> list:
    """The 'train-step' study: per (B, S), the compiled training step's median ms without and with the rewrite
    (the median over the run's repeats), with / without, the custom ops in the code, the gradients' check."""
    if not len(df):
        return [cm.missing_note(df, "the training step")]
    d = df[(df.op == "llama_block") & (cm.config_value(df, "study") == "train-step")] if "config_key" in df else df[:0]
    if not len(d):
        return ["**Training step: missing** (the plan's 'train-step' part has not run on this GPU yet: "
                "`python -m gluon_lab bench 07-backward --parts train-step`)."]
    d = cm.newest_run(d).copy()
    for k in ("B", "S"):  # the block's shape keys are no op spec's: read them from the record's shape
        d[k] = d["shape"].map(lambda sh, k=k: sh[k])
    d["ops"] = cm.config_value(d, "custom_ops").map(lambda o: ", ".join(f"{k} x{v}" for k, v in (o or {}).items()) or "-")
    p = d.groupby(["B", "S", "variant"]).agg(ms=("ms_median", "median"), ok=("passed", "all"), ops=("ops", "first"))
    rows = []
    for (B, S), sub in p.groupby(level=[0, 1]):
        sub = sub.droplevel([0, 1])
        if not {"compiled", "compiled+gluon-lab"} <= set(sub.index):
            continue
        a, b = sub.loc["compiled"], sub.loc["compiled+gluon-lab"]
        rows.append({"B": int(B), "S": int(S), "compiled ms": round(a.ms, 3), "with the rewrite ms": round(b.ms, 3),
                     "with / without": round(a.ms / b.ms, 3), "custom ops (rewrite)": b.ops,
                     "gradients = eager's": bool(a.ok and b.ok)})
    return [cm.section_line(d, "training step"), pd.DataFrame(rows)]


# ---- the measured timeline of the persistent programs (%globaltimer, INSTRUMENT build) ------------------
def load_timeline(ctx: cm.Context):
    from .timeline import load_timeline as load
    return load(ctx, NB)


def timeline_note(ctx: cm.Context, TL, allrec, stale: str = "flag") -> str:
    """Provenance of the timeline: its run, and whether that run's gluon-regs records of the traced ops are stale."""
    if TL is None:
        from .common import nodata
        return nodata(ctx, f"the measured timeline ({NB}.timeline.json is missing)", stale)
    ops = {t["op"] for t in TL["timelines"].values()}
    src = allrec[(allrec.run_id == TL["run_id"]) & allrec.op.isin(ops) & (allrec.variant == GLUON)] \
        if len(allrec) else allrec
    state = ("no gluon-regs record of that run to check the kernel source against" if not len(src)
             else "STALE: the kernel source has changed since" if src.stale.any() else "the kernel source is unchanged since")
    return (f"MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` ({state}); {TL['dtype']}, the "
            "heuristic config, the second of two launches of the INSTRUMENT build.")


def _programs(t):
    """Per traced program: (tiles (k, 3) array of [start, stats_ready, folded] ns, its end stamp)."""
    import numpy as np
    out = []
    for c in t["ns"]:
        a = np.asarray(c, dtype=float).reshape(-1, 3)
        if len(a) >= 2:
            out.append((a[:-1], a[-1, 0]))
    return out


def timeline_stats(TL) -> pd.DataFrame:
    """Per traced (op, shape): programs, tiles per program, medians over every tile of start -> statistics ready (the
    loads issued and, with the forward's statistics, those read: the x / dy data is first *consumed* after this
    stamp, so its arrival counts in the next phase), the rest of the tile (dx and the partials, waiting for x and dy),
    the gap to the next tile, the partial-row store at the end; the spread of program end times; the column reduce
    timed alone against the whole op (us, do_bench medians)."""
    import numpy as np
    rows = []
    for key, t in (TL or {}).get("timelines", {}).items():
        ps = _programs(t)
        if not ps:
            continue
        wait = np.concatenate([a[:, 1] - a[:, 0] for a, _ in ps])
        rest = np.concatenate([a[:, 2] - a[:, 1] for a, _ in ps])
        gaps = [a[1:, 0] - a[:-1, 2] for a, _ in ps if len(a) > 1]
        gap = np.concatenate(gaps) if gaps else np.zeros(0)
        tail = np.array([end - a[-1, 2] for a, end in ps])
        ends = np.array([end for _, end in ps])
        c = t["config"]
        rows.append({"traced": key, "config": f"{c['num_warps']}w x {c['ctas_per_sm']}/SM, partials "
                                              f"{'smem' if c['partials'] else 'regs'}",
                     "programs": len(ps), "tiles / program": f"{min(len(a) for a, _ in ps)}–{max(len(a) for a, _ in ps)}",
                     "loads issued, statistics (us)": np.median(wait) / 1e3,
                     "dx + partials, incl. the data's arrival (us)": np.median(rest) / 1e3,
                     "gap to next tile (us)": float(np.median(gap)) / 1e3 if len(gap) else float("nan"),
                     "partial-row store (us)": np.median(tail) / 1e3,
                     "program end spread (us)": (ends.max() - ends.min()) / 1e3,
                     "op (us)": t["op_us"], "column reduce alone (us)": t["reduce_us"],
                     "reduce share %": 100 * t["reduce_us"] / t["op_us"]})
    return pd.DataFrame(rows).set_index("traced").round(2) if rows else pd.DataFrame()


def timeline_figure(TL, programs: int = 6, tiles: int = 16):
    """Gantt of the first `programs` persistent programs per traced shape: per tile the data wait and the rest, the
    partial-row store at the end (first `tiles` tiles and the last); None without a timeline."""
    import matplotlib.pyplot as plt
    tl = (TL or {}).get("timelines", {})
    if not tl:
        return None
    fig, axes = plt.subplots(len(tl), 1, figsize=(11, 1.4 + 0.45 * programs * len(tl)), squeeze=False)
    for ax, (key, t) in zip(axes[:, 0], tl.items()):
        ps = _programs(t)[:programs]
        for y, (a, end) in enumerate(ps):
            a = a / 1e3
            show = list(range(min(tiles, len(a))))
            ax.barh(y, a[show, 1] - a[show, 0], left=a[show, 0], color="#d62728", height=0.7,
                    label="loads issued, statistics" if y == 0 else None)
            ax.barh(y, a[show, 2] - a[show, 1], left=a[show, 1], color="#1f77b4", height=0.7,
                    label="dx + partials (incl. the data's arrival)" if y == 0 else None)
            ax.barh(y, end / 1e3 - a[-1, 2], left=a[-1, 2], color="#ff7f0e", height=0.7,
                    label="partial-row store" if y == 0 else None)
        ax.set_yticks(range(len(ps)), [f"program {i}" for i in range(len(ps))], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{key}: first {tiles} tiles and the end of {len(ps)} persistent programs "
                     f"(column reduce alone: {t['reduce_us']:.1f} of {t['op_us']:.1f} us)", fontsize=9)
        ax.set_xlabel("us from the first stamp (%globaltimer)")
        ax.legend(loc="upper right", fontsize=7, frameon=False, ncol=3)
    fig.tight_layout()
    return fig


def quack_table(df) -> pd.DataFrame:
    """'quack-peer': QuACK's backward beside gluon-regs and torch at M = 16384 (bf16, one run of its own: the grid's
    scoreboard is another run's), us, and quack / gluon-regs time (> 1: gluon-regs leads)."""
    if not len(df):
        return pd.DataFrame()
    s = cm.passed(df[_study(df) == "quack-peer"]).copy()
    if not len(s) or "quack" not in set(s.variant):
        return pd.DataFrame()
    s = cm.newest_run(s)
    rows = []
    for (op, M, N), sub in s.groupby(["op", "M", "N"]):
        t = sub.groupby("variant").ms_median.median()
        rows.append({"op": op.replace("_backward", ""), "M": int(M), "N": int(N),
                     **{f"{v} us": round(1000 * t[v], 1) for v in ("torch", "quack", GLUON) if v in t},
                     "quack / gluon-regs": round(t["quack"] / t[GLUON], 3) if {"quack", GLUON} <= set(t.index) else None})
    return pd.DataFrame(rows)
