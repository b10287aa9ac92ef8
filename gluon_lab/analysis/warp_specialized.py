"""Notebook 04-warp-specialization: gl.warp_specialize, a 1-warp TMA producer (setmaxnreg) and a consumer
partition over EMPTY/FULL barrier pairs, for the norms and a cooperative GEMM.

Pattern 4 builds on pattern 3, and so does this module: the records helpers, the timelines and every
CTA's finish, the norm grids against the copy ceiling, row blocks per CTA, the GEMM table, the
correctness table and the sanitizer lines come from `pipelined` (imported as P). This notebook also
reads pattern 3's records (`load_03`): the four GEMMs were measured side by side there, and its
timeline is the single-stream reference.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()             gluon_lab.experiments.run_ws(results_dir=, quick=, parts=)
    ws_plan()             gluon_lab.experiments.WarpSpecializedPlan() (ws_sweep_shapes, ws_sweep_tiles, ws_sweep_regs)
    kernel_source()       inspect.getsource of gluon_lab.kernels.warp_specialized._wsn_producer.fn,
                          ._wsn_consumer.fn, .ws_norm_kernel.fn, .WsNormConfig; igemm tma_producer,
                          ._ws_consumer.fn, .ws_gemm_kernel.fn, .ws_ring_barriers.fn
    ws_norm_heuristic()   gluon_lab.kernels.warp_specialized.WsNormConfig.heuristic(op, N, dtype, M)
                          (fields num_warps, rows, num_stages, ctas_per_sm, producer_regs)
    ws_norm_spec()        gluon_lab.kernels.warp_specialized.norm_codegen_spec(op, N, dtype, cfg) (with its
                          launch `maxnreg`, which codegen.inspect_variant does not pass on: compiled with
                          codegen.compile_sm90(**spec))
    gemm_fits()           gluon_lab.kernels.gemm.GemmConfig(BM=, BN=, BK=, num_warps=, num_stages=,
                          producer_regs=).validate(dtype)
    ws_source_lines()     gluon_lab.kernels.warp_specialized.__file__ and the def lines of ws_gemm_kernel.fn,
                          ws_norm_kernel.fn (inspect.getsourcelines)
    consumer_schedule()   the source of ws_gemm_kernel.fn (its gl.warp_specialize call) and _ws_consumer.fn
    sanitized_spec()      the config each ci/sanitize.py case's launcher picks: GemmConfig.heuristic(M, N)
                          + warp_specialized.codegen_spec (and the diagnostic kernel of ci/sanitize.py),
                          WsNormConfig.heuristic + norm_codegen_spec
    sass_of()             gluon_lab.codegen.compile_sm90, codegen.sass, codegen.census
    and through pipelined: pipe_heuristic, norm_compile, gemm_config, gemm_spec, compile_spec, sanitize_driver
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
from . import pipelined as P

NB = "04-warp-specialization"
NB3 = P.NB  # pattern 3's records: the GEMM comparison and the pipelined timeline
BIG = P.BIG
WS_VS_PIPE = 0.98  # the pattern's target: gluon-ws within 2% of gluon-pipelined, or better, in every cell
BASELINES = P.BASELINES
NORM_ORDER = P.NORM_ORDER
GEMM4 = P.GEMM_VARIANTS
NORM_OPS = ("rms_norm", "layer_norm", "add_rms_norm")
F4 = ("producer_before_empty_wait", "producer_issued", "consumer_before_full_wait", "consumer_ready", "consumer_stored")
EMPTY = P.EMPTY


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=()):
    """Measure mode: run the plan (the same function `python -m gluon_lab bench 04-...` runs)."""
    from ..experiments import run_ws
    kw = {"parts": tuple(parts)} if parts else {}
    _, where = run_ws(results_dir=str(ctx.results_dir), quick=quick, **kw)
    return where


def ws_plan():
    from ..experiments import WarpSpecializedPlan
    return WarpSpecializedPlan()


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


def gemm_fits(tile, regs: int, dtype: str = "bfloat16") -> str:
    """Whether a (BM, BN, BK, num_warps, num_stages) tile with producer_regs fits (GemmConfig.validate)."""
    try:
        P.gemm_config(BM=tile[0], BN=tile[1], BK=tile[2], num_warps=tile[3], num_stages=tile[4],
                      producer_regs=regs).validate(dtype)
        return "no record (fits: not run)"
    except ValueError as e:
        return f"does not fit: {e}"


WS_KERNEL_FILES = ("warp_specialized.py", "gemm_ws.py")  # where a sanitizer report may place the ws kernels
#                   (ws_gemm_kernel lived in warp_specialized.py before the implicit-GEMM template split)


def ws_source_lines():
    """({kernel: (file name, current lines of its file)}, {kernel: line of its `def`}) for ws_gemm_kernel
    and ws_norm_kernel, found through the registry (the variants' launch closures)."""
    import inspect
    from pathlib import Path
    from .. import registry

    def def_line(fn):
        lines_, start = inspect.getsourcelines(fn)
        return start + next(i for i, ln in enumerate(lines_) if ln.lstrip().startswith("def "))

    files, defs = {}, {}
    for (op, variant), kern in zip(SOURCE_VARIANTS, ("ws_norm_kernel", "ws_gemm_kernel")):
        fn = registry.source_object(op, variant, kern)
        path = Path(inspect.getsourcefile(fn))
        files[kern] = (path.name, path.read_text().splitlines())
        defs[kern] = def_line(fn)
    return files, defs


def consumer_schedule() -> list:
    """How the two GEMM kernels fork (partitions, worker warps and registers) and how their consumers
    lay out the accumulator, read from the current source; lines of text."""
    out = []
    for kern, cons in (("ws_gemm_kernel", "_ws_consumer"), ("ws_pingpong_gemm_kernel", "_pp_consumer")):
        src = kernel_source(kern)
        calls = src.split("gl.warp_specialize(")[1:]  # one fork per producer kind (cp.async / TMA)
        acc = re.search(r"warps_per_cta=(\[[^\]]*\])", kernel_source(cons))
        for call in calls:
            m = re.search(r"\],\s*(\[[^\]]*\]),\s*(\[[^\]]*\])\)", call)
            parts = re.findall(r"\((\w+), \(", call[:m.end()] if m else call)
            out.append(f"{kern}: partitions {', '.join(parts)} (the first is the default); worker warps "
                       f"{m.group(1) if m else '?'}, worker registers {m.group(2) if m else '?'}; consumer accumulator "
                       f"warps_per_cta={acc.group(1) if acc else '?'}")
    out += ["cooperative (GemmConfig(pingpong=False)): with num_warps = 8 the two consumer warpgroups split the BM "
            "rows of ONE tile; its epilogue stalls both",
            "ping-pong (GemmConfig(pingpong=True), num_warps = 4 per warpgroup): two _pp_consumer partitions own "
            "alternate tiles, each a whole BM x BN accumulator and its own C buffer; the ORDER barriers make their "
            "mainloops take turns, so one warpgroup's epilogue overlaps the other's MMAs"]
    return out


# ---- the GEMM shape sweep ('gemm-shapes'): every schedule x tile beside cuBLAS, one run ----
SHAPE_STUDY = "gemm-shapes"
GEMM_PEER = "torch"  # torch.matmul = cuBLAS
SHAPE_TARGETS = {"geomean": 1.0, "every cell": 0.95, "8192^3": 1.03}  # best gluon / cuBLAS (the GEMM issue's)


def shape_sweep_records(use):
    """The newest run holding the 'gemm-shapes' study (matmul records of every variant in it)."""
    if not len(use):
        return use
    mm = use[use.op == "matmul"]
    return cm.newest_run(mm, cm.config_value(mm, "study") == SHAPE_STUDY) if len(mm) else mm


def gemm_config_label(cfg: dict) -> str:
    """'ws 128x128x64 4w s4 pp' style label of a study record's config ('heuristic' when it set none)."""
    if cfg.get("heuristic") or not any(k in cfg for k in ("BM", "BN", "BK")):  # the study marks its heuristic cases
        return "heuristic"
    lab = f"{cfg.get('BM')}x{cfg.get('BN')}x{cfg.get('BK')} {cfg.get('num_warps')}w s{cfg.get('num_stages')}"
    return (lab + (" ping-pong" if cfg.get("pingpong") else "") + (" swap-AB" if cfg.get("swap_ab") else "")
            + (f" split-K {cfg['split_k']}" if cfg.get("split_k", 1) > 1 else "")
            + (" (last wave)" if cfg.get("split_last_wave") else "") + (" cp.async" if cfg.get("cp_async") else "")
            + (f" stream-K {cfg['stream_k']}w" if cfg.get("stream_k") else ""))


def labelled(ok):
    """Matmul records with a 'label' column (record_labels), and their parsed configs: (records, configs)."""
    cfgs = ok["config_key"].map(json.loads)
    return ok.assign(label=record_labels(ok, cfgs)), cfgs


def record_labels(df, cfgs) -> list:
    """Each matmul record's label: the peer's name, or 'ws' / 'pipe' + gemm_config_label of its config."""
    return [v if v == GEMM_PEER else f"{'ws' if v == 'gluon-ws' else 'pipe'} {gemm_config_label(c)}"
            for v, c in zip(df.variant, cfgs)]


def shape_sweep_table(st):
    """Per shape of one 'gemm-shapes' run: cuBLAS us / TFLOP/s / SM clock, each Gluon GEMM at its
    heuristic, the best swept config and its ratio to cuBLAS (>= 1: Gluon leads), the best
    ping-pong / best cooperative gluon-ws config (> 1: ping-pong is faster), and what variant="auto"
    picks there with its ratio to cuBLAS."""
    ok = cm.passed(st) if len(st) else st
    rows = []
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(pingpong=[bool(c.get("pingpong")) for c in cfgs],
                   clock=[c.get("sm_clock_mhz") for c in cfgs])
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        peer = g[g.variant == GEMM_PEER]
        gl_ = g[g.variant != GEMM_PEER]
        if not len(peer) or not len(gl_):
            continue
        p, drift = peer_time(peer)
        b = gl_.loc[gl_.ms_median.idxmin()]
        ws = gl_[gl_.variant == "gluon-ws"]
        ws_pp, ws_co = ws[ws.pingpong], ws[~ws.pingpong]
        heur = {v: gl_[(gl_.variant == v) & (gl_.label.str.endswith("heuristic"))] for v in ("gluon-ws", "gluon-pipelined")}
        rows.append({"M": int(M), "N": int(N), "K": int(K), "cuBLAS us": round(1000 * p.ms_median, 1),
                     "cuBLAS TFLOP/s": round(p.tflops, 0), "SM MHz": p.clock, "cuBLAS drift": drift,
                     "ws heuristic / cuBLAS": round(p.ms_median / heur["gluon-ws"].ms_median.min(), 3)
                     if len(heur["gluon-ws"]) else np.nan,
                     "pipe heuristic / cuBLAS": round(p.ms_median / heur["gluon-pipelined"].ms_median.min(), 3)
                     if len(heur["gluon-pipelined"]) else np.nan,
                     "best gluon": b.label, "best TFLOP/s": round(b.tflops, 0), "best SM MHz": b.clock,
                     "best / cuBLAS": round(p.ms_median / b.ms_median, 3),
                     "ping-pong / cooperative": round(ws_co.ms_median.min() / ws_pp.ms_median.min(), 3)
                     if len(ws_pp) and len(ws_co) else np.nan,
                     **auto_pick(int(M), int(N), int(K), p, heur)})
    return pd.DataFrame(rows)


def peer_time(peer):
    """(cuBLAS's row, drift) of a shape: the sweep times cuBLAS before and after the shape's Gluon cases
    ('bracket': 'after'); the row carries the geomean of the two times (TFLOP/s to match), drift = after /
    before (NaN with one timing: runs before the bracket)."""
    cfg = peer["config_key"].map(json.loads)
    after = peer[[c.get("bracket") == "after" for c in cfg]]
    before = peer[[c.get("bracket") != "after" for c in cfg]]
    p = (before if len(before) else peer).iloc[0].copy()
    if len(after) and len(before):
        t0, t1 = float(before.ms_median.iloc[0]), float(after.ms_median.iloc[0])
        p["ms_median"] = float(np.sqrt(t0 * t1))
        p["tflops"] = p["tflops"] * t0 / p["ms_median"]
        return p, round(t1 / t0, 3)
    return p, np.nan


def auto_pick(M: int, N: int, K: int, peer, heur: dict) -> dict:
    """What variant="auto" runs at this shape (the committed selection table, built from these records'
    heuristic cases) and its ratio to cuBLAS in the run (1.0 where auto falls back to torch)."""
    from .. import device, selection, specs
    pick = selection.candidates(specs.get("matmul"), {"M": M, "N": N, "K": K}, "bfloat16",
                                device.gpu_slug(peer.gpu_name))[0]
    h = heur.get(pick)
    ratio = 1.0 if pick == GEMM_PEER else (round(peer.ms_median / h.ms_median.min(), 3) if h is not None and len(h) else np.nan)
    return {"auto": pick, "auto / cuBLAS": ratio}


def shape_sweep_targets(t):
    """The GEMM issue's targets on a shape_sweep_table: (target, measured, met) rows."""
    if not len(t):
        return pd.DataFrame()
    r = t["best / cuBLAS"]
    big = t[(t.M == 8192) & (t.N == 8192) & (t.K == 8192)]["best / cuBLAS"]
    rows = [(f"best gluon >= {SHAPE_TARGETS['geomean']}x cuBLAS geomean over {len(t)} shapes",
             f"{cm.geomean(r):.3f}x", cm.geomean(r) >= SHAPE_TARGETS["geomean"]),
            (f"best gluon >= {SHAPE_TARGETS['every cell']}x cuBLAS in every cell",
             f"{int((r >= SHAPE_TARGETS['every cell']).sum())}/{len(t)} (worst {r.min():.3f}x)",
             bool((r >= SHAPE_TARGETS["every cell"]).all()))]
    if len(big):
        rows.append((f"best gluon >= {SHAPE_TARGETS['8192^3']}x cuBLAS at 8192^3", f"{big.iloc[0]:.3f}x",
                     big.iloc[0] >= SHAPE_TARGETS["8192^3"]))
    return pd.DataFrame(rows, columns=["target", "measured", "met"])


def wave_table(shapes=None, tiles=((128, 256), (128, 128), (64, 256), (64, 128), (128, 64), (64, 64)), sms=None):
    """Wave quantization of the persistent grid, computed (no GPU): per shape and output tile, the
    tile count, waves = tiles / SMs and the last wave's fill: efficiency = tiles / (ceil(waves) * SMs),
    the share of SM-slots that hold a tile when every tile costs the same. A ragged edge tile costs as
    much as a full one (TMA zero-fills), so it is counted whole."""
    from ..experiments import GEMM_SHAPE_SWEEP
    from ..kernels.hopper import H200_SMS
    sms = sms or H200_SMS
    rows = []
    for (M, N, K) in (shapes or GEMM_SHAPE_SWEEP):
        for (bm, bn) in tiles:
            n = -(-M // bm) * -(-N // bn)
            rows.append({"shape": f"{M}x{N}x{K}", "M": M, "N": N, "K": K, "tile": f"{bm}x{bn}", "tiles": n,
                         "waves": round(n / sms, 2), "efficiency": round(n / (-(-n // sms) * sms), 3),
                         "useful": round(M * N / (-(-M // bm) * bm * -(-N // bn) * bn), 3)})
    return pd.DataFrame(rows)


def wave_figure(wt):
    """Heat map of wave_table: rows = shapes, columns = tiles, colour = last-wave efficiency x the
    useful share of the tiles (the fraction of the MMA work that lands in C)."""
    pv = wt.assign(score=wt.efficiency * wt.useful).pivot_table(index="shape", columns="tile", values="score",
                                                               sort=False)
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(pv) + 1.2))
    im = ax.imshow(pv.values, cmap="RdYlGn", vmin=0.3, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(pv.columns)), pv.columns)
    ax.set_yticks(range(len(pv.index)), pv.index, fontsize=7)
    for i in range(pv.shape[0]):
        for j in range(pv.shape[1]):
            ax.text(j, i, f"{pv.values[i, j]:.2f}", ha="center", va="center", fontsize=6)
    ax.set_title("wave efficiency x useful share of the tile (132 SMs, one tile per SM at a time)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig


def sanitized_spec(kernel: str, sz):
    """(compile spec, config text) of a ci/sanitize.py case as its launcher configures it."""
    op, variant, shape, _ = sz.CASES[kernel]
    if op == "matmul":
        cfg = P.gemm_config(shape["M"], shape["N"], "bfloat16")
        sp_ = P.gemm_spec(cfg, "bfloat16", ws=True)
        if variant == "diag:ws-gemm-noinval":
            sp_["fn"] = sz.ws_gemm_without_invalidate()
        return sp_, gemm_cfg_text(cfg) + f" producer_regs={cfg.producer_regs}"
    cfg = ws_norm_heuristic(op, shape["N"], "bfloat16", shape["M"])
    return ws_norm_spec(op, shape["N"], "bfloat16", cfg), ws_cfg_text(cfg)


def sass_of(spec: dict):
    """([(offset, instruction)], smem bytes, PTX) of a spec compiled for sm_90 here."""
    from .. import codegen
    k = codegen.compile_sm90(**spec)
    ins = re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*;)", codegen.sass(k.asm["cubin"]))
    return ins, codegen.census(k)["smem_bytes"], k.asm["ptx"]


def triton_version() -> str:
    import triton
    return triton.__version__


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
    return P.nodata(ctx, what, stale, name="")


def about(g, what: str) -> list:
    return P.about(g, what, with_files=True)


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


# ---- per-partition timeline ----------------------------------------------------------------------
def fields(TL) -> dict:
    """{field: column} of a 5-stamp timeline (the file's `fields`, else F4)."""
    f = list(TL.get("fields", F4))
    return {k: f.index(k) for k in F4} | {"_k": len(f)}


def tl_provenance(ctx, TL, recs, notebook: str | None = None) -> str:
    """Which file, GPU, run (records and git commit of that run), shape and timer granularity."""
    path = P.timeline_path(ctx, notebook)
    run = recs[recs.run_id == TL["run_id"]]
    commit = ", ".join(sorted(run.git_commit.dropna().unique())) or "?"
    return (f"`{path.name}`: MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` (records of that run: "
            f"{len(run)}, git commit {commit}; the timeline file carries no kernel-source hash, so it cannot be checked "
            f"for staleness), RMSNorm {TL['dtype']} M={TL['M']} N={TL['N']}; stamps are multiples of {P.stamp_granularity(TL)} ns.")


def ws_timeline_stats(TL):
    """Per NUM_STAGES: producer wait+issue, run-ahead (consumer's FULL wait - producer's issue), blocks
    ahead, the consumer's stall and work, the block period and the share of time the consumer stalls."""
    if TL is None:
        return EMPTY
    ix = fields(TL)
    rows = []
    for st in P.stage_keys(TL):
        bs = P.timeline_blocks(TL, st, ix["_k"])
        if not bs:
            continue
        P0, P1, C0, C1, C2 = (np.concatenate([b[:, ix[f]] for b in bs]) for f in F4)
        ahead = np.concatenate([np.searchsorted(np.sort(b[:, ix["producer_issued"]]), b[:, ix["consumer_before_full_wait"]],
                                                side="right") - np.arange(len(b)) for b in bs])
        period = np.concatenate([np.diff(b[:, ix["consumer_before_full_wait"]]) for b in bs])
        frac = np.median([(b[:, ix["consumer_ready"]] - b[:, ix["consumer_before_full_wait"]]).sum()
                          / (b[-1, ix["consumer_stored"]] - b[0, ix["consumer_before_full_wait"]]) for b in bs])
        cfg = TL["timelines"][st]["config"]
        rows.append({"NUM_STAGES": int(st), "config": ", ".join(f"{k}={v}" for k, v in cfg.items()), "CTAs traced": len(bs),
                     "blocks per CTA": f"{min(map(len, bs))}-{max(map(len, bs))}",
                     "producer EMPTY wait + issue, median (ns)": np.median(P1 - P0),
                     "run-ahead, median (ns)": np.median(C0 - P1), "run-ahead < 0 (% of blocks)": 100 * np.mean(C0 - P1 < 0),
                     "blocks ahead, median": np.median(ahead), "blocks ahead, max": int(ahead.max()),
                     "consumer FULL stall, median (ns)": np.median(C1 - C0), "consumer work, median (ns)": np.median(C2 - C1),
                     "block period, median (ns)": np.median(period), "consumer stalled (median over CTAs) %": 100 * frac})
    return pd.DataFrame(rows).set_index("NUM_STAGES") if rows else EMPTY


def pipe_timeline_summary(TL3):
    """Pattern 3's single-stream timeline, the three medians notebook 04 compares with."""
    s = P.timeline_stats(TL3)
    if not len(s):
        return EMPTY
    return s[["median stall / block (ns)", "median compute+store (ns)", "median block period (ns)"]].set_axis(
        ["stall, median (ns)", "compute + store, median (ns)", "block period, median (ns)"], axis=1)


def timeline_views(ctx, TL4, TL3, allrec, rec03, ws_tl, pipe_tl, stale: str = "flag") -> list:
    out = []
    if TL4 is None:
        out.append(nodata(ctx, f"the measured gluon-ws timeline ({P.timeline_path(ctx).name} is missing)", stale))
    else:
        out += [tl_provenance(ctx, TL4, allrec), P.table(ws_tl.round(1))]
    if TL3 is not None:
        out += [tl_provenance(ctx, TL3, rec03, NB3),
                "For comparison, pattern 3's single-stream `gluon-pipelined` timeline (same M, N; 3 stamps per block):",
                P.table(pipe_tl.round(1))]
    else:
        out.append(nodata(ctx, f"pattern 3's timeline ({P.timeline_path(ctx, NB3).name} is missing)", stale))
    return out


def _ws_gantt(ax, TL, ws_tl, st, ctas=(0, 1, 2), xmax_us=None):
    ix = fields(TL)
    bs = P.timeline_blocks(TL, st, ix["_k"])
    ticks, labels = [], []
    for k, cta in enumerate(ctas[:len(bs)]):
        b = bs[cta] / 1e3
        p0, p1, c0, c1, c2 = (b[:, ix[f]] for f in F4)
        yp, yc = 2 * k + 1, 2 * k
        first = k == 0
        ax.broken_barh([(s, e - s) for s, e in zip(p0, p1)], (yp - 0.3, 0.6), color="#ff7f0e",
                       label="producer: EMPTY wait + issue" if first else None)
        ax.vlines(p1, yp - 0.4, yp + 0.4, color="k", lw=0.7, label="producer: copies issued" if first else None)
        ax.broken_barh([(s, e - s) for s, e in zip(c0, c1)], (yc - 0.3, 0.6), color="#d62728",
                       label="consumer: FULL stall" if first else None)
        ax.broken_barh([(s, e - s) for s, e in zip(c1, c2)], (yc - 0.3, 0.6), color="#2ca02c",
                       label="consumer: compute + store issue" if first else None)
        ticks += [yc, yp]
        labels += [f"CTA {cta} consumer", f"CTA {cta} producer"]
    ax.set_yticks(ticks, labels, fontsize=8)
    r = ws_tl.loc[int(st)]
    ax.set_title(f"NUM_STAGES={st}: run-ahead {r['run-ahead, median (ns)']:.0f} ns, consumer stall "
                 f"{r['consumer FULL stall, median (ns)']:.0f} ns, work {r['consumer work, median (ns)']:.0f} ns, "
                 f"period {r['block period, median (ns)']:.0f} ns (medians over all CTAs)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if xmax_us:
        ax.set_xlim(0, xmax_us)


def ws_gantt(TL, ws_tl):
    """Producer and consumer rows of the first 3 CTAs, the first 10 block periods of the slower config."""
    if TL is None or not len(ws_tl):
        return None
    sts = list(ws_tl.index)
    zoom = 10 * ws_tl["block period, median (ns)"].max() / 1e3
    fig, axes = plt.subplots(len(sts), 1, figsize=(13, 2.4 * len(sts)), sharex=True, squeeze=False)
    for ax, st in zip(axes[:, 0], sts):
        _ws_gantt(ax, TL, ws_tl, st, xmax_us=zoom)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    axes[-1, 0].set_xlabel("time since the first stamp of the launch (us)")
    fig.suptitle(f"MEASURED (%globaltimer, run {TL['run_id']}): gluon-ws RMSNorm M={TL['M']} N={TL['N']}, first 3 CTAs, "
                 f"first {zoom:.1f} us (10 of the slower configuration's block periods)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def runahead_hist(TL, ws_tl):
    """Run-ahead and the consumer's FULL stall of every block of every CTA, per NUM_STAGES."""
    if TL is None or not len(ws_tl):
        return None
    ix = fields(TL)
    sts = list(ws_tl.index)
    fig, axes = plt.subplots(1, len(sts), figsize=(13, 3), squeeze=False)
    for ax, st in zip(axes[0], sts):
        bs = P.timeline_blocks(TL, st, ix["_k"])
        ra = np.concatenate([b[:, ix["consumer_before_full_wait"]] - b[:, ix["producer_issued"]] for b in bs]) / 1e3
        sl = np.concatenate([b[:, ix["consumer_ready"]] - b[:, ix["consumer_before_full_wait"]] for b in bs]) / 1e3
        ax.hist(ra, bins=60, alpha=0.6, label="run-ahead (us)")
        ax.hist(sl, bins=60, alpha=0.6, label="consumer FULL stall (us)")
        ax.set_yscale("log")
        ax.set_title(f"NUM_STAGES={st}: every block of every CTA", fontsize=9)
        ax.set_xlabel("us")
        ax.set_ylabel("blocks")
        ax.grid(alpha=0.3)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    return fig


def timeline_lines(ws_tl, pipe_tl) -> list:
    """First vs last NUM_STAGES of the ws timeline, and ws vs pipelined at the same depth."""
    if len(ws_tl) < 1:
        return []
    a, b = ws_tl.iloc[0], ws_tl.iloc[-1]
    out = [f"NUM_STAGES {ws_tl.index[0]} -> {ws_tl.index[-1]}: run-ahead {a['run-ahead, median (ns)']:.0f} -> "
           f"{b['run-ahead, median (ns)']:.0f} ns, blocks ahead {a['blocks ahead, median']:.0f} -> {b['blocks ahead, median']:.0f}, "
           f"consumer stall {a['consumer FULL stall, median (ns)']:.0f} -> {b['consumer FULL stall, median (ns)']:.0f} ns, "
           f"period {a['block period, median (ns)']:.0f} -> {b['block period, median (ns)']:.0f} ns "
           f"({a['block period, median (ns)'] / b['block period, median (ns)']:.2f}x)"]
    if len(pipe_tl) and ws_tl.index[-1] in pipe_tl.index:
        st = ws_tl.index[-1]
        out.append(f"NUM_STAGES={st}, gluon-ws vs gluon-pipelined (same M, N, same ring): consumer stall "
                   f"{b['consumer FULL stall, median (ns)']:.0f} vs {pipe_tl.loc[st, 'stall, median (ns)']:.0f} ns, work "
                   f"{b['consumer work, median (ns)']:.0f} vs {pipe_tl.loc[st, 'compute + store, median (ns)']:.0f} ns, period "
                   f"{b['block period, median (ns)']:.0f} vs {pipe_tl.loc[st, 'block period, median (ns)']:.0f} ns")
    return out


# ---- every CTA's finish, both timelines ------------------------------------------------------------
def timeline_sources(TL3, TL4) -> list:
    """(label, timeline, stamps per block, column of the consumer's wait) of the timelines present."""
    out = []
    if TL3 is not None:
        out.append(("gluon-pipelined (03)", TL3, 3, 0))
    if TL4 is not None:
        ix = fields(TL4)
        out.append(("gluon-ws (04)", TL4, ix["_k"], ix["consumer_before_full_wait"]))
    return out


def finish_spreads(TL3, TL4) -> dict:
    """{(label, NUM_STAGES): pipelined.finish_spread} for every timeline present."""
    fin = {}
    for label, TL, k, wait_col in timeline_sources(TL3, TL4):
        for st in P.stage_keys(TL):
            fs = P.finish_spread(TL, st, k, wait_col)
            if fs:
                fin[(label, int(st))] = fs
    return fin


def spread_table(fin: dict):
    if not fin:
        return EMPTY
    rows = [{"kernel": label, "NUM_STAGES": st, "CTAs": f["CTAs"], "blocks per CTA": f"{f['blocks'].min()}-{f['blocks'].max()}",
             "finish min (us)": f["finish min"] / 1e3, "finish median (us)": f["finish median"] / 1e3,
             "finish max (us)": f["finish max"] / 1e3, "tail: max / median - 1 (%)": f["tail %"],
             "block-count imbalance (%)": f["imbalance %"],
             "per-CTA pace min / median / max (ns)":
                 f"{np.nanmin(f['pace']):.0f} / {np.nanmedian(f['pace']):.0f} / {np.nanmax(f['pace']):.0f}",
             "whole-grid GB/s from stamps": f["whole-grid GB/s"], "GB/s if the CTA time were spread evenly": f["even GB/s"]}
            for (label, st), f in fin.items()]
    return pd.DataFrame(rows).set_index(["kernel", "NUM_STAGES"])


def spread_figure(fin: dict):
    """Left: every CTA's finish, sorted, per timeline and depth; right: by CTA id at the deepest ring."""
    if not fin:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
    st_hi = max(s for _, s in fin)
    for (label, st), f in fin.items():
        ends = f["ends"]
        line, = axes[0].plot(np.arange(len(ends)), np.sort(ends) / 1e3, ".-", ms=3, label=f"{label}, NUM_STAGES={st}")
        if st == st_hi:  # the same colour as its sorted line
            axes[1].scatter(np.arange(len(ends)), ends / 1e3, s=9, color=line.get_color())
    axes[0].set_xlabel("CTAs, sorted by finish")
    axes[0].set_ylabel("last stamp (us)")
    axes[1].set_xlabel(f"CTA id (program_id), NUM_STAGES={st_hi}")
    axes[1].set_ylabel("last stamp (us)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=9, frameon=False)  # below
    fig.suptitle("MEASURED per-CTA finish times, every CTA of the launch (%globaltimer)", fontsize=10)
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    return fig


def timed_same_config(df, variant: str, M: int, N: int, cfg: dict):
    """The newest passed rms_norm record of variant at (M, N) with the timeline's config."""
    keys = [k for k in ("num_warps", "rows", "num_stages", "ctas_per_sm", "producer_regs") if k in cfg]
    sub = df[P.mask((df.op == "rms_norm") & (df.variant == variant) & (df.M == M) & (df.N == N) & df.passed.astype(bool))]
    for k in keys:
        sub = sub[P.mask(cm.config_value(sub, k) == cfg[k])] if len(sub) else sub
    return sub.sort_values("timestamp").tail(1)


def spread_check(spread, TL3, TL4, use, use03):
    """The stamped whole-grid GB/s next to the timed record of the same config."""
    if not len(spread) or TL4 is None:
        return EMPTY
    chk = []
    for (label, st), r in spread.iterrows():
        TL, df, var = ((TL4, use, "gluon-ws") if label.startswith("gluon-ws")
                       else (TL3, pd.concat([use03, use], ignore_index=True), "gluon-pipelined"))
        rec = timed_same_config(df, var, TL["M"], TL["N"], TL["timelines"][str(st)]["config"])
        st_ = cm.config_value(rec, "study").iloc[0] if len(rec) else None
        chk.append({"kernel": label, "NUM_STAGES": st,
                    "timed GB/s, same config": round(float(rec.gbps.iloc[0])) if len(rec) else None,
                    "timed record": (f"run {rec.run_id.iloc[0]}" + (" STALE" if rec.stale.iloc[0] else "")
                                     + (f", study {st_}" if st_ else "")) if len(rec) else "no timed record with this exact config",
                    "stamps / timed": r["whole-grid GB/s from stamps"] / float(rec.gbps.iloc[0]) if len(rec) else None})
    return pd.DataFrame(chk).set_index(["kernel", "NUM_STAGES"])


def norm_grid_run(use):
    """The newest rms_norm grid run holding gluon-ws and gluon-pipelined."""
    if not len(use):
        return use.copy()
    return P.pick(use, (use.op == "rms_norm") & P.study(use).isna() & use.N.notna(), require=("gluon-ws", "gluon-pipelined"))


def tail_note(spread, grid_run, TL3, TL4) -> str | None:
    """At the timeline's cell: gluon-tma vs the persistent kernels in the timed grid, next to the tail
    and what an even spread of the CTA time would be worth."""
    if not len(spread) or TL4 is None or not len(grid_run):
        return None
    cell = grid_run[P.mask((grid_run.M == TL4["M"]) & (grid_run.N == TL4["N"]))]
    gb = cell.groupby("variant").gbps.first()
    cfgs = cell.groupby("variant").config_key.first()
    if not {"gluon-tma", "gluon-pipelined", "gluon-ws"} <= set(gb.index):
        return None
    st_hi = max(s for _, s in spread.index)
    labs = [lab for lab, s in spread.index if s == st_hi]
    tails = {lab: spread.loc[(lab, st_hi), "tail: max / median - 1 (%)"] for lab in labs}
    even = {lab: spread.loc[(lab, st_hi), "GB/s if the CTA time were spread evenly"]
            / spread.loc[(lab, st_hi), "whole-grid GB/s from stamps"] for lab in labs}
    grid_of = {"gluon-pipelined (03)": ("gluon-pipelined", TL3), "gluon-ws (04)": ("gluon-ws", TL4)}
    parts = []
    for lab in tails:
        v, TL = grid_of[lab]
        gap = gb["gluon-tma"] / gb[v] - 1
        gain = even[lab] - 1
        tl_st = TL["timelines"][str(st_hi)]["config"]["num_stages"]
        rec_st = json.loads(cfgs[v]).get("num_stages")
        parts.append(f"{v}: gluon-tma is **{100 * gap:.1f}%** faster in the timed grid; an even spread would be worth "
                     f"**{100 * gain:.1f}%** — "
                     + ("as much as the whole gap" if gain >= gap else f"about {100 * gain / gap:.0f}% of the gap")
                     + (f" (the timed {v} record ran NUM_STAGES={rec_st}, the timeline {tl_st}: not the same config)"
                        if rec_st != tl_st else ""))
    return (f"**At M = N = {TL4['M']}** (rms_norm, norms grid run `{grid_run.run_id.iloc[0]}`): gluon-tma "
            f"**{gb['gluon-tma']:.0f} GB/s**, gluon-pipelined **{gb['gluon-pipelined']:.0f}**, gluon-ws **{gb['gluon-ws']:.0f}**. "
            f"In the timelines at NUM_STAGES={st_hi} the slowest CTA finishes "
            + " and ".join(f"{v:.1f}% ({k})" for k, v in tails.items()) + " after the median CTA, while the round-robin block-count "
            "imbalance explains only " + ", ".join(f"{spread.loc[(k, st_hi), 'block-count imbalance (%)']:.1f}%" for k in tails)
            + ": most of the tail is per-CTA **pace** (pace column), which a static split cannot rebalance. If the same CTA time "
            "were spread evenly over the CTAs, the stamped GB/s would rise by "
            + " and ".join(f"{100 * (v - 1):.1f}% ({k})" for k, v in even.items()) + ".\n\n"
            + "\n".join(f"- {x}" for x in parts)
            + f"\n\nConfigs of the timed records: gluon-tma `{cfgs['gluon-tma']}`, gluon-pipelined `{cfgs['gluon-pipelined']}`, "
            f"gluon-ws `{cfgs['gluon-ws']}`.")


def spread_check_view(chk):
    """spread_check as shown: a row without a timed record of the timeline's config says so."""
    if not len(chk):
        return None
    return cm.fill_reasons(chk.round(3), "no timed record with this config")


def spread_check_lines(chk) -> list:
    return [f"{label} NUM_STAGES={st}: the stamped span implies {r['stamps / timed']:.2f}x the timed GB/s of the same config: "
            "the timed launch includes what the stamps leave out (launch, weight load, store drain, exit), and the "
            "timeline and the timed record come from different runs."
            for (label, st), r in chk.iterrows() if r["stamps / timed"] and r["stamps / timed"] > 1.05]


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
    return P.norm_grids(use, NORM_OPS, require=("gluon-ws", "gluon-pipelined"))


def grid_notes(ctx, grids, stale: str = "flag") -> list:
    return P.grid_notes(ctx, grids, NORM_OPS, stale, with_files=True, name="")


def low_copy_line(grids, ct) -> str | None:
    low = P.low_copy_cells(ct)
    if not grids or not len(low):
        return None
    fastest = pd.concat(grids.values()).groupby(["M", "N"]).gbps.max().reindex(low.index)
    return ("M*N >= 64 Mi cells where the per-shape copy is < 90% of the session copy: "
            + ", ".join(f"{m}x{n} ({t:.0f} MiB per tensor): copy {c:.0f} GB/s, fastest norm {f:.0f} GB/s"
                        for (m, n), c, t, f in zip(low.index, low["per-shape copy GB/s"], low["tensor MiB"], fastest)))


def heat_grids(grids: dict) -> dict:
    """The grids the heatmaps show (every M x N: RMSNorm, LayerNorm; add+RMSNorm is one M)."""
    return {op: g for op, g in grids.items() if op != "add_rms_norm"}


OP_NAMES = P.OP_NAMES


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
    gm = gemm_records(gemm_candidates(use, use03))
    gemm_tab = gemm_table(gm)
    out = []
    frames = {op: P.vs_best_frame(g, "gluon-ws") for op, g in heat_grids(grids).items()}
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
        sq = P.square_ratio(gemm_tab, "gluon-ws / cuBLAS")
        tf = P.square_ratio(gemm_tab, "gluon-ws")
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
                      "row blocks per CTA": P.blocks_per_cta(ws, spec).reindex(piv.index),
                      "ws config (stages, warps, rows, ctas/SM)": [
                          tuple(json.loads(c).get(k) for k in ("num_stages", "num_warps", "rows", "ctas_per_sm"))
                          if isinstance(c, str) else None for c in cfg],
                      "stale": ws.stale.reindex(piv.index)})
    t["met: >= 0.98x gluon-pipelined"] = np.where(t["ws / pipelined"] >= WS_VS_PIPE, "met", "MISSED")
    return t


def target_tables(grids: dict, spec) -> dict:
    return P.target_tables(grids, spec, target_cells)


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
    return P.target_grid(t, cols=(("met: >= 0.98x gluon-pipelined", "ws / pipelined", WS_VS_PIPE), ), words=TARGET_WORDS,
                         legend={"green": f"≥ {WS_VS_PIPE} (met)", "red": f"< {WS_VS_PIPE} (missed)"})


def summary_view(summary):
    """norm_summary with `all met` coloured (the target, in words, is the title above it)."""
    if not len(summary):
        return None
    return P.summary_view(summary.round(3))


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
    sw = P.pick(use, (P.study(use) == "norm-sweep") & (use.variant == "gluon-ws")) if len(use) else use.copy()
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
        gws = gr[(gr.variant == "gluon-ws") & P.mask(gr.M == M) & P.mask(gr.N == N)] if gr is not None else EMPTY
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


# ---- the GEMM ------------------------------------------------------------------------------------
def gemm_candidates(use, use03):
    """Every GEMM-grid record of both files (matmul, no study, not a ceiling)."""
    parts = [d[(d.op == "matmul") & P.study(d).isna() & (d.pattern != "ceiling")] for d in (use, use03) if len(d)]
    return pd.concat(parts, ignore_index=True) if parts else EMPTY


def gemm_records(mm):
    """The newest run holding all four GEMMs (one run only)."""
    if not len(mm):
        return mm
    gm = P.pick(mm, mm.op == "matmul", require=GEMM4)
    return gm if set(GEMM4) <= set(gm.variant) else gm.iloc[:0]


def gemm_table(gm):
    if not len(gm):
        return EMPTY
    return P.gemm_table(gm, GEMM4, pairs=(("gluon-ws", "gluon-pipelined"), ))


def older_runs_line(gm, mm) -> str | None:
    """The other GEMM runs of both files, left out (one run per comparison)."""
    older = sorted(set(mm.run_id) - {gm.run_id.iloc[0]}) if len(gm) else []
    return ("other GEMM runs not used here: " + ", ".join(older)) if older else None


def gemm_ceiling_lines(gm, use, use03) -> list:
    """The GEMM run's own cuBLAS ceiling, and records more than 5% above it."""
    if not len(gm):
        return []
    run = gm.run_id.iloc[0]
    both = pd.concat([d for d in (use, use03) if len(d)], ignore_index=True)
    gce = cm.ceilings(both[both.run_id == run])
    if not gce:
        return []
    out = [f"run {run}: its own cuBLAS ceiling ({gce['matmul_shape']}, {gce['matmul_timer']}) = {gce['matmul_tflops']:.0f} TFLOP/s"]
    for r in gm[gm.tflops > 1.05 * gce["matmul_tflops"]].sort_values("tflops", ascending=False).itertuples():
        out.append(f"  note: {r.variant} {r.M}x{r.N}x{r.K} reached {r.tflops:.0f} TFLOP/s, "
                   f"{100 * (r.tflops / gce['matmul_tflops'] - 1):.0f}% above "
                   "that ceiling (different shape and timer; not investigated here)")
    return out


def gemm_configs(gm):
    """The config each gluon GEMM record ran with, per shape (tile, stages, warps, GROUP_M; producer
    registers for gluon-ws): pattern 3's gemm_configs."""
    return P.gemm_configs(gm)


def gemm_targets(t):
    """gluon-ws >= 1.0x cuBLAS at 8192^3 (moonshot 1.05x), geomean >= 0.98x, >= gluon-pipelined everywhere."""
    if not len(t):
        return EMPTY
    r = t["gluon-ws / cuBLAS"]
    sq = P.square_ratio(t, "gluon-ws / cuBLAS")
    rows = [{"target": f"gluon-ws bf16 GEMM at M = N = K = 8192: at least {goal:.2f}× cuBLAS (torch.matmul) in the same run"
                       + (" (the stretch goal)" if name == "moonshot" else ""),
             "measured": f"{sq:.3f}x" if sq is not None else "no 8192^3 record",
             "met": bool(sq is not None and sq >= goal), "short": f">= {goal:.2f}x cuBLAS at 8192^3 ({name})"}
            for goal, name in ((1.0, "target"), (1.05, "moonshot"))]
    gmn = plots.geomean(r)
    rows.append({"target": "gluon-ws: geometric-mean speed over the shape set at least 0.98× cuBLAS",
                 "measured": f"{gmn:.3f}x over {r.notna().sum()} shapes", "met": bool(gmn >= 0.98),
                 "short": ">= 0.98x cuBLAS, geomean"})
    rp = t["gluon-ws / gluon-pipelined"]
    rows.append({"target": "gluon-ws at least as fast as the pipelined GEMM of pattern 3 (gluon-pipelined) at every shape",
                 "measured": f"{int((rp >= 1).sum())}/{rp.notna().sum()} shapes; worst {rp.min():.3f}x at {P.shape_str(rp.idxmin())}",
                 "met": bool((rp >= 1).all()), "short": ">= gluon-pipelined at every shape"})
    return pd.DataFrame(rows)


def gemm_targets_view(gt):
    """gemm_targets as a coloured table (the short labels, for the takeaways, left out)."""
    return cm.target_list(gt.drop(columns=["short"], errors="ignore")) if len(gt) else None


# ---- ws-sweep ------------------------------------------------------------------------------------
TILE_KEYS = ("BM", "BN", "BK", "num_warps", "num_stages")


tile_of = P.sweep_tile
ws_sweep_records = P.ws_sweep_records


def sweep_table(ws):
    """(TFLOP/s per (shape, tile) x producer_regs with 'does not fit' where a record holds that error,
    passed records, failed records)."""
    if not len(ws):
        return EMPTY, ws, ws
    ok, bad = ws[ws.passed.astype(bool)], ws[~ws.passed.astype(bool)]
    tab = ok.pivot_table(index=["shape", "tile"], columns="producer_regs", values="tflops").round(1).astype(object)
    for r in bad.itertuples():
        m = re.search(r"needs \d+ B of shared memory > \d+", r.notes or "")
        tab.loc[(r.shape, r.tile), r.producer_regs] = "does not fit" + (f" ({m.group(0)})" if m else "")
    return tab.sort_index(), ok, bad


def sweep_spread_line(ok) -> str | None:
    if not len(ok):
        return None
    s = ok.groupby(["shape", "tile"]).tflops.agg(lambda x: 100 * (x.max() / x.min() - 1))
    return "spread over producer_regs, max/min - 1 (%): " + ", ".join(f"{sh} {t}: {v:.1f}" for (sh, t), v in s.items())


def sweep_skipped(ws, plan=None):
    """The configs of the current plan without a record, and whether they fit. Returns (table, line)."""
    plan = plan or ws_plan()
    planned = [(M, N, K, t, r) for (M, N, K) in plan.ws_sweep_shapes for t in plan.ws_sweep_tiles for r in plan.ws_sweep_regs]
    have = {(int(r.M), int(r.N), int(r.K), tuple(json.loads(r.config_key).get(k) for k in TILE_KEYS),
             json.loads(r.config_key).get("producer_regs")) for r in ws.itertuples()}
    skipped = [{"shape": f"{M}x{N}x{K}", "tile": t, "producer_regs": r, "why": gemm_fits(t, r)}
               for (M, N, K, t, r) in planned if (M, N, K, t, r) not in have]
    n_bad = int((~ws.passed.astype(bool)).sum())
    return (pd.DataFrame(skipped), f"{len(planned)} configs in the current plan; {len(have)} recorded; {n_bad} recorded as "
            f"errors; {len(skipped)} without a record")


def sweep_best(ok):
    """Best config per shape vs the default GemmConfig() in the same sweep."""
    if not len(ok):
        return EMPTY
    best = ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape")[["tile", "producer_regs", "tflops"]]
    d0 = P.gemm_config()
    d = ok[(ok.tile == f"{d0.BM}x{d0.BN}x{d0.BK} w{d0.num_warps} s{d0.num_stages}") & (ok.producer_regs == d0.producer_regs)]
    best["default config TFLOP/s (same sweep)"] = d.set_index("shape").tflops.reindex(best.index)
    best["best / default"] = best.tflops / best["default config TFLOP/s (same sweep)"]
    return best


def run_to_run(gm, ok):
    """The same gluon-ws config and shape timed in the GEMM grid's run and in the sweep."""
    if not len(gm) or not len(ok):
        return EMPTY
    keys = TILE_KEYS + ("producer_regs", )
    rr = []
    for r in gm[gm.variant == "gluon-ws"].itertuples():
        c = json.loads(r.config_key)
        m_ = ok[(ok.M == r.M) & (ok.N == r.N) & (ok.K == r.K)]
        m_ = m_[m_.config_key.map(lambda k: all(json.loads(k).get(x) == c.get(x) for x in keys))]
        if len(m_):
            rr.append({"shape": f"{r.M}x{r.N}x{r.K}", "config": tile_of(r.config_key) + f" regs {c.get('producer_regs')}",
                       f"GEMM grid run {r.run_id}": r.tflops, f"ws-sweep run {m_.run_id.iloc[0]}": float(m_.tflops.iloc[0]),
                       "sweep / grid": float(m_.tflops.iloc[0]) / r.tflops})
    return pd.DataFrame(rr).set_index("shape") if rr else EMPTY


def ws_sweep_views(ctx, wsw, gm, stale: str = "flag"):
    """The ws-sweep section: table, spread, configs without a record, best vs default, run to run.
    Returns (outputs, passed records)."""
    if not len(wsw):
        return [nodata(ctx, "the gluon-ws GEMM ws-sweep", stale)], wsw
    tab, ok, bad = sweep_table(wsw)
    skipped, line = sweep_skipped(wsw)
    out = about(wsw, "ws-sweep") + [f"**ws-sweep, run {wsw.run_id.iloc[0]}**: TFLOP/s (columns: producer_regs)", tab,
                                    sweep_spread_line(ok), P.table(skipped), line]
    if len(ok):
        out += ["best config per shape vs the default `GemmConfig()` in the same sweep:", sweep_best(ok).round(3)]
        rr = run_to_run(gm, ok)
        if len(rr):
            out += ["**Run to run**: the same gluon-ws config and shape, timed in two runs:", rr.round(3)]
    return out, ok


def old_ws_sweep_views(use03) -> list:
    """The earlier producer-registers x stages sweep of pattern 3's file (which held configs that do not fit)."""
    old = ws_sweep_records(use03)
    if not len(old):
        return []
    tab, ok, _ = sweep_table(old)
    return about(old, "earlier ws-sweep (pattern 3's file)") + [
        f"**earlier ws-sweep, run {old.run_id.iloc[0]} ({NB3}.jsonl)**: TFLOP/s (columns: producer_regs)", tab, sweep_spread_line(ok)]


# ---- compute-sanitizer: the table, the racecheck accesses mapped to the source, the SASS there ----
def case_text(c) -> str:
    """A sanitizer line's case [op, variant, shape] as 'op variant MxN'."""
    return f"{c[0]} {c[1]} " + "x".join(str(v) for v in c[2].values()) if isinstance(c, list) and len(c) == 3 else c


def sanitizer_table(san):
    if not len(san):
        return EMPTY
    t = san.copy()
    t["output vs float64"] = t["check passed"]
    t["case"] = t["case"].map(case_text)
    cols = ["kernel", "case", "tool", "warp_specialize", "exit_code", "errors/hazards (summary)", "summary", "output vs float64",
            "clean", "seconds"]
    return t[[c for c in cols if c in t]]


def sanitizer_views(san, n_old, path) -> list:
    if not len(san):
        return [f"**No compute-sanitizer records:** `{path}` does not exist, so racecheck and synccheck have not been run "
                "on these kernels (or their output was not committed). Nothing is claimed about races or barrier misuse."]
    return [P.superseded_line(san, n_old, path), sanitizer_table(san)]


ACC = re.compile(r"(Read|Write) access at (\w+)\+(0x[0-9a-f]+) in ([\w./-]+):(\d+)(?: \[(\d+) hazards?\])?")


def diag_source_lines(sz):
    """Lines of the ws-gemm-noinval kernel's file, generated as ci/sanitize.py generates it; (lines, error)."""
    import inspect
    from pathlib import Path
    try:
        return Path(inspect.getsourcefile(sz.ws_gemm_without_invalidate().fn)).read_text().splitlines(), None
    except Exception as e:
        return None, f"(could not regenerate the ws-gemm-noinval file: {type(e).__name__}: {e})"


def race_accesses(san, src_lines, defs, diag_lines):
    """Every access of each racecheck report that is not clean, mapped to the current source line (the
    report's line numbers are shifted by how far the kernel's `def` moved since). Returns (table, tails)
    where tails are the Markdown output tails of those reports."""
    found, tails = [], []
    race = san[(san.tool == "racecheck") & ~san.clean] if len(san) else EMPTY
    for _, r in race.iterrows():
        tail = r.get("tail") or []
        accs = [m for m in (ACC.search(ln) for ln in tail) if m]
        if not accs:
            continue
        first = accs[0]
        kern = first.group(2)
        in_ws = first.group(4).endswith(WS_KERNEL_FILES) and kern in src_lines
        shift = defs.get(kern, 0) - int(first.group(5)) if in_ws else 0
        for j, a in enumerate(accs):
            f, ln = a.group(4), int(a.group(5))
            if f.endswith(WS_KERNEL_FILES) and in_ws:
                base, lines_of = src_lines[kern]
                now, where = ln + shift, f"{base}:{ln + shift} now"
            elif diag_lines is not None:
                now, lines_of, where = ln, diag_lines, f"{f}:{ln} (generated)"
            else:
                now, lines_of, where = 0, [], "?"
            text = lines_of[now - 1].strip() if 0 < now <= len(lines_of) else "?"
            if text.startswith("for ") and now < len(lines_of):  # a loop header: show what it loops over
                text += " -> " + lines_of[now].strip()
            found.append({"kernel": r["kernel"], "role": "first access" if j == 0 else "conflicting access", "access": a.group(1),
                          "offset": f"{a.group(2)}+{a.group(3)}", "reported at": f"{f}:{ln}", "maps to": where,
                          "source line": text, "hazards": int(a.group(6)) if a.group(6) else None})
        tails.append(f"**{r['kernel']} / racecheck** (exit code {r['exit_code']}, {case_text(r['case'])}): sanitizer output tail\n\n```\n"
                     + "\n".join(tail) + "\n```")
    t = pd.DataFrame(found)
    if len(t):
        t["hazards"] = t["hazards"].astype("Int64")
    return t, tails


def race_view(race_tab):
    """race_accesses' table as shown: racecheck counts hazards on the conflicting access, so the first
    access's hazards cell says so."""
    if not len(race_tab):
        return None
    return cm.fill_reasons(race_tab, "counted on the conflicting access", columns=["hazards"])


def sass_view(sass_tab):
    """sass_check's table as shown: an access without an immediate address says so."""
    if not len(sass_tab):
        return None
    return cm.fill_reasons(sass_tab, "no immediate (register address)")


def def_shift_line(race_tab, defs) -> str | None:
    """Where racecheck put each kernel's entry and where its `def` is now."""
    if not len(race_tab):
        return None
    rep = race_tab[(race_tab.role == "first access") & race_tab["reported at"].str.startswith(WS_KERNEL_FILES)]
    return "def lines: " + ", ".join(
        f"{k} reported at line {int(r.split(':')[1])}, now at {defs[k]} (shift {defs[k] - int(r.split(':')[1]):+d})"
        for k, r in zip(rep.offset.str.split("+").str[0], rep["reported at"]) if k in defs)


BAR1 = re.compile(r"BAR\.SYNC\S*\s+0x1\s*;")


def sass_check(race_tab, sz):
    """Compile each sanitized case here (the config its launcher picks) and read the instruction at each
    reported offset, with a few neighbours. Returns (table, {(kernel, offset): context}, errors)."""
    rows, ctx, errors = [], {}, []
    for kern, sub in race_tab.groupby("kernel", sort=False):
        try:
            sp_, cfg_txt = sanitized_spec(kern, sz)
            ins, smem, ptx = sass_of(sp_)
        except Exception as e:
            errors.append(f"{kern}: could not compile for the SASS check: {type(e).__name__}: {e}")
            continue
        at = {int(o, 16): i for i, (o, _) in enumerate(ins)}
        last_word = smem - 4
        ptx_st = len(re.findall(rf"st\.shared\.b32\s+\[global_smem\+{last_word}\]", ptx))
        ptx_ld = len(re.findall(r"ld\.shared\.b8", ptx))
        for _, a in sub.iterrows():
            off = int(a["offset"].split("+")[1], 16)
            i = at.get(off)
            text = ins[i][1] if i is not None else "no instruction at this offset in the CPU compile"
            imm = re.search(r"\+0x([0-9a-f]+)\]", text)
            write = a["access"] == "Write"
            near = (i is not None) and (bool(BAR1.search(ins[i + 1][1])) if write and i + 1 < len(ins)
                                        else any(BAR1.search(t) for _, t in ins[max(0, i - 4):i]))
            rows.append({"kernel": kern, "config compiled here": cfg_txt, "access (racecheck)": a["access"], "offset": a["offset"],
                         "SASS here": text, "kind matches (Read=LDS / Write=STS)": bool(re.match(r"LDS" if not write else r"STS", text)),
                         "immediate address": int(imm.group(1), 16) if imm else None, "kernel smem bytes": smem,
                         "to the last smem word": bool(imm) and int(imm.group(1), 16) == last_word,
                         "BAR.SYNC 0x1 next to it": near,
                         "PTX: st.shared.b32 to that word / ld.shared.b8": f"{ptx_st} / {ptx_ld}"})
            if i is not None:
                ctx[(kern, a["offset"])] = "\n".join(f"/*{o}*/ {t}" for o, t in ins[max(0, i - 4):i + 3])
    return pd.DataFrame(rows), ctx, errors


def sass_contexts(sass_ctx: dict, kernels=("ws-gemm", "ws-norm")) -> list:
    return [f"`{kern}` around `{off}`:\n```\n{c}\n```" for (kern, off), c in sass_ctx.items() if kern in kernels]


def sanitizer_summary(san, race_tab, sass_tab) -> str | None:
    """What the sanitizer lines, the mapped accesses and the SASS check say, computed line by line."""
    if not len(san):
        return None
    sync = san[san.tool == "synccheck"]
    rc = san[san.tool == "racecheck"]
    ws_rc, plain_rc = rc[rc.warp_specialize], rc[~rc.warp_specialize]
    firsts = race_tab[race_tab.role == "first access"] if len(race_tab) else EMPTY
    entry = firsts[firsts["source line"].str.startswith("def ")] if len(firsts) else firsts
    conf = race_tab[race_tab.role == "conflicting access"] if len(race_tab) else EMPTY
    nl = [f"- synccheck: {int(sync.clean.sum())}/{len(sync)} kernels clean (" + ", ".join(sync.kernel) + ").",
          f"- racecheck, kernels without warp_specialize: {int(plain_rc.clean.sum())}/{len(plain_rc)} clean ("
          + ", ".join(plain_rc.kernel) + ").",
          f"- racecheck, warp_specialize kernels: {int((~ws_rc.clean).sum())}/{len(ws_rc)} report hazards ("
          + ", ".join(f"{k}: {n} reported" for k, n in zip(ws_rc.kernel, ws_rc['errors/hazards (summary)'])) + ")."]
    if len(firsts):
        nl.append(f"- In {len(entry)}/{len(firsts)} of them the first access is a **Read at kernel offset "
                  + "/".join(sorted(set(x.split('+')[1] for x in firsts.offset)))
                  + "**, attributed to the kernel's `def` line (kernel entry).")
    for k, sub in (conf.groupby("kernel", sort=False) if len(conf) else []):
        nl.append(f"  - {k}: conflicting writes at " + "; ".join(f"`{s['source line']}` ({s['maps to']}, {s['hazards']} hazards)"
                                                             for _, s in sub.iterrows()))
    if len(sass_tab):
        ok_ = sass_tab["kind matches (Read=LDS / Write=STS)"]
        wr = sass_tab[sass_tab["access (racecheck)"] == "Write"]
        reads = sass_tab[sass_tab["access (racecheck)"] == "Read"]["SASS here"].str.split().str[0].unique()
        nl.append(f"- In the CPU compile of the same kernels and configs, {int(ok_.sum())}/{len(sass_tab)} reported offsets hold a "
                  f"shared-memory access of the reported kind: the reads are `{', '.join(reads)}` (a byte load), the writes "
                  f"`{', '.join(wr['SASS here'].str.split().str[0].unique())}`; {int(wr['to the last smem word'].sum())}/{len(wr)} writes "
                  f"store to the **last 4-byte word of the kernel's shared memory** (past its ring buffers and barriers), and "
                  f"{int(sass_tab['BAR.SYNC 0x1 next to it'].sum())}/{len(sass_tab)} accesses sit next to a `BAR.SYNC 0x1` (writes "
                  "right before one, reads within the four instructions after one). Nothing in the kernel source reads or writes "
                  "that word (the kernel's buffers and barriers lie below it; see the `SYNCS` addresses in the context above): it is "
                  "the state the `warp_specialize` lowering keeps for the worker warps' dispatch (the PTX's "
                  "`st.shared.b32` to it and `ld.shared.b8`, counted above), and the source lines racecheck names are where the "
                  "debug info attributes that lowering code.")
    chk_ok = san["check passed"].eq("passed")
    nl.append(f"- Outputs under the sanitizer matched the float64 reference in {int(chk_ok.sum())}/{len(san)} runs.")
    disp = dispatch_repro()
    d = disp.set_index("variant") if len(disp) else disp
    reproduced = (len(d) and {0, 1} <= set(d.index) and d.loc[0, "racecheck hazards"] == 0
                  and d.loc[1, "racecheck hazards"] == 2 and d.loc[0, "synccheck errors"] == 0
                  and d.loc[1, "synccheck errors"] == 0)
    if reproduced:
        nl.append("- **Explained: a racecheck false positive.** The accesses are the `warp_specialize` dispatch state "
                  "(write → `barrier.sync 1` → read → `barrier.sync 1` → write, all of the CTA's threads), and "
                  "`ci/racecheck_dispatch/dispatch.cu` reproduces the report on the GPU: the protocol alone reads clean, "
                  "one pre-fork partial barrier (`bar.sync 0, 128`, what the mbarrier inits before the fork compile to) "
                  "gives the same two hazards, synccheck is clean in both (table above). No kernel change removes it: "
                  "the workers are parked in the dispatch loop, so no barrier before the fork can span the CTA.")
    else:
        nl.append("- **Unresolved.** The evidence: the hazard appears only in kernels that fork with `gl.warp_specialize`; it "
                  "pairs a read at kernel entry with writes at kernel entry and at the kernel's tail; synccheck is clean and the "
                  "results are correct. Without the dispatch reproduction's log (`ci/racecheck_dispatch/run.sh`) the finding "
                  "is neither declared benign nor a bug.")
    return "\n".join(nl)


# ---- takeaways -----------------------------------------------------------------------------------
def verdict(r: float) -> str:
    """gluon-ws vs gluon-pipelined, geomean r: pays (> 1), on par (>= 0.98), does not pay."""
    return "WS pays" if r > 1.0 else "on par (geomean within 2%)" if r >= WS_VS_PIPE else "WS does not pay here"


def takeaways(*, gm=EMPTY, gemm_tab=EMPTY, gt=EMPTY, ws_ok=EMPTY, targets=None, summary=EMPTY, blocks=EMPTY,
              TL4=None, ws_tl=EMPTY, spread=EMPTY, sw=EMPTY, sweep_eff=EMPTY, heur=EMPTY, norm_cen=EMPTY,
              gemm_cen=EMPTY, san=EMPTY, use=EMPTY) -> list[str]:
    """Each line computed from the records and tables the sections above show (sub-items start with
    two spaces: pipelined.bullets)."""
    targets = targets or {}
    lines = []
    if len(gemm_tab):
        r, rp = gemm_tab["gluon-ws / cuBLAS"], gemm_tab["gluon-ws / gluon-pipelined"]
        sq = P.square_ratio(gemm_tab, "gluon-ws / cuBLAS")
        sq_tf = P.square_ratio(gemm_tab, "gluon-ws")
        lines.append(f"**GEMM: {verdict(plots.geomean(rp))} (vs gluon-pipelined)** (run `{gm.run_id.iloc[0]}`): gluon-ws "
                     + (f"{sq_tf:.0f} TFLOP/s = **{sq:.3f}x cuBLAS at 8192³**, " if sq is not None else "")
                     + f"geomean **{plots.geomean(r):.3f}x** cuBLAS and {plots.geomean(gemm_tab['triton / cuBLAS']):.3f}x "
                     "for Triton's tl.dot; "
                     f"vs gluon-pipelined geomean {plots.geomean(rp):.3f}x, ahead at "
                     + (", ".join(P.shape_str(i) for i in rp[rp >= 1].index) or "no shape")
                     + ", behind at " + (", ".join(f"{P.shape_str(i)} ({v:.3f}x)" for i, v in rp[rp < 1].items()) or "no shape") + ".")
        if len(gt):
            lines.append("  GEMM targets: " + "; ".join(f"{t.get('short', t['target'])}: {t['measured']} ({'met' if t['met'] else 'MISSED'})"
                                                         for _, t in gt.iterrows()) + ".")
    if len(ws_ok):
        sp_ = ws_ok.groupby(["shape", "tile"]).tflops.agg(lambda s: 100 * (s.max() / s.min() - 1))
        lines.append(f"ws-sweep: the producer's register budget moves a (shape, tile) by {sp_.min():.1f}-{sp_.max():.1f}% "
                     f"(median {sp_.median():.1f}%); the tile matters more: best per shape " + ", ".join(
                         f"{sh}: {t.tile} regs {int(t.producer_regs)} {t.tflops:.0f} TFLOP/s" for sh, t in
                         ws_ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape").iterrows()) + ".")
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
    sweep = _sweep(use)  # one table for both lines
    lines.append(pingpong_takeaway(use, sweep))
    lines.append(shape_sweep_takeaway(use, sweep))
    return lines


def _sweep(use):
    """(records, shape_sweep_table) of the newest 'gemm-shapes' run in use (empty frames without one)."""
    st = shape_sweep_records(use) if len(use) else pd.DataFrame()
    return st, (shape_sweep_table(st) if len(st) else pd.DataFrame())


def shape_sweep_takeaway(use, sweep=None) -> str:
    """One line on the newest 'gemm-shapes' run: best Gluon and auto vs cuBLAS, the cells under 0.95x."""
    st, t = sweep if sweep is not None else _sweep(use)
    if not len(t):
        return "GEMM at every shape: the 'gemm-shapes' study has not run on a GPU for the current records."
    r, a = t["best / cuBLAS"], t["auto / cuBLAS"].dropna()
    low = t[r < SHAPE_TARGETS["every cell"]]
    return (f"GEMM at every shape ('gemm-shapes' run `{st.run_id.iloc[0]}`, {len(t)} shapes): the best Gluon config is "
            f"{cm.geomean(r):.3f}x cuBLAS (geomean), the heuristic gluon-ws {cm.geomean(t['ws heuristic / cuBLAS'].dropna()):.3f}x, "
            f"and variant=\"auto\" (Gluon only where its heuristic won by > 2%) {cm.geomean(a):.3f}x; under 0.95x: "
            + (", ".join(f"{m}x{n}x{k} ({v:.3f})" for m, n, k, v in zip(low.M, low.N, low.K, low["best / cuBLAS"])) or "none")
            + ".")


def pingpong_takeaway(use, sweep=None) -> str:
    """One line on the consumer schedules from the newest 'gemm-shapes' run (or that there is none)."""
    st, t = sweep if sweep is not None else _sweep(use)
    if not len(t) or t["ping-pong / cooperative"].isna().all():
        return ("Consumer schedules: cooperative and ping-pong (GemmConfig(pingpong=True)) are both built; "
                "no run of the 'gemm-shapes' study holds ping-pong yet, so nothing is claimed about it.")
    r = t["ping-pong / cooperative"].dropna()
    return (f"Consumer schedules: the best ping-pong gluon-ws config beats the best cooperative one on {int((r > 1).sum())} "
            f"of {len(r)} shapes (geomean {cm.geomean(r):.3f}x, 'gemm-shapes' run `{st.run_id.iloc[0]}`).")


# ---- clusters / TMA multicast on the installed triton: evidence, checked on this CPU ----

def _cluster_probe():
    """A 128 x 64 TMA load into a tile that both CTAs of a 2-CTA cluster share (NVMMASharedLayout
    cga_layout [[0, 0]]: the layout a multicast load would fill) and back out with a TMA store."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

    @gluon.jit
    def cluster_probe(in_desc, out_desc, BM: gl.constexpr, BN: gl.constexpr, BAR_LAYOUT: gl.constexpr):
        pid = gl.program_id(0)
        smem = gl.allocate_shared_memory(in_desc.dtype, [BM, BN], in_desc.layout)
        bar = gl.allocate_shared_memory(gl.int64, [1], BAR_LAYOUT)
        mbarrier.init(bar, count=1)
        mbarrier.expect(bar, in_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(in_desc, [pid * BM, 0], bar, smem)
        mbarrier.wait(bar, 0)
        mbarrier.invalidate(bar)
        fence_async_shared()
        tma.async_copy_shared_to_global(out_desc, [pid * BM, 0], smem)
        tma.store_wait(0)

    return cluster_probe, gl, mbarrier


def cluster_evidence():
    """What the installed triton offers for a 2-CTA cluster schedule, checked rather than asserted:
    the Hopper TMA copy's parameters, 'multicast' in the Gluon Python API, the cluster launch option,
    and a 2-CTA compile of a shared-tile TMA load (its PTX). A table of (check, result)."""
    import inspect
    from pathlib import Path

    import triton
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.experimental.gluon.language.nvidia.hopper import tma

    from .. import codegen
    rows = [("hopper.tma.async_copy_global_to_shared parameters",
             ", ".join(p for p in inspect.signature(tma.async_copy_global_to_shared).parameters if p != "_semantic"))]
    gl_dir = Path(triton.__file__).parent / "experimental" / "gluon"
    hits = [str(f.relative_to(gl_dir)) for f in gl_dir.rglob("*.py") if "multicast" in f.read_text()]
    rows.append(("Gluon Python files mentioning 'multicast'", ", ".join(hits) or "none"))
    rows.append(("cluster launch option", "num_ctas (CUDAOptions)" if "num_ctas" in CUDAOptions.__dataclass_fields__
                 else "none"))
    probe, gl, mbarrier = _cluster_probe()
    lay = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=[[0, 0]])
    sig = {"in_desc": f"tensordesc<bf16[128, 64],{lay!r}>", "out_desc": f"tensordesc<bf16[128, 64],{lay!r}>",
           "BM": "constexpr", "BN": "constexpr", "BAR_LAYOUT": "constexpr"}
    try:
        k = codegen.compile_sm90(probe, sig, {"BM": 128, "BN": 64, "BAR_LAYOUT": mbarrier.MBarrierLayout(cga_layout=[[0]])},
                                 num_warps=4, num_ctas=2)
        ptx = k.asm["ptx"]
        loads = [ln.strip().split(" [")[0].lstrip("@%p0123456789 ") for ln in ptx.splitlines()
                 if "cp.async.bulk.tensor" in ln and "global.mbarrier" in ln]
        rows += [("num_ctas = 2 compile, tile shared by both CTAs", "compiles: " + ", ".join(
                     f"{key} x{ptx.count(key)}" for key in (".reqnctapercluster 2", "%cluster_ctarank", "multicast",
                                                            "mapa", "barrier.cluster"))),
                 ("its TMA load instruction", "; ".join(sorted(set(loads))) or "none")]
    except Exception as e:  # noqa: BLE001 - the evidence is what happened
        rows.append(("num_ctas = 2 compile, tile shared by both CTAs", f"{type(e).__name__}: {str(e).splitlines()[-1:]}"))
    return pd.DataFrame(rows, columns=["check", "result"])


# ---- the warp_specialize entry hazard: a reproduction of Triton's dispatch protocol ----
DISPATCH_VARIANTS = {0: "the dispatch protocol alone (state writes, barrier.sync 1 rounds)",
                     1: "+ one partial barrier (bar.sync 0,128) by the writers before the first state write",
                     2: "+ the partial barrier after the fork instead",
                     3: "+ partial barriers before and after the fork",
                     5: "+ the pre-fork partial barrier on barrier id 2",
                     8: "the dispatch loop on barrier 0 (no partial barrier)",
                     9: "barrier 0 with mixed thread counts (illegal: error 715)"}


def dispatch_repro(path=None):
    """results/<gpu>/racecheck-dispatch.log (ci/racecheck_dispatch/run.sh on the GPU) as a table:
    variant, what it models, racecheck hazards, synccheck errors, exit code. Empty without the log."""
    from pathlib import Path
    p = Path(path) if path else Path(__file__).resolve().parents[2] / "results" / "h200" / "racecheck-dispatch.log"
    if not p.exists():
        return pd.DataFrame()
    rows, cur = {}, None
    for line in p.read_text().splitlines():
        m = re.match(r"== (racecheck|synccheck) v=(\d+)", line)
        if m:
            cur = (m.group(1), int(m.group(2)))
            continue
        if cur is None:
            continue
        r = rows.setdefault(cur[1], {"variant": cur[1], "models": DISPATCH_VARIANTS.get(cur[1], "?")})
        m = re.search(r"RACECHECK SUMMARY: (\d+) hazards?", line)
        if m and cur[0] == "racecheck":
            r["racecheck hazards"] = int(m.group(1))
        m = re.search(r"ERROR SUMMARY: (\d+) error", line)
        if m and cur[0] == "synccheck":
            r["synccheck errors"] = int(m.group(1))
        m = re.match(r"v=\d+ rc=(\d+)", line)
        if m and cur[0] == "racecheck":
            r["exit code"] = int(m.group(1))
    cols = ["variant", "models", "racecheck hazards", "synccheck errors", "exit code"]
    return pd.DataFrame([{c: r.get(c, "—") for c in cols} for r in rows.values()], columns=cols)


# ---- the consumer-schedule timeline (experiments.capture_gemm_timeline) ----

def load_gemm_timeline(ctx: cm.Context):
    """results/<gpu>/04-warp-specialization.gemm-timeline.json, or None."""
    return P.load_timeline(ctx, NB, ".gemm-timeline.json")


def _tiles(cta) -> np.ndarray:
    """One CTA's rows [wg + 1, start, mma_issued, stored] as an array (ns from the run's first stamp)."""
    return np.asarray(cta, dtype=float).reshape(-1, 4)


def gemm_timeline_stats(GT) -> pd.DataFrame:
    """Per shape and schedule: traced CTAs, tiles per CTA, the median mainloop (start -> last MMA
    issued) and epilogue (last MMA -> store issued) per tile, and `mainloop share` = the share of each
    CTA's span (its first start to its last store) covered by at least one warpgroup's mainloop: the
    time the CTA keeps the tensor cores fed (cooperative: the epilogue is a gap; ping-pong: the other
    warpgroup's mainloop fills it)."""
    rows = []
    for shape, by_sched in (GT or {}).get("timelines", {}).items():
        for sched, d in by_sched.items():
            ctas = [_tiles(c) for c in d["ns"] if len(c)]
            if not ctas:
                continue
            main = np.concatenate([c[:, 2] - c[:, 1] for c in ctas])
            epi = np.concatenate([c[:, 3] - c[:, 2] for c in ctas])
            share = []
            for c in ctas:
                iv = sorted(zip(c[:, 1], c[:, 2]))
                covered, cur_s, cur_e = 0.0, *iv[0]
                for s0, e0 in iv[1:]:
                    if s0 > cur_e:
                        covered += cur_e - cur_s
                        cur_s, cur_e = s0, e0
                    else:
                        cur_e = max(cur_e, e0)
                covered += cur_e - cur_s
                span = c[:, 3].max() - c[:, 1].min()
                share.append(covered / span if span > 0 else np.nan)
            rows.append({"shape": shape, "schedule": sched, "CTAs": len(ctas),
                         "tiles / CTA": round(float(np.mean([len(c) for c in ctas])), 1),
                         "mainloop us (median)": round(float(np.median(main)) / 1000, 2),
                         "epilogue us (median)": round(float(np.median(epi)) / 1000, 2),
                         "mainloop share": round(float(np.median(share)), 3),
                         "kernel span us": round(float(max(c[:, 3].max() for c in ctas)
                                                       - min(c[:, 1].min() for c in ctas)) / 1000, 1)})
    return pd.DataFrame(rows)


def gemm_timeline_figure(GT, shape: str | None = None, ctas=(0, 1)):
    """Gantt of the first CTAs under each schedule at one shape: per consumer warpgroup, mainloop
    (start -> last MMA issued, solid) and epilogue (-> store issued, light)."""
    tl = (GT or {}).get("timelines", {})
    if not tl:
        return None
    shape = shape or next(iter(tl))
    scheds = list(tl[shape])
    fig, axes = plt.subplots(len(scheds), 1, figsize=(9, 1.3 + 0.9 * len(scheds) * len(ctas)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, sched in zip(axes, scheds):
        data = [_tiles(c) for c in tl[shape][sched]["ns"] if len(c)]
        y, labels = 0, []
        for ci in ctas:
            if ci >= len(data):
                continue
            c = data[ci]
            for wg in sorted(set(c[:, 0].astype(int))):
                r = c[c[:, 0] == wg]
                ax.broken_barh(list(zip(r[:, 1] / 1000, (r[:, 2] - r[:, 1]) / 1000)), (y, 0.8), color="tab:blue")
                ax.broken_barh(list(zip(r[:, 2] / 1000, (r[:, 3] - r[:, 2]) / 1000)), (y, 0.8), color="tab:orange",
                               alpha=0.6)
                labels.append(f"CTA {ci} WG {wg - 1}")
                y += 1
        ax.set_yticks([i + 0.4 for i in range(len(labels))], labels, fontsize=7)
        ax.set_title(f"{sched} ({shape}): mainloop (blue) / epilogue (orange)", fontsize=9)
    axes[-1].set_xlabel("us from the first stamp")
    fig.tight_layout()
    return fig


# ---- from the shape sweep to a shape-bucketed heuristic ----
WITHIN = 0.02  # a config "holds" a shape when it is within 2% of that shape's best Gluon config


def shape_bucket(M: int, N: int, K: int, sms: int = 132) -> str:
    """The bucket a shape falls in for the GEMM heuristic: M class x how many 128x256 tiles per SM
    (wave count) x long K (K >= 4 max(M, N))."""
    m = "M<=64" if M <= 64 else "M<=256" if M <= 256 else "M<=2048" if M <= 2048 else "M>2048"
    waves = -(-M // 128) * -(-N // 256) / sms
    w = "<1 wave" if waves < 1 else "1-4 waves" if waves < 4 else ">=4 waves"
    return f"{m}, {w}" + (", long K" if K >= 4 * max(M, N) else "")


def bucket_proposal(st):
    """Per bucket of one 'gemm-shapes' run: the config that holds (within WITHIN of the best Gluon
    config) on the most of its shapes, on how many, its worst ratio to the best there, and its geomean
    vs cuBLAS on those shapes: the data a shape-bucketed GemmConfig.heuristic is written from."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, _ = labelled(ok)
    rows = []
    per_shape = {}
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        peer, gl_ = g[g.variant == GEMM_PEER], g[g.variant != GEMM_PEER]
        if not len(peer) or not len(gl_):
            continue
        best = gl_.ms_median.min()
        per_shape[(int(M), int(N), int(K))] = (float(peer_time(peer)[0].ms_median), best,
                                               gl_.groupby("label").ms_median.min().to_dict())
    buckets = {}
    for shape, v in per_shape.items():
        buckets.setdefault(shape_bucket(*shape), []).append((shape, v))
    for b, items in sorted(buckets.items()):
        labels = {lab for _, (_, _, by) in items for lab in by if not lab.endswith("heuristic")}  # not circular
        def holds(lab):
            return [s for s, (_, best, by) in items if lab in by and by[lab] <= best * (1 + WITHIN)]
        pick = max(sorted(labels), key=lambda lab: (len(holds(lab)), -max((by[lab] / best for _, (_, best, by) in items
                                                                           if lab in by), default=9)))
        ratios = [best / by[pick] for _, (_, best, by) in items if pick in by]
        vs_cublas = [peer / by[pick] for _, (peer, _, by) in items if pick in by]
        rows.append({"bucket": b, "shapes": len(items), "candidate": pick, "holds on": len(holds(pick)),
                     "worst vs best gluon": round(min(ratios), 3) if ratios else np.nan,
                     "candidate / cuBLAS geomean": round(cm.geomean(vs_cublas), 3) if vs_cublas else np.nan})
    return pd.DataFrame(rows)


# ---- the GEMM probe (ci/gemm_probe.py's log): misaligned rows and decode swap-AB x split-K ----
PROBE_LINE = re.compile(r"^(align|decode|split|order|skprobe)\s+(\d+)x(\d+)\s*x(\d+)\s+(contig|pad|pad-[abc]+)\s+(.+?)\s+([\d.]+) us\s+"
                        r"(\d+) TF/s (\d+|None) MHz")
PROMOTION = re.compile(r"^== promotion (\w+)$")
PHASE_LINE = re.compile(r"^phases\s+(\d+)x(\d+)\s*x(\d+)\s+(.+?)\s+total\s+([\d.]+) us : (.+)$")
SKTRACE_LINE = re.compile(r"^sktrace\s+(\d+)x(\d+)\s*x(\d+)\s+(data-parallel|stream-K \d)\s+(\d+)x(\d+) (\d+)w CTAs\s+(\d+) \| "
                          r"ns per k-step: whole tiles\s+([\d-]+) pieces\s+([\d-]+) \| epilogue ns: whole\s+([\d-]+) "
                          r"partial\s+([\d-]+) \| unit gap\s+([\d-]+) \| span\s+([\d.]+) us$")
KERNEL_LINE = re.compile(r"^kernel\s+(\d+)x(\d+)\s*x(\d+)\s+(contig|pad)\s+cuBLAS: (.+)$")


def _probe_path(path, name):
    from pathlib import Path
    return Path(path) if path else Path(__file__).resolve().parents[2] / "results" / "h200" / name


def probe_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe.log (ci/gemm_probe.py on the GPU; gemm-probe-split.log for its 'split' part) as
    rows: part, M, N, K, layout ('contig' = row strides K*2 / N*2 bytes; 'pad' = the same shape over row
    strides padded to 64 elements; 'pad-a' / 'pad-b' / 'pad-c' / 'pad-ab': only those operands padded),
    config, us, TFLOP/s (recomputed from the shape and us), SM MHz, and the TMA descriptors' L2 promotion
    the timing ran under ('L2_128B', triton's, unless a '== promotion X' line said otherwise: the probe
    re-ran with triton's driver.c patched). A line that does not parse is an error naming the file and
    line (the log is data, not prose); 'kernel' / 'phases' lines are other tables' (cublas_kernels, phase_records)."""
    p = _probe_path(path, "gemm-probe.log")
    if not p.exists():
        return pd.DataFrame()
    rows, promotion = [], "L2_128B"
    for i, line in enumerate(p.read_text().splitlines(), 1):
        pm = PROMOTION.match(line)
        if pm:
            promotion = pm.group(1)
            continue
        if not line.startswith(("align ", "decode ", "split ", "order ", "skprobe ")):
            continue
        if " FAILED " in line:  # gemm_probe.py prints a config that raised as a line of its own: not a timing
            continue
        m = PROBE_LINE.match(line)
        if not m:
            raise ValueError(f"{p}:{i}: not a gemm_probe.py timing line: {line[:120]!r}")
        part, M, N, K, layout, cfg, us, tf, mhz = m.groups()
        M, N, K, us = int(M), int(N), int(K), float(us)
        tflops = 2 * M * N * K / us / 1e6
        if abs(tflops - int(tf)) > 1.0 + tflops * 0.05 / us:  # us is printed to 0.1, TF/s to 1
            raise ValueError(f"{p}:{i}: {tf} TF/s does not match {M}x{N}x{K} in {us} us ({tflops:.1f})")
        rows.append({"part": part, "M": M, "N": N, "K": K, "layout": layout, "config": cfg.strip(), "us": us,
                     "TFLOP/s": round(tflops), "SM MHz": None if mhz == "None" else int(mhz), "promotion": promotion})
    return pd.DataFrame(rows)


def order_table(pr, part: str = "order") -> pd.DataFrame:
    """The probe's interleaved-round parts ('order': gemm-probe-order.log, 'skprobe': gemm-probe-skprobe.log): per
    shape and config, cuBLAS time / config time in each round (cuBLAS timed in the same round), their median /
    min / max, and the median us. The ratios are recomputed from the timing lines (the log's own '...sum'
    lines are not read)."""
    d = pr[pr.part == part] if len(pr) else pr
    if not len(d):
        return pd.DataFrame()
    parts = d.config.str.extract(r"^(.+) round (\d+)$")
    if parts.isna().any().any():
        raise ValueError(f"order lines must name their round: {d.config[parts[0].isna()].iloc[0]!r}")
    d = d.assign(base=parts[0], round=parts[1].astype(int))
    rows = []
    for (M, N, K), g in d.groupby(["M", "N", "K"]):
        cb = g[g.base == "cuBLAS"].set_index("round").us
        for base, h in g[g.base != "cuBLAS"].groupby("base", sort=False):
            r = (cb / h.set_index("round").us).dropna()
            rows.append({"M": int(M), "N": int(N), "K": int(K), "config": base, "rounds": len(r),
                         "median us": float(h.us.median()), "cuBLAS / it: median": round(float(r.median()), 3),
                         "min": round(float(r.min()), 3), "max": round(float(r.max()), 3)})
    return pd.DataFrame(rows)


def same_config_spread(st) -> pd.DataFrame:
    """The sweep's noise floor: where a variant's heuristic case resolved to the same config as one of the
    explicit cases, the two are one kernel timed twice in the run: heuristic time / explicit time per such
    pair (1.0 = no noise). The best-of-many 'best / cuBLAS' column leans upward by about this spread."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    cfgs = ok["config_key"].map(json.loads)
    drop = {"study", "sm_clock_mhz", "heuristic", "bracket"}
    key = [json.dumps({k: v for k, v in c.items() if k not in drop}, sort_keys=True) for c in cfgs]
    t = ok.assign(_key=key, _heur=[bool(c.get("heuristic")) for c in cfgs])
    rows = []
    for (M, N, K, v, k), g in t[t.variant != GEMM_PEER].groupby(["M", "N", "K", "variant", "_key"]):
        h, e = g[g._heur], g[~g._heur]
        if len(h) and len(e):
            rows.append({"M": int(M), "N": int(N), "K": int(K), "variant": v,
                         "heuristic / explicit": round(float(h.ms_median.iloc[0] / e.ms_median.iloc[0]), 3)})
    return pd.DataFrame(rows)


def operand_split_table(pr) -> pd.DataFrame:
    """The probe's 'split' part: per ragged shape and config (Gluon / cuBLAS) and L2 promotion, us with every
    operand's rows misaligned ('contig') and contig / us with only A, B, C or A and B padded (> 1: padding
    that operand recovers that much; 'pad' = all three)."""
    d = pr[pr.part == "split"] if len(pr) else pr
    if not len(d):
        return pd.DataFrame()
    piv = d.pivot_table(index=["M", "N", "K", "config", "promotion"], columns="layout", values="us", aggfunc="min")
    t = pd.DataFrame(index=piv.index)
    t["contig us"] = piv["contig"]
    for lay in ("pad-a", "pad-b", "pad-c", "pad-ab", "pad"):
        if lay in piv:
            t[f"contig / {lay}"] = (piv["contig"] / piv[lay]).round(2)
    return t.reset_index()


def _log_lines(p, prefix: str, pattern, what: str):
    """(line number, match groups) of every line of the probe log p that starts with prefix; such a line that
    does not match pattern is an error naming the file and line."""
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if line.startswith(prefix):
            m = pattern.match(line)
            if not m:
                raise ValueError(f"{p}:{i}: not a gemm_probe.py {what} line: {line[:120]!r}")
            yield i, m.groups()


def cublas_kernels(path=None) -> pd.DataFrame:
    """The probe's 'kernels' part (gemm-probe-split.log): the kernel torch.matmul launched per ragged shape."""
    p = _probe_path(path, "gemm-probe-split.log")
    if not p.exists():
        return pd.DataFrame()
    return pd.DataFrame([{"M": int(M), "N": int(N), "K": int(K), "layout": layout, "cuBLAS kernel": names.strip()}
                         for _, (M, N, K, layout, names) in _log_lines(p, "kernel", KERNEL_LINE, "kernel")])


def phase_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe-phases.log (ci/gemm_probe.py phases): per shape and config, the GPU time of
    each kernel a call launched (torch.profiler, mean of 20 calls): the GEMM and its fixup / reduce apart.
    The printed total must equal the sum of its kernels (to the printed 0.1 us each), else file:line."""
    p = _probe_path(path, "gemm-probe-phases.log")
    if not p.exists():
        return pd.DataFrame()
    rows = []
    for i, (M, N, K, cfg, total, parts) in _log_lines(p, "phases", PHASE_LINE, "phases"):
        kern = {}
        for part in parts.split(" | "):
            km = re.match(r"^(.+) ([\d.]+) us$", part.strip())
            if not km:
                raise ValueError(f"{p}:{i}: not a 'kernel T us' part: {part[:80]!r}")
            kern[km.group(1)] = float(km.group(2))
        if abs(sum(kern.values()) - float(total)) > 0.05 * len(kern) + 0.05:
            raise ValueError(f"{p}:{i}: total {total} us is not the sum of its kernels {kern}")
        gemm_us = next((v for k, v in kern.items() if "reduce" not in k.lower()), np.nan)
        fix = sum(v for k, v in kern.items() if "reduce" in k.lower())
        rows.append({"M": int(M), "N": int(N), "K": int(K), "config": cfg.strip(), "total us": float(total),
                     "GEMM kernel us": gemm_us, "reduce / fixup us": fix if fix else np.nan,
                     "kernels": " + ".join(k.split("(")[0][:32] for k in kern)})
    return pd.DataFrame(rows)


def sktrace_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe-sktrace.log (ci/gemm_probe.py sktrace: the INSTRUMENT build's per-unit stamps,
    medians over every CTA): per shape and schedule, ns per k-step of whole tiles and of stream-K pieces,
    the epilogue of whole tiles and of partial pieces, the gap between units and the kernel span ('-' in
    the log = none of that kind: NaN). A line that does not parse is an error naming file:line."""
    p = _probe_path(path, "gemm-probe-sktrace.log")
    if not p.exists():
        return pd.DataFrame()
    num = lambda v: np.nan if v == "-" else float(v)  # noqa: E731
    rows = []
    for _, (M, N, K, sched, bm, bn, nw, ctas, kw, kp, ew, ep, gap, span) in _log_lines(p, "sktrace", SKTRACE_LINE,
                                                                                      "sktrace"):
        rows.append({"M": int(M), "N": int(N), "K": int(K), "schedule": sched, "tile": f"{bm}x{bn} {nw}w",
                     "CTAs": int(ctas), "ns / k-step, whole tiles": num(kw), "ns / k-step, pieces": num(kp),
                     "epilogue ns, whole": num(ew), "epilogue ns, partial": num(ep), "unit gap ns": num(gap),
                     "kernel span us": float(span)})
    return pd.DataFrame(rows)


def stream_k_table(st) -> pd.DataFrame:
    """Per shape of a 'gemm-shapes' run that has stream-K cases: the best gluon-ws config without stream-K,
    the best with it, without / with (> 1: stream-K faster) and each one's ratio to the bracketed cuBLAS."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(sk=[int(c.get("stream_k") or 0) for c in cfgs])
    rows = []
    for (M, N, K), g_all in ok.groupby(["M", "N", "K"]):
        g, torch_rows = g_all[g_all.variant == "gluon-ws"], g_all[g_all.variant == GEMM_PEER]
        sk, dp = g[g.sk > 0], g[g.sk == 0]
        if not len(sk) or not len(dp) or not len(torch_rows):
            continue
        b_sk, b_dp = sk.loc[sk.ms_median.idxmin()], dp.loc[dp.ms_median.idxmin()]
        peer = float(peer_time(torch_rows)[0].ms_median)
        rows.append({"M": int(M), "N": int(N), "K": int(K), "best without stream-K": b_dp.label,
                     "its / cuBLAS": round(peer / b_dp.ms_median, 3), "best stream-K": b_sk.label,
                     "stream-K / cuBLAS": round(peer / b_sk.ms_median, 3),
                     "without / stream-K": round(b_dp.ms_median / b_sk.ms_median, 3)})
    return pd.DataFrame(rows)


def alignment_table(pr) -> pd.DataFrame:
    """Per ragged shape and config of the probe: us with the contiguous (misaligned) rows, with rows padded
    to 128 bytes, and contig / pad (> 1: the misaligned rows cost that much), cuBLAS beside."""
    a = pr[pr.part == "align"] if len(pr) else pr
    if not len(a):
        return pd.DataFrame()
    piv = a.pivot_table(index=["M", "N", "K", "config"], columns="layout", values="us", aggfunc="min")
    piv = piv.dropna(subset=["pad"]) if "pad" in piv else piv.iloc[0:0]
    if not len(piv):
        return pd.DataFrame()
    t = piv.reset_index().rename(columns={"contig": "contig us", "pad": "padded-rows us"})
    t["contig / padded"] = (t["contig us"] / t["padded-rows us"]).round(2)
    return t


def decode_probe_table(pr) -> pd.DataFrame:
    """Per decode shape of the probe: cuBLAS, the best unsplit and the best split-K Gluon config, their ratios."""
    d = pr[pr.part == "decode"] if len(pr) else pr
    rows = []
    for (M, N, K), g in (d.groupby(["M", "N", "K"]) if len(d) else []):
        cb = g[g.config == "cuBLAS"].us.min()
        gl_ = g[g.config != "cuBLAS"]
        split = gl_[gl_.config.str.contains("split-K") & ~gl_.config.str.endswith("split-K 1")]
        whole = gl_[~gl_.index.isin(split.index)]
        bs = split.loc[split.us.idxmin()] if len(split) else None
        bw = whole.loc[whole.us.idxmin()] if len(whole) else None
        rows.append({"M": M, "N": N, "K": K, "cuBLAS us": cb,
                     "best unsplit": bw.config if bw is not None else np.nan,
                     "unsplit / cuBLAS": round(cb / bw.us, 3) if bw is not None else np.nan,
                     "best split-K": bs.config if bs is not None else np.nan,
                     "split / cuBLAS": round(cb / bs.us, 3) if bs is not None else np.nan})
    return pd.DataFrame(rows)


def ws_vs_pipe_table(st, max_k: int = 2048) -> pd.DataFrame:
    """The GEMM issue's 'gluon-ws >= gluon-pipelined where the epilogue matters (small K)': per shape of a
    'gemm-shapes' run with K <= max_k, the heuristics' ratio and the best configs' ratio (pipelined time /
    ws time: >= 1 means gluon-ws is at least as fast)."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, _ = labelled(ok)
    rows = []
    for (M, N, K), g in ok[ok.K <= max_k].groupby(["M", "N", "K"]):
        ws, pp = g[g.variant == "gluon-ws"], g[g.variant == "gluon-pipelined"]
        if not len(ws) or not len(pp):
            continue
        hw, hp = ws[ws.label.str.endswith("heuristic")], pp[pp.label.str.endswith("heuristic")]
        rows.append({"M": int(M), "N": int(N), "K": int(K),
                     "heuristic: pipe / ws": round(hp.ms_median.min() / hw.ms_median.min(), 3) if len(hw) and len(hp) else np.nan,
                     "best: pipe / ws": round(pp.ms_median.min() / ws.ms_median.min(), 3),
                     "best ws": ws.loc[ws.ms_median.idxmin()].label, "best pipe": pp.loc[pp.ms_median.idxmin()].label})
    return pd.DataFrame(rows)


def cp_vs_tma_table(st) -> pd.DataFrame:
    """Per shape of a 'gemm-shapes' run that has cp.async cases (rows not 128-byte aligned): the best gluon-ws
    config reading with TMA, the best reading with the cp.async producer, TMA time / cp.async time (> 1: the
    cp.async producer is faster) and each one's ratio to cuBLAS."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(cp=[bool(c.get("cp_async")) for c in cfgs])
    rows = []
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        ws = g[g.variant == "gluon-ws"]
        cp, tma = ws[ws.cp], ws[~ws.cp]
        peer = g[g.variant == GEMM_PEER]
        if not len(cp) or not len(tma) or not len(peer):
            continue
        p, _ = peer_time(peer)
        bc, bt = cp.loc[cp.ms_median.idxmin()], tma.loc[tma.ms_median.idxmin()]
        rows.append({"M": int(M), "N": int(N), "K": int(K), "best TMA": bt.label, "best cp.async": bc.label,
                     "TMA / cp.async": round(bt.ms_median / bc.ms_median, 3),
                     "TMA / cuBLAS": round(p.ms_median / bt.ms_median, 3), "cp.async / cuBLAS": round(p.ms_median / bc.ms_median, 3)})
    return pd.DataFrame(rows)
