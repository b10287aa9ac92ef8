"""Notebook 04-warp-specialization: gl.warp_specialize, a 1-warp TMA producer (setmaxnreg) and a consumer
partition over EMPTY/FULL barrier pairs, for the norms and a cooperative GEMM. This module holds warp
specialization itself and the notebook's page; the GEMM studies are `gemm` (imported as G), section 2's
per-partition timeline and every CTA's finish are `ws_timeline`, section 8's compute-sanitizer reading is
`ws_sanitizer`.

Pattern 4 builds on pattern 3, and so does this module: the records helpers, the timelines and every
CTA's finish, the norm grids against the copy ceiling, row blocks per CTA, the correctness table and the
sanitizer lines come from `pipelined` (imported as P). This notebook also reads pattern 3's records
(`load_03`): the four GEMMs were measured side by side there, and its timeline is the single-stream reference.

What it shows, and where each fact comes from:
    overview / nodata / about   both record files (04's and 03's, stale-marked), common.overview
    protocol_table              the ring's slot / lap / parity formulas of the kernels' source (computed)
    the per-partition timeline  `ws_timeline` (results/<gpu>/04-warp-specialization.timeline.json beside
                                pattern 3's; every CTA's finish from both, checked against the timed record)
    the census                  the gluon-ws norms and GEMM next to gluon-pipelined, compiled on this CPU: the
                                setmaxnreg split per partition role (read from the PTX order), waits, barriers
    the norms                   the newest bf16 grids with gluon-ws and gluon-pipelined (RMSNorm, LayerNorm,
                                add+RMSNorm): the target WS_VS_PIPE cell by cell, by row blocks per CTA
    norm-sweep                  the 'norm-sweep' study: what each knob costs, the best config vs the heuristic
    headline_numbers            the norm grids, and the GEMM grid vs cuBLAS (gemm.gemm_records / gemm_table)
    takeaways                   computed from the tables above; the GEMM lines are gemm.gemm_takeaways and
                                gemm.shape_takeaways, the verdict words gemm.verdict

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()             gluon_lab.experiments.run_ws(results_dir=, quick=, parts=)
    kernel_source()       registry.sources(op, "gluon-ws", name) of the gluon-ws norm (rms_norm) or GEMM
                          (matmul), by plain name: _wsn_producer, _wsn_consumer, ws_norm_kernel, WsNormConfig;
                          tma_producer, _ws_consumer, ws_ring_barriers, ws_gemm_kernel
    ws_norm_heuristic()   gluon_lab.kernels.warp_specialized.WsNormConfig.heuristic(op, N, dtype, M)
                          (fields num_warps, rows, num_stages, ctas_per_sm, producer_regs)
    ws_norm_spec()        gluon_lab.kernels.warp_specialized.norm_codegen_spec(op, N, dtype, cfg) (with its
                          launch `maxnreg`, which codegen.inspect_variant does not pass on: compiled with
                          codegen.compile_sm90(**spec))
    and through pipelined: pipe_heuristic, norm_compile, gemm_config, gemm_compile, compile_spec
"""
from __future__ import annotations

import dataclasses
import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from . import common as cm
from . import gemm as G
from . import gemm_grid as GG
from . import norm_grids as ng
from . import pipelined as P
from . import timeline as tl
from .gemm import WS_VS_PIPE, verdict  # the target and verdict words the GEMM and the norms share

NB = "04-warp-specialization"
NB3 = P.NB  # pattern 3's records: the GEMM comparison and the pipelined timeline
BIG = P.BIG
BASELINES = P.BASELINES
NORM_ORDER = P.NORM_ORDER
NORM_OPS = ("rms_norm", "layer_norm", "add_rms_norm")
EMPTY = P.EMPTY


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=()):
    """Measure mode: run the plan (the same function `python -m gluon_lab bench 04-...` runs)."""
    from ..experiments import run_ws
    kw = {"parts": tuple(parts)} if parts else {}
    _, where = run_ws(results_dir=str(ctx.results_dir), quick=quick, **kw)
    return where


SOURCE_VARIANTS = (("rms_norm", "gluon-ws"), ("matmul", "gluon-ws"))  # whose code kernel_source() reads


def kernel_source(*names: str) -> str:
    """Current source of the named functions / classes of the gluon-ws norm or GEMM (registry.sources:
    looked up in the variant's launch closure by plain name, e.g. "tma_producer", "_ws_consumer")."""
    from .. import registry
    out = []
    for n in names:
        for op, variant in SOURCE_VARIANTS:
            try:
                out.append(registry.sources(op, variant, n))
                break
            except ValueError:
                continue
        else:
            raise ValueError(f"kernel_source: {n!r} is in neither gluon-ws norm's nor gluon-ws GEMM's code")
    return "\n".join(out)


def ws_norm_heuristic(op: str, N: int, dtype: str = "bfloat16", M: int | None = None):
    from ..kernels import warp_specialized as W
    return W.WsNormConfig.heuristic(op, N, dtype, M)


def ws_norm_spec(op: str, N: int, dtype: str, cfg) -> dict:
    from ..kernels import warp_specialized as W
    return W.norm_codegen_spec(op, N, dtype, cfg)


# ---- records ---------------------------------------------------------------------------------------
def load_03(ctx: cm.Context):
    """Pattern 3's records (03-multibuffer-pipelining.jsonl on the same GPU), stale-marked."""
    return cm.load(dataclasses.replace(ctx, notebook=NB3))


def overview(ctx: cm.Context, allrec, rec03) -> list:
    """Provenance of both files read, a missing note where one is empty, their stale records."""
    out = []
    for name, df in ((NB, allrec), (NB3, rec03)):
        out += [f"**`{name}.jsonl`** runs:"] + cm.overview(dataclasses.replace(ctx, notebook=name), df)
        st = cm.stale_table(df)
        if len(st):
            out += [f"**Stale records in `{name}.jsonl`** (kernel source changed since the run):", st]
    return out


def nodata(ctx, what: str, stale: str = "flag") -> str:
    return cm.nodata(ctx, what, stale, name="")


def about(g, what: str) -> list:
    return cm.about(g, what, with_files=True)


# ---- the protocol --------------------------------------------------------------------------------
def protocol_table(S: int = 3, n: int | None = None):
    """Slot, lap and the parity each partition waits for, block by block (from the source's formulas)."""
    n = 2 * S + 2 if n is None else n
    return pd.DataFrame([{"block / k-step i": i, "slot = i % S": i % S, "lap = i // S": i // S,
                          "producer waits EMPTY[slot], parity": ((i // S) & 1) ^ 1,
                          "consumer waits FULL[slot], parity": (i // S) & 1,
                          "the producer's wait returns when": ("at once (fresh barrier, parity 1 counts as completed)" if i < S
                                                               else f"the consumer arrived on EMPTY after block {i - S}")}
                         for i in range(n)]).set_index("block / k-step i")


# ---- codegen census (compiled on this CPU) -------------------------------------------------------
SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);")


def setmaxnreg_roles(ptx: str, producer_regs: int):
    """setmaxnreg values by partition role, from the PTX order of the warp-specialize lowering: the
    default warps' entry (parent code), their switch to the consumer partition at the fork;
    PRODUCER_REGS is the producer's; the worker warps park at the smallest other budget after the fork.
    Returns (roles, [(inc|dec, value)])."""
    seq = [(d, int(v)) for d, v in SETMAXNREG.findall(ptx)]
    if len(seq) < 2:
        return {}, seq
    parent, consumer = seq[0][1], seq[1][1]
    vals = {v for _, v in seq}
    roles = {"default warps, parent code": parent, "consumer (in partition)": consumer,
             "producer": producer_regs if producer_regs in vals else None,
             "worker warps parked": min((v for _, v in seq[2:] if v != producer_regs), default=None)}
    return roles, seq


def census_row(what, variant, cfg_txt, k, c, consumer_warps=None, producer_regs=None) -> dict:
    """One census row of a compiled kernel k with census c (the partition split for gluon-ws)."""
    ptx = k.asm["ptx"]
    mx = re.search(r"\.maxnreg\s+(\d+)", ptx)
    row = {"kernel": what, "variant": variant, "config": cfg_txt, "warps (total)": c["num_warps"],
           "launch .maxnreg": int(mx.group(1)) if mx else None, "registers (ptxas)": c["registers"]}
    if producer_regs is not None:
        roles, seq = setmaxnreg_roles(ptx, producer_regs)
        row.update({"consumer warps": consumer_warps, "producer warps": 1, "setmaxnreg consumer": roles.get("consumer (in partition)"),
                    "setmaxnreg producer": roles.get("producer"), "setmaxnreg parked": roles.get("worker warps parked"),
                    "setmaxnreg parent": roles.get("default warps, parent code"),
                    "setmaxnreg sequence (PTX order)": " ".join(f"{d} {v}" for d, v in seq)})
        row["regs in partitions / CTA"] = (roles["consumer (in partition)"] * 32 * consumer_warps + producer_regs * 32 * 4
                                           if roles.get("consumer (in partition)") else None)
    row.update({"USETMAXREG (SASS)": c["sass"].get("USETMAXREG", 0), "mbarrier.init": c["mbarrier_init"],
                "mbarrier waits": c["mbarrier_wait"], "mbarrier arrives": c["mbarrier_arrive"], "TMA loads (PTX)": c["tma_load"],
                "UTMALDG": c["sass"].get("UTMALDG", 0), "UTMASTG": c["sass"].get("UTMASTG", 0), "wgmma (PTX)": c["wgmma"],
                "HGMMA (SASS)": c["sass"].get("HGMMA", 0), "wgmma shape": ", ".join(c["wgmma_shapes"]),
                "bar.sync": c["bar_sync"], "st.global bits": ",".join(map(str, sorted(c["st_global_by_bits"]))) or "-",
                "smem bytes": c["smem_bytes"], "spill bytes": c["spill_bytes"]})
    return row


INTS = ("warps (total)", "launch .maxnreg", "registers (ptxas)", "consumer warps", "producer warps", "setmaxnreg consumer",
        "setmaxnreg producer", "setmaxnreg parked", "setmaxnreg parent", "regs in partitions / CTA")


def as_table(rows):
    t = pd.DataFrame(rows).set_index(["kernel", "variant"]) if rows else EMPTY
    for c in INTS:
        if c in t:
            t[c] = pd.to_numeric(t[c], errors="coerce").astype("Int64")
    return t


def ws_cfg_text(c) -> str:
    return f"warps={c.num_warps} rows={c.rows} stages={c.num_stages} ctas/SM={c.ctas_per_sm} producer_regs={c.producer_regs}"


def pipe_cfg_text(c) -> str:
    return f"warps={c.num_warps} rows={c.rows} stages={c.num_stages} ctas/SM={c.ctas_per_sm}"


def gemm_cfg_text(c) -> str:
    return f"{c.BM}x{c.BN}x{c.BK} stages={c.num_stages} warps={c.num_warps}"


CEN_M = 16384
NORM_CASES = (("rms_norm", 4096), ("rms_norm", 5120), ("rms_norm", 8192), ("layer_norm", 8192), ("add_rms_norm", 8192))


def norm_census(cases=NORM_CASES, M: int = CEN_M, dtype: str = "bfloat16"):
    """gluon-ws next to gluon-pipelined per (op, N) at M rows, each with the config its heuristic picks
    now. Returns (table, errors)."""
    rows, errors = [], []
    for op, N in cases:
        what = f"{op} N={N} (M={M})"
        try:
            cw = ws_norm_heuristic(op, N, dtype, M)
            k, c = P.compile_spec(ws_norm_spec(op, N, dtype, cw))
            rows.append(census_row(what, "gluon-ws", ws_cfg_text(cw), k, c, cw.num_warps, cw.producer_regs))
        except Exception as e:  # a config the current source refuses: say so, do not invent a row
            errors.append(f"{what} gluon-ws: {type(e).__name__}: {e}")
        try:
            cp = P.pipe_heuristic(op, N, dtype, M)
            k, c = P.norm_compile(op, N, dtype, cp)
            rows.append(census_row(what, "gluon-pipelined", pipe_cfg_text(cp), k, c))
        except Exception as e:
            errors.append(f"{what} gluon-pipelined: {type(e).__name__}: {e}")
    return as_table(rows), errors


def gemm_census(dtype: str = "bfloat16"):
    """gluon-ws and gluon-pipelined GEMMs with the default config and with BN=128, 4 warps, 4 stages."""
    rows, errors = [], []
    for what, cfg in (("GEMM default", P.gemm_config()),
                      ("GEMM BN=128, 4 warps", P.gemm_config(BN=128, num_stages=4, num_warps=4))):
        try:
            k, c = P.gemm_compile(cfg, dtype, ws=True)
            rows.append(census_row(what, "gluon-ws", gemm_cfg_text(cfg) + f" producer_regs={cfg.producer_regs}", k, c,
                                   cfg.num_warps, cfg.producer_regs))
        except Exception as e:
            errors.append(f"{what} gluon-ws: {type(e).__name__}: {e}")
        try:
            k, c = P.gemm_compile(cfg, dtype)
            rows.append(census_row(what, "gluon-pipelined", gemm_cfg_text(cfg), k, c))
        except Exception as e:
            errors.append(f"{what} gluon-pipelined: {type(e).__name__}: {e}")
    return as_table(rows), errors


WS_ONLY = ("consumer warps", "producer warps", "setmaxnreg consumer", "setmaxnreg producer", "setmaxnreg parked",
           "setmaxnreg parent", "setmaxnreg sequence (PTX order)", "regs in partitions / CTA", "launch .maxnreg")


def census_views(cen, what: str) -> list:
    """A census split in two narrower tables: what both variants have (the all-zero columns left out and
    named), and the register split of the gluon-ws partitions (rows of gluon-ws only: gluon-pipelined has
    no partitions). Empty cells say why."""
    if not len(cen):
        return []
    both = cen.drop(columns=[c for c in WS_ONLY if c in cen])
    both, note = cm.compact_census(cm.fill_reasons(both, "-"))
    out = [f"**{what}: counts per kernel**", both, note]
    if "gluon-ws" in cen.index.get_level_values("variant"):
        ws = cen.xs("gluon-ws", level="variant")[[c for c in WS_ONLY if c in cen]]
        out += [f"**{what}: gluon-ws partitions** (setmaxnreg per role; gluon-pipelined has no partitions)",
                cm.fill_reasons(ws, "not in the PTX")]
    return out


def census_notes(norm_cen, gemm_cen) -> str:
    """Per gluon-ws census row: registers per partition against the launch cap, waits, barriers; and
    the wait sites gluon-ws adds over gluon-pipelined."""
    lines = []
    for name, cen in (("norm", norm_cen), ("GEMM", gemm_cen)):
        if not len(cen) or "setmaxnreg producer" not in cen:
            continue
        ws = cen.xs("gluon-ws", level="variant")
        for k, r in ws.iterrows():
            cap = r["launch .maxnreg"] if pd.notna(r["launch .maxnreg"]) else None
            total = int(cap) * 32 * int(r["warps (total)"]) if cap else None
            at_max = pd.notna(r["setmaxnreg consumer"]) and int(r["setmaxnreg consumer"]) >= 256
            lines.append(f"- {name} `{k}`: {r['consumer warps']} consumer warps at **{r['setmaxnreg consumer']}** registers, the producer "
                         f"warp at **{r['setmaxnreg producer']}**, the parked worker warps at {r['setmaxnreg parked']}, the parent code at "
                         f"{r['setmaxnreg parent']} (sequence: `{r['setmaxnreg sequence (PTX order)']}`); in the partitions "
                         f"{r['regs in partitions / CTA']} registers per CTA"
                         + (f" of the {total} the launch cap allows ({cap} x {r['warps (total)']} warps x 32)" if total else "")
                         + (" — the consumer is already at the 256 maximum, so what the producer gives back is not taken by anyone"
                            if at_max else "")
                         + f"; {r['mbarrier waits']} wait sites, {r['mbarrier.init']} barriers, {r['HGMMA (SASS)']} HGMMA, "
                         f"{r['smem bytes']} B smem, {r['spill bytes']} B spilled.")
        if "gluon-pipelined" in cen.index.get_level_values("variant"):
            pp = cen.xs("gluon-pipelined", level="variant")
            both = ws.index.intersection(pp.index)
            if len(both):
                d = ws.loc[both, "mbarrier waits"] - pp.loc[both, "mbarrier waits"]
                lines.append(f"- {name}: wait sites gluon-ws minus gluon-pipelined: " + ", ".join(f"{k}: {v:+d}" for k, v in d.items())
                             + " (one EMPTY wait in the producer per ring; FULL in the consumer replaces pattern 3's slot wait).")
    return "\n".join(lines) if lines else "**No census rows** (compile failed above)."


# ---- the norms: ws vs pipelined ------------------------------------------------------------------
def norm_grids(use) -> dict:
    """{op: one run's bf16 grid with gluon-ws and gluon-pipelined, with pct_ceiling} (rms, layer, add+rms)."""
    return ng.norm_grids(use, NORM_OPS, require=("gluon-ws", "gluon-pipelined"))


def grid_notes(ctx, grids, stale: str = "flag") -> list:
    return ng.grid_notes(ctx, grids, NORM_OPS, stale, with_files=True, name="")


def low_copy_line(grids, ct) -> str | None:
    low = ng.low_copy_cells(ct)
    if not grids or not len(low):
        return None
    fastest = pd.concat(grids.values()).groupby(["M", "N"]).gbps.max().reindex(low.index)
    return ("M*N >= 64 Mi cells where the per-shape copy is < 90% of the session copy: "
            + ", ".join(f"{m}x{n} ({t:.0f} MiB per tensor): copy {c:.0f} GB/s, fastest norm {f:.0f} GB/s"
                        for (m, n), c, t, f in zip(low.index, low["per-shape copy GB/s"], low["tensor MiB"], fastest)))


def heat_grids(grids: dict) -> dict:
    """The grids the heatmaps show (every M x N: RMSNorm, LayerNorm; add+RMSNorm is one M)."""
    return {op: g for op, g in grids.items() if op != "add_rms_norm"}


OP_NAMES = ng.OP_NAMES


def ratio_map(ax, t, col, title, target=WS_VS_PIPE, span=None, fontsize=None):
    """Heatmap of a speed ratio on a diverging scale centred on 1 (plots.ratio_heatmap); a cell below
    target is marked ✗."""
    plots.ratio_heatmap(t.reset_index(), value=col, ax=ax, title=title, faster="gluon-ws faster",
                        slower="gluon-pipelined faster", target=target, span=span, fontsize=fontsize, fmt="{:.3f}")


def ws_vs(g):
    """GB/s per (M, N) x variant of the passed records of one grid."""
    return g[g.passed.astype(bool)].pivot_table(index=["M", "N"], columns="variant", values="gbps")


def ws_frame(g):
    """Per (M, N): gluon-ws and gluon-pipelined in % of the copy ceiling and gluon-ws / gluon-pipelined (speed)."""
    piv = ws_vs(g)
    if not {"gluon-ws", "gluon-pipelined"} <= set(piv):
        return EMPTY
    pc = g.pivot_table(index=["M", "N"], columns="variant", values="pct_ceiling")
    return pd.DataFrame({"ws": pc["gluon-ws"], "pipe": pc["gluon-pipelined"],
                         "ratio": piv["gluon-ws"] / piv["gluon-pipelined"]})


def headline_figure(grids: dict, slug: str):
    """Headline (read at ~900 px): per op (RMSNorm, LayerNorm) gluon-ws / gluon-pipelined speed per cell,
    centred on 1.0; ✗ marks a cell that misses the target (≥ 0.98). None without the grids."""
    heat = {op: ws_frame(g) for op, g in heat_grids(grids).items()}
    heat = {op: t for op, t in heat.items() if len(t)}
    if not heat:
        return None
    span = plots.ratio_span(pd.concat(heat.values())["ratio"])
    fig, axes = plt.subplots(1, len(heat), figsize=(6.6 * len(heat), 5.0), squeeze=False)
    for ax, (op, t) in zip(axes[0], heat.items()):
        ratio_map(ax, t, "ratio", f"{OP_NAMES.get(op, op)} bf16", span=span, fontsize=12)
    g0 = next(iter(heat_grids(grids).values()))
    fig.suptitle(f"gluon-ws speed / gluon-pipelined per cell (run {cm.run_short(g0.run_id.iloc[0])}; ✗: below the "
                 f"{WS_VS_PIPE} target)" + (" — STALE gluon-ws records" if g0[g0.variant == 'gluon-ws'].stale.any() else ""))
    cm.headline_fonts(fig)
    for ax in axes[0]:  # three decimals: a little smaller than the other headline cells
        for txt in ax.texts:
            txt.set_fontsize(11)
    fig.tight_layout()
    return fig


def grid_figure(grids: dict, slug: str):
    """Per op: gluon-ws and gluon-pipelined in % of the copy ceiling, and gluon-ws / gluon-pipelined."""
    heat = heat_grids(grids)
    if not heat:
        return None
    fig, axes = plt.subplots(len(heat), 3, figsize=(15, 3.6 * len(heat)), squeeze=False)
    frames = {op: ws_frame(g) for op, g in heat.items()}
    nonempty = [t["ratio"] for t in frames.values() if len(t)]
    span = plots.ratio_span(pd.concat(nonempty)) if nonempty else None
    for row, (op, t) in zip(axes, frames.items()):
        if not len(t):
            continue
        plots.sol_heatmap(t.reset_index(), value="ws", ax=row[0], vmax=110, title=f"{op}: gluon-ws, % of ceiling")
        plots.sol_heatmap(t.reset_index(), value="pipe", ax=row[1], vmax=110, title=f"{op}: gluon-pipelined, % of ceiling")
        ratio_map(row[2], t, "ratio", f"{op}: gluon-ws / gluon-pipelined (speed)", span=span)
    g0 = next(iter(heat.values()))
    fig.suptitle(f"bf16 norms on {slug}, run {g0.run_id.iloc[0]}, timer {'/'.join(sorted(g0.timer.dropna().unique()))}"
                 + (" — STALE gluon-ws records" if g0[g0.variant == 'gluon-ws'].stale.any() else ""), fontsize=10)
    fig.tight_layout()
    return fig


def headline_numbers(grids: dict, use=EMPTY, use03=EMPTY) -> list:
    """2-4 (label, value) pairs for the page's headline block: gluon-ws vs the fastest baseline and vs
    gluon-pipelined over the RMSNorm / LayerNorm grids, and the GEMM vs cuBLAS at 8192³ (the newest run
    of both files holding the four GEMMs)."""
    gm = G.gemm_records(G.gemm_candidates(use, use03))
    gemm_tab = G.gemm_table(gm)
    out = []
    frames = {op: ng.vs_best_frame(g, "gluon-ws") for op, g in heat_grids(grids).items()}
    frames = {op: t for op, t in frames.items() if len(t) and t["ratio"].notna().any()}
    run = cm.run_short(next(iter(grids.values())).run_id.iloc[0]) if grids else "?"
    ops = " + ".join(OP_NAMES.get(o, o) for o in frames)
    if frames:
        r = pd.concat(frames.values())["ratio"].dropna()
        out.append(("gluon-ws vs best baseline", f"{plots.geomean(r):.2f}× geomean over {len(r)} cells ({ops} bf16); "
                                                 f"at least as fast in {int((r >= 1).sum())} of them (run {run})"))
    else:
        out.append(("gluon-ws vs best baseline", "missing: no RMSNorm / LayerNorm grid with gluon-ws and a baseline"))
    wp = [ws_frame(g) for g in heat_grids(grids).values()]
    wp = [t for t in wp if len(t)]
    if wp:
        r = pd.concat(wp)["ratio"].dropna()
        out.append(("gluon-ws vs gluon-pipelined", f"{plots.geomean(r):.3f}× geomean; within 2% or faster in "
                                                   f"{int((r >= WS_VS_PIPE).sum())} of {len(r)} cells"))
    if len(gemm_tab) and "gluon-ws / cuBLAS" in gemm_tab:
        sq = GG.square_ratio(gemm_tab, "gluon-ws / cuBLAS")
        tf = GG.square_ratio(gemm_tab, "gluon-ws")
        grun = f" (run {cm.run_short(gm.run_id.iloc[0])})" if len(gm) else ""
        out.append(("GEMM vs cuBLAS at 8192³", f"{sq:.2f}× cuBLAS, {tf:.0f} TFLOP/s bf16{grun}" if sq is not None else
                    "not measured: no 8192³ record"))
        out.append(("GEMM vs cuBLAS, all shapes", f"{plots.geomean(gemm_tab['gluon-ws / cuBLAS']):.2f}× geomean over "
                                                  f"{int(gemm_tab['gluon-ws / cuBLAS'].notna().sum())} shapes"))
    else:
        out.append(("GEMM vs cuBLAS at 8192³", "missing: no GEMM run holding gluon-ws, gluon-pipelined, Triton and cuBLAS"))
    return out


def target_cells(g, spec):
    """gluon-ws vs gluon-pipelined (and gluon-tma, the best baseline) in every cell of one grid."""
    piv = ws_vs(g)
    if not {"gluon-ws", "gluon-pipelined"} <= set(piv):
        return EMPTY
    ws = g[g.variant == "gluon-ws"].set_index(["M", "N"])
    base = [v for v in BASELINES if v in piv]
    cfg = ws.config_key.reindex(piv.index)
    t = pd.DataFrame({"gluon-ws GB/s": piv["gluon-ws"], "gluon-pipelined GB/s": piv["gluon-pipelined"],
                      "ws / pipelined": piv["gluon-ws"] / piv["gluon-pipelined"],
                      "ws / gluon-tma": piv["gluon-ws"] / piv["gluon-tma"] if "gluon-tma" in piv else np.nan,
                      "ws / best baseline": piv["gluon-ws"] / piv[base].max(axis=1) if base else np.nan,
                      "best baseline": piv[base].idxmax(axis=1) if base else None,
                      "ws % of ceiling": ws.pct_ceiling.reindex(piv.index),
                      "row blocks per CTA": ng.blocks_per_cta(ws, spec).reindex(piv.index),
                      "ws config (stages, warps, rows, ctas/SM)": [
                          tuple(json.loads(c).get(k) for k in ("num_stages", "num_warps", "rows", "ctas_per_sm"))
                          if isinstance(c, str) else None for c in cfg],
                      "stale": ws.stale.reindex(piv.index)})
    t["met: >= 0.98x gluon-pipelined"] = np.where(t["ws / pipelined"] >= WS_VS_PIPE, "met", "MISSED")
    return t


def target_tables(grids: dict, spec) -> dict:
    return ng.target_tables(grids, spec, target_cells)


def norm_summary(targets: dict):
    """Per op: cells within 2% (met), wins, geomean, worst and best cell of gluon-ws / gluon-pipelined."""
    rows = []
    for op, t in targets.items():
        r = t["ws / pipelined"]
        worst, best = r.idxmin(), r.idxmax()
        rows.append({"op": op, "cells met (>= 0.98x)": f"{int((r >= WS_VS_PIPE).sum())}/{len(r)}", "wins (> 1.0x)": int((r > 1).sum()),
                     "geomean ws / pipelined": plots.geomean(r), "worst": f"{r.min():.3f}x at (M, N) = ({int(worst[0])}, {int(worst[1])})",
                     "best": f"{r.max():.3f}x at (M, N) = ({int(best[0])}, {int(best[1])})",
                     "all met": bool((r >= WS_VS_PIPE).all()), "stale records": int(t.stale.sum())})
    return pd.DataFrame(rows)


def by_blocks(targets: dict):
    """gluon-ws / gluon-pipelined over every op's cells, binned by row blocks per CTA."""
    if not targets:
        return EMPTY
    allt = pd.concat(targets.values(), keys=targets.keys(), names=["op"])
    bins = pd.cut(allt["row blocks per CTA"], [0, 2, 8, 32, np.inf], labels=["<= 2", "2-8", "8-32", "> 32"])
    return allt.groupby(bins, observed=True)["ws / pipelined"].agg(cells="size", geomean=plots.geomean, min="min", max="max")


TARGET_WORDS = {"met: >= 0.98x gluon-pipelined": ("within 2% of gluon-pipelined (pattern 3) or faster, cell by cell",
                                                  "gluon-ws / gluon-pipelined (target ≥ 0.98)")}


def target_grid(t):
    """The cells of one grid as a coloured met/missed grid: gluon-ws / gluon-pipelined in each cell, green
    when ≥ 0.98, red below (a pandas Styler)."""
    return ng.target_grid(t, cols=(("met: >= 0.98x gluon-pipelined", "ws / pipelined", WS_VS_PIPE), ), words=TARGET_WORDS,
                         legend={"green": f"≥ {WS_VS_PIPE} (met)", "red": f"< {WS_VS_PIPE} (missed)"})


def summary_view(summary):
    """norm_summary with `all met` coloured (the target, in words, is the title above it)."""
    if not len(summary):
        return None
    return ng.summary_view(summary.round(3))


DETAIL_NAMES = {"gluon-ws GB/s": "ws GB/s", "gluon-pipelined GB/s": "pipelined GB/s", "ws / pipelined": "ws / pipelined",
                "ws / gluon-tma": "ws / gluon-tma", "ws / best baseline": "ws / best base", "best baseline": "best base",
                "ws % of ceiling": "ws % ceil", "row blocks per CTA": "blocks/CTA",
                "ws config (stages, warps, rows, ctas/SM)": "ws config (stages, warps, rows, CTAs/SM)"}


def target_details(grids, targets) -> list:
    """Per op the numbers behind the grid (short column names), each empty cell saying why (gluon-tma
    refuses N that is not a power of two)."""
    out = []
    for op, t in targets.items():
        g = grids.get(op)
        d = t[[c for c in DETAIL_NAMES if c in t]].round(3)

        def why(idx, col, g=g, op=op):
            M, N = idx
            if col == "ws / gluon-tma":
                r = cm.refusal(op, "gluon-tma", {"M": int(M), "N": int(N)}, "bfloat16")
                return ("gluon-tma refuses: N not a power of 2" if r and "power-of-2" in r else r) or "no gluon-tma record"
            return f"not measured in run {cm.run_short(g.run_id.iloc[0]) if g is not None else '?'}"
        out += [f"**{op} bf16, per cell**", cm.fill_reasons(d, why).rename(columns=DETAIL_NAMES)]
    return out


def target_views(ctx, grids, targets, summary, blocks, stale: str = "flag") -> list:
    """Per op the coloured grid under its run line; then the summary (the target in words) and the ratio
    by row blocks per CTA."""
    out = []
    for op, g in grids.items():
        if op not in targets:
            out.append(nodata(ctx, f"gluon-ws and gluon-pipelined side by side in the {op} grid", stale))
            continue
        t = targets[op]
        out += [f"**{OP_NAMES.get(op, op)} bf16** (run `{g.run_id.iloc[0]}`)" + (" — STALE gluon-ws records" if t.stale.any() else ""),
                target_grid(t)]
    if len(summary):
        out += [f"**Summary — target: gluon-ws {TARGET_WORDS['met: >= 0.98x gluon-pipelined'][0]}**", summary_view(summary),
                "**gluon-ws / gluon-pipelined by row blocks per CTA** (all ops):", blocks.round(3)]
    return out


# ---- norm-sweep ----------------------------------------------------------------------------------
SWEEP_KNOBS = ("num_stages", "num_warps", "producer_regs")


def norm_sweep_records(use):
    sw = cm.pick(use, (cm.study(use) == "norm-sweep") & (use.variant == "gluon-ws")) if len(use) else use.copy()
    if len(sw):
        for k in ("producer_regs", "num_warps", "num_stages", "rows", "ctas_per_sm"):
            sw[k] = cm.config_value(sw, k)
    return sw


def norm_sweep_tables(sw):
    """(every config pivot, {knob: best GB/s per value}, knob cost table) of the passed sweep records."""
    if not len(sw):
        return EMPTY, {}, EMPTY
    ok = sw[sw.passed.astype(bool)]
    full = ok.pivot_table(index=["op", "M", "N"], columns=["num_stages", "num_warps", "producer_regs"], values="gbps").round(0)
    best = ok.groupby(["op", "M", "N"]).gbps.max()
    per_knob, eff = {}, []
    for knob in SWEEP_KNOBS:
        m = ok.pivot_table(index=["op", "M", "N"], columns=knob, values="gbps", aggfunc="max")
        per_knob[knob] = m
        for v in m.columns:
            eff.append({"knob": knob, "value": v, "geomean best-at-value / best overall": plots.geomean(m[v] / best),
                        "worst cell": (m[v] / best).min()})
    return full, per_knob, pd.DataFrame(eff).set_index(["knob", "value"])


def sweep_vs_heuristic(sw, grids: dict, dtype: str = "bfloat16"):
    """Best config per shape of the sweep vs what the current heuristic picks (its GB/s in the sweep)."""
    if not len(sw):
        return EMPTY
    hv = []
    knobs = ("num_stages", "num_warps", "producer_regs", "rows", "ctas_per_sm")
    for op, M, N, sub, b, hk, hg in cm.sweep_best_vs_heuristic(
            sw, lambda op, N, M: ws_norm_heuristic(op, N, dtype, M), knobs):
        gr = grids.get(op)
        gws = gr[(gr.variant == "gluon-ws") & cm.mask(gr.M == M) & cm.mask(gr.N == N)] if gr is not None else EMPTY
        hv.append({"op": op, "M": int(M), "N": int(N),
                   "best (stages, warps, regs, rows, ctas/SM)": tuple(int(b[k]) for k in knobs),
                   "best GB/s": round(b.gbps), "heuristic now": hk, "heuristic GB/s in the sweep": hg,
                   "heuristic / best": hg / b.gbps if hg == hg else np.nan,
                   "gluon-ws GB/s in the norms grid (later run)": round(float(gws.gbps.iloc[0])) if len(gws) else None})
    return pd.DataFrame(hv).set_index(["op", "M", "N"])


def norm_sweep_views(full, per_knob, eff, heur) -> list:
    if not len(full):
        return []
    out = ["**Every config** (columns: stages / consumer warps / producer_regs):", full]
    for knob, m in per_knob.items():
        out += [f"**Best GB/s per `{knob}`** (max over the other knobs):", m.round(0)]
    return out + ["**How much each knob value costs** (1.0 = as good as the best config of the shape):", eff.round(3),
                  "**Best config per shape vs what the current heuristic picks**:", heur_view(heur)]


def heur_view(heur):
    """sweep_vs_heuristic with its empty cells saying why (the heuristic's config was not in the sweep; the
    norms grid has no gluon-ws record of that shape)."""
    if not len(heur):
        return None
    t = cm.fill_reasons(heur.round(3), "heuristic's config not swept",
                        columns=["heuristic GB/s in the sweep", "heuristic / best"])
    return cm.fill_reasons(t, "no gluon-ws record of this shape in the grid")


# ---- takeaways -----------------------------------------------------------------------------------
def takeaways(*, gm=EMPTY, gemm_tab=EMPTY, gt=EMPTY, ws_ok=EMPTY, targets=None, summary=EMPTY, blocks=EMPTY,
              TL4=None, ws_tl=EMPTY, spread=EMPTY, sw=EMPTY, sweep_eff=EMPTY, heur=EMPTY, norm_cen=EMPTY,
              gemm_cen=EMPTY, san=EMPTY, use=EMPTY) -> list[str]:
    """Each line computed from the records and tables the sections above show (sub-items start with
    two spaces: pipelined.bullets)."""
    targets = targets or {}
    lines = G.gemm_takeaways(gm=gm, gemm_tab=gemm_tab, gt=gt, ws_ok=ws_ok)
    for _, s in summary.iterrows():
        t = targets[s["op"]]
        wins = t[t["ws / pipelined"] > 1].index
        gmr = s["geomean ws / pipelined"]
        lines.append(f"**{s['op']}: {verdict(gmr)}**: gluon-ws / gluon-pipelined geomean {gmr:.3f}x, "
                     f"target (>= 0.98x) met in {s['cells met (>= 0.98x)']} cells, worst {s['worst']}; gluon-ws faster in {len(wins)} cells"
                     + (": " + ", ".join(f"{int(m)}x{int(n)}" for m, n in wins) if len(wins) else "")
                     + (f"; vs gluon-tma geomean {plots.geomean(t['ws / gluon-tma']):.3f}x" if t['ws / gluon-tma'].notna().any() else "")
                     + f"; {t['ws % of ceiling'].min():.0f}-{t['ws % of ceiling'].max():.0f}% of the copy ceiling.")
    if len(summary) and len(blocks):
        g = blocks["geomean"]
        rising = bool(g.is_monotonic_increasing) and len(g) > 1
        lines.append("  by row blocks per CTA, ws / pipelined geomean: " + ", ".join(
            f"{k}: {v:.3f}x ({int(n)} cells)" for k, v, n in zip(blocks.index, g, blocks["cells"]))
            + (". The ratio rises with the blocks each CTA walks: with few blocks the producer has little to run ahead "
               "over, while the fork and the extra EMPTY round trip are still paid (consistent with the timeline, not proven by it)."
               if rising else ". The ratio does not rise steadily with the blocks each CTA walks."))
    if len(ws_tl) >= 2:
        a, b = ws_tl.iloc[0], ws_tl.iloc[-1]
        lines.append(f"Timeline (RMSNorm {TL4['M']}x{TL4['N']}): at NUM_STAGES={ws_tl.index[0]} the consumer waits "
                     f"{a['consumer FULL stall, median (ns)']:.0f} ns per block (run-ahead {a['run-ahead, median (ns)']:.0f} ns); at "
                     f"NUM_STAGES={ws_tl.index[-1]} the producer runs {b['run-ahead, median (ns)']:.0f} ns "
                     f"({b['blocks ahead, median']:.0f} blocks) "
                     f"ahead and the stall drops to {b['consumer FULL stall, median (ns)']:.0f} ns; the period follows the consumer's work "
                     f"({b['consumer work, median (ns)']:.0f} ns of {b['block period, median (ns)']:.0f} ns).")
    if len(spread):
        st_hi = max(s for _, s in spread.index)
        labs = [k for k, s in spread.index if s == st_hi]
        lines.append(f"Persistent tail at NUM_STAGES={st_hi}: slowest CTA vs median "
                     + ", ".join(f"{k} +{spread.loc[(k, st_hi), 'tail: max / median - 1 (%)']:.1f}%" for k in labs)
                     + " (block-count imbalance " + ", ".join(f"{spread.loc[(k, st_hi), 'block-count imbalance (%)']:.1f}%" for k in labs)
                     + "): a static split cannot rebalance per-SM pace, which the one-row-per-CTA kernels get from the hardware scheduler.")
    if len(sweep_eff) and len(sw):
        okk = sw[sw.passed.astype(bool)]
        bst = okk.pivot_table(index=["op", "M", "N"], columns="num_stages", values="gbps", aggfunc="max")
        h_st = {k: (v[0] if isinstance(v, tuple) else None) for k, v in heur["heuristic now"].items()} if len(heur) else {}
        for op_, sub in bst.groupby(level="op"):
            best_st = sub.idxmax(axis=1)
            lines.append(f"norm-sweep{' (STALE)' if sw.stale.any() else ''}, {op_}: best NUM_STAGES per (M, N): "
                         + ", ".join(f"{int(m)}x{int(n)}: {int(b)} (heuristic now: {h_st.get((o, m, n))}, "
                                     f"{sub.loc[(o, m, n), h_st.get((o, m, n))] / sub.loc[(o, m, n)].max():.3f}x of the best)"
                                     if h_st.get((o, m, n)) in sub.columns else f"{int(m)}x{int(n)}: {int(b)}"
                                     for (o, m, n), b in best_st.items()) + ".")
        e = sweep_eff["geomean best-at-value / best overall"]
        for knob in SWEEP_KNOBS:
            if knob in e.index.get_level_values("knob"):
                s = e.xs(knob)
                lines.append(f"norm-sweep{' (STALE)' if sw.stale.any() else ''}, `{knob}`: best-at-value / best overall geomean "
                             + ", ".join(f"{v}: {x:.3f}" for v, x in s.items()) + f" (range {100 * (s.max() - s.min()):.1f} points).")
    if len(norm_cen) and "setmaxnreg producer" in norm_cen:
        ws_c = norm_cen.xs("gluon-ws", level="variant")
        spills = int(pd.concat([norm_cen, gemm_cen])["spill bytes"].sum())
        lines.append("Registers: the producer warp runs at " + "/".join(str(v) for v in sorted(set(ws_c["setmaxnreg producer"].dropna())))
                     + " registers, the consumer at " + "/".join(str(v) for v in sorted(set(ws_c["setmaxnreg consumer"].dropna())))
                     + " (norm kernels, by CTAs per SM; the launch cap is set for CTAs per SM, and the producer's warpgroup gives the "
                     "rest to the consumer); " + ("no spills in any census row: 0 B." if spills == 0 else
                                                  f"**{spills} B spilled** over the census rows (see the `spill bytes` column)."))
    if len(san):
        bad = san[~san.clean]
        lines.append(f"compute-sanitizer: {int(san.clean.sum())}/{len(san)} runs clean; not clean: "
                     + (", ".join(f"{k}/{t}" for k, t in zip(bad.kernel, bad.tool)) or "none")
                     + (" — the warp_specialize kernels' entry hazard is Triton's dispatch protocol, which racecheck "
                        "misreads after the pre-fork partial barriers; reproduced in ten lines of CUDA (section 8)."
                        if (bad.tool == "racecheck").any() and bad.warp_specialize.any() else "."))
    lines += G.shape_takeaways(use)
    return lines
