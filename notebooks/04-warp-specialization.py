# ---
# jupyter:
#   gluon_lab:
#     pattern: Warp specialization
#     summary: 'gl.warp_specialize: 1-warp TMA producer (setmaxnreg) + consumer partition,
#       EMPTY/FULL barriers; norms and a cooperative WS GEMM; per-partition timeline;
#       compute-sanitizer'
#   jupytext:
#     notebook_metadata_filter: gluon_lab,kernelspec,language_info,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # 04 — Warp specialization
#
# Pattern 3's ring (notebook 03) is run by **one** instruction stream: every warp of the CTA issues the
# refill of a slot, then waits for its own data, then computes. Whoever issues the copy is also the one
# who stalls on it, and the refill of block `i + NUM_STAGES − 1` is issued only when the CTA gets round
# to it between two blocks of math.
#
# `gl.warp_specialize` splits the CTA into **partitions**, each its own instruction stream with its own
# warps and its own register budget:
#
# * a **producer** worker partition: **1 warp**, with a small register budget (`setmaxnreg`, the
#   `PRODUCER_REGS` knob). It only computes coordinates, waits for a ring slot to be **EMPTY**, expects the
#   bytes on the slot's **FULL** barrier and issues the TMA boxes. It never touches the data.
# * the **consumer** default partition: the kernel's `num_warps` warps (a multiple of 4). It waits **FULL**,
#   computes from shared memory (a norm: reduce, normalize, store; the GEMM: async `wgmma`), and arrives on
#   **EMPTY** to hand the slot back.
#
# Two barriers per slot (count 1 each), over the partition's running block / k-step counter `i`:
# `slot = i % S`, `phase = (i // S) & 1`; the producer waits `EMPTY[slot]` for parity `phase ^ 1` (a fresh
# barrier counts as having completed phase "1", so the first lap passes at once), the consumer waits
# `FULL[slot]` for parity `phase`. What the compiler did implicitly in a plain Triton kernel (one stream,
# `num_stages` software pipelining) is explicit here: who waits on what, and how many registers each
# role gets. Every buffer and barrier is allocated (and the norm's weight loaded) **before the fork**.
#
# This notebook shows the code, the measured per-partition timeline, the codegen evidence
# (`setmaxnreg` per partition, barrier waits, wgmma), and the measurements: the norms, where the producer
# warp has little to hide, and the GEMM, where the consumer warpgroups keep the tensor cores busy.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = "../results" # where records are appended (measure) and read (replay)
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
parts = ["norms", "gemm", "norm-sweep", "ws-sweep", "timeline"]  # measure mode: parts of the plan
stale = "flag"             # "flag": show records whose kernel source changed since, marked STALE; "drop": leave them out

# %%
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

import gluon_lab as gll
from gluon_lab import codegen, device, notebook as nbk, plots
from gluon_lab.experiments import WarpSpecializedPlan
from gluon_lab.kernels import gemm, pipelined
from gluon_lab.kernels import warp_specialized as W

pd.set_option("display.width", 220)
pd.set_option("display.max_columns", 40)
pd.set_option("display.max_rows", 200)
pd.set_option("display.max_colwidth", 160)
run_mode = nbk.resolve_mode(mode)
slug = nbk.gpu_slug(gpu, run_mode)
spec = device.DATASHEET.get(slug)
NB = "04-warp-specialization"
NB3 = "03-multibuffer-pipelining"   # pattern 3's records: the GEMM comparison and the pipelined timeline
PLAN = WarpSpecializedPlan()
BIG = 64 * 2**20                    # M*N (elements) from which the reference is max(per-shape copy, session copy)
WS_VS_PIPE = 0.98                   # issue target: gluon-ws within 2% of gluon-pipelined, or better, in every cell
BASELINES = ("torch", "inductor", "inductor-max-autotune", "triton", "liger")
NORM_ORDER = BASELINES + ("gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws")
print(f"mode={run_mode}  gpu={slug}  stale records: {stale}")

# %% [markdown]
# ## 0. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_ws` is the plan; `python -m gluon_lab bench 04-warp-specialization --parts ...`
# runs the same function in a batch on the lent H200. Every run measures its own ceilings first (a 2 GiB
# device copy and an 8192³ bf16 `torch.matmul`). Each section picks the **newest run that holds its data**
# and names it. This notebook also reads pattern 3's file (`03-multibuffer-pipelining.jsonl`): the GEMM
# comparison of all four GEMMs side by side was measured there, and its pipelined timeline is the
# single-stream reference for section 2. Records whose kernel source changed since they were measured are
# **STALE**: shown and marked with `stale="flag"`, left out with `stale="drop"`.

# %%
if run_mode == "measure":
    from gluon_lab.experiments import run_ws
    _, where = run_ws(results_dir=results_dir, quick=quick, parts=tuple(parts))
    print("appended", where)
allrec = nbk.load(results_dir, slug, NB, newest_only=False)
rec03 = nbk.load(results_dir, slug, NB3, newest_only=False)
for name, df in ((NB, allrec), (NB3, rec03)):
    display(Markdown(f"**`{name}.jsonl`** runs:"))
    display(nbk.provenance_table(df))
    note = nbk.missing_note(df, f"{name} on {slug}")
    if note:
        display(Markdown(note))
    st_tab = nbk.stale_table(df)
    if len(st_tab):
        display(Markdown(f"**Stale records in `{name}.jsonl`** (kernel source changed since the run):"))
        display(st_tab)


def keep(df):
    return df if stale == "flag" else df[~df["stale"].astype(bool)]


use, use03 = keep(allrec), keep(rec03)
study = nbk.config_value(use, "study")
study03 = nbk.config_value(use03, "study")


def B(s):
    # NA-safe boolean mask (shape columns are nullable integers)
    return pd.Series(s).fillna(False).astype(bool)


def pick(df, mask, require=()):
    # the newest run holding this section's records (and every variant in require), one run only
    return nbk.newest_run(df, B(mask), require=require).copy()


def about(g, what):
    display(Markdown(nbk.section_line(g, what, with_files=True)))
    n = nbk.stale_note(g, what)
    if n:
        display(Markdown(n))


def nodata(what):
    display(Markdown(f"**No records for {what}** in `{results_dir}/{slug}/`"
                     + (" (stale records dropped: `stale='drop'`)" if stale == "drop" else "") + "."))


# %% [markdown]
# ## 1. The pattern in code
#
# ### The norm: `ws_norm_kernel` = pattern 3's ring, split in two
#
# The parent allocates the ring (`NUM_STAGES × NUM_CHUNKS` boxes of `[R, CHUNK]`), the EMPTY and FULL
# barriers, loads the weight (and bias) once, and forks. The producer (`_wsn_producer`, 1 warp) walks this
# CTA's row blocks `pid, pid + grid, …` and for each one waits EMPTY, then `_load_block` (pattern 3's helper:
# one `expect` with every box's bytes, then the boxes). The consumer (`_wsn_consumer`, `num_warps` warps)
# walks the same blocks, waits FULL, computes from shared memory exactly as pattern 3 does, stores with
# 128-bit `st.global`, and arrives on EMPTY once every read of the slot is done. Both partitions run the
# same loop bounds (they must agree on the trip count of the protocol). The `INSTRUMENT` build adds
# `%globaltimer` stamps in **both** partitions (section 2).

# %% tags=["show-code"]
for f in (W._wsn_producer, W._wsn_consumer, W.ws_norm_kernel):
    print(inspect.getsource(f.fn))

# %% [markdown]
# The knobs: the ring (rows per slot, depth, CTAs per SM) comes from pattern 3's heuristic, the consumer gets
# at least one warpgroup (4 warps), the ring is one stage deeper than pattern 3's (from the norm-sweep of
# section 5), and `producer_regs` is the producer's `setmaxnreg` budget. A 1-warp producer still occupies a
# whole warpgroup of the register file (`threads() = 32 × (num_warps + 4)`).

# %% tags=["show-code"]
print(inspect.getsource(W.WsNormConfig))

# %% [markdown]
# ### The GEMM: `ws_gemm_kernel`
#
# The producer walks this CTA's output tiles (persistent, GROUP_M-grouped order) and their k-steps with a
# global k-step counter `g`, waits EMPTY and issues the A `[BM, BK]` and B `[BK, BN]` boxes. The consumer is
# **8 warps = two warpgroups cooperating on one 128×256 tile**: the accumulator layout puts the warps along M
# (`warps_per_cta=[num_warps, 1]`), so each warpgroup owns 64 rows of the same tile. It waits FULL, issues
# an async `wgmma`, and after `warpgroup_mma_wait(1)` (the MMA of step g−1 has retired) arrives on EMPTY for
# the previous slot. Epilogue: accumulator → shared memory → **TMA store**; the store of tile t is waited for
# only when tile t+1's epilogue needs the buffer, so it overlaps the next main loop.

# %% tags=["show-code"]
for f in (W._ws_producer, W._ws_consumer, W.ws_gemm_kernel):
    print(inspect.getsource(f.fn))

# %% [markdown]
# ### The protocol, lap by lap (computed from the formulas in the source, NUM_STAGES = 3)

# %%
S = 3
proto = pd.DataFrame([{"block / k-step i": i, "slot = i % S": i % S, "lap = i // S": i // S,
                       "producer waits EMPTY[slot], parity": ((i // S) & 1) ^ 1,
                       "consumer waits FULL[slot], parity": (i // S) & 1,
                       "the producer's wait returns when": ("at once (fresh barrier, parity 1 counts as completed)" if i < S
                                                            else f"the consumer arrived on EMPTY after block {i - S}")}
                      for i in range(2 * S + 2)]).set_index("block / k-step i")
proto


# %% [markdown]
# ## 2. The partitions, measured: per-partition timeline, NUM_STAGES = 1 vs 3
#
# An `INSTRUMENT` build of `gluon-ws` RMSNorm (M = N = 8192, bf16) writes five `%globaltimer` stamps per row
# block, for **every CTA** of the grid: the producer **before its EMPTY wait** and when its copies are
# **issued**; the consumer **before its FULL wait**, when the data is **ready**, and when its stores are
# **issued**. These are **measured on the GPU** (`experiments.capture_ws_timeline`, the second of two
# launches), not simulated; ns relative to the earliest stamp of the launch.
#
# * producer `issued − before EMPTY wait`: time the producer waits for a free slot (plus issuing the boxes);
# * **run-ahead** = consumer `before FULL wait − producer issued`: how long before the consumer asks for a
#   block its copy was already issued (negative: the consumer is waiting before the copy even left);
# * consumer `ready − before FULL wait`: the consumer's **stall** on its data; `stored − ready`: its work;
# * **blocks ahead**: how many blocks (this one included) the producer had issued but the consumer had not
#   yet started waiting for, at the moment the consumer starts waiting.

# %%
def load_tl(name):
    p = Path(results_dir) / slug / f"{name}.timeline.json"
    return (json.loads(p.read_text()) if p.exists() else None), p


TL4, tl4_path = load_tl(NB)
TL3, tl3_path = load_tl(NB3)
F4 = ["producer_before_empty_wait", "producer_issued", "consumer_before_full_wait", "consumer_ready", "consumer_stored"]


def tl_blocks(TL, st, k):
    return [np.asarray(c, dtype=float).reshape(-1, k) for c in TL["timelines"][str(st)]["ns"] if len(c)]


def tl_provenance(TL, path, recs):
    run = recs[recs.run_id == TL["run_id"]]
    commit = ", ".join(sorted(run.git_commit.dropna().unique())) or "?"
    stamps = np.concatenate([np.asarray(c, dtype=np.int64).ravel() for t in TL["timelines"].values() for c in t["ns"] if len(c)])
    gran = int(np.gcd.reduce(stamps[stamps > 0])) if (stamps > 0).any() else 0
    return (f"`{path.name}`: MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` (records of that run: "
            f"{len(run)}, git commit {commit}; the timeline file carries no kernel-source hash, so it cannot be checked "
            f"for staleness), RMSNorm {TL['dtype']} M={TL['M']} N={TL['N']}; stamps are multiples of {gran} ns.")


ws_tl = pd.DataFrame()
if TL4 is None:
    nodata(f"the measured gluon-ws timeline ({tl4_path.name} is missing)")
else:
    display(Markdown(tl_provenance(TL4, tl4_path, allrec)))
    fields = TL4.get("fields", F4)
    ix = {f: fields.index(f) for f in F4}
    K4 = len(fields)
    rows = []
    for st in sorted(TL4["timelines"], key=int):
        bs = tl_blocks(TL4, st, K4)
        if not bs:
            continue
        P0, P1, C0, C1, C2 = (np.concatenate([b[:, ix[f]] for b in bs]) for f in F4)
        ahead = np.concatenate([np.searchsorted(np.sort(b[:, ix["producer_issued"]]), b[:, ix["consumer_before_full_wait"]],
                                                side="right") - np.arange(len(b)) for b in bs])
        period = np.concatenate([np.diff(b[:, ix["consumer_before_full_wait"]]) for b in bs])
        frac = np.median([(b[:, ix["consumer_ready"]] - b[:, ix["consumer_before_full_wait"]]).sum()
                          / (b[-1, ix["consumer_stored"]] - b[0, ix["consumer_before_full_wait"]]) for b in bs])
        cfg = TL4["timelines"][st]["config"]
        rows.append({"NUM_STAGES": int(st), "config": ", ".join(f"{k}={v}" for k, v in cfg.items()), "CTAs traced": len(bs),
                     "blocks per CTA": f"{min(map(len, bs))}-{max(map(len, bs))}",
                     "producer EMPTY wait + issue, median (ns)": np.median(P1 - P0),
                     "run-ahead, median (ns)": np.median(C0 - P1), "run-ahead < 0 (% of blocks)": 100 * np.mean(C0 - P1 < 0),
                     "blocks ahead, median": np.median(ahead), "blocks ahead, max": int(ahead.max()),
                     "consumer FULL stall, median (ns)": np.median(C1 - C0), "consumer work, median (ns)": np.median(C2 - C1),
                     "block period, median (ns)": np.median(period), "consumer stalled (median over CTAs) %": 100 * frac})
    ws_tl = pd.DataFrame(rows).set_index("NUM_STAGES")
    display(ws_tl.round(1))
if TL3 is not None:
    display(Markdown(tl_provenance(TL3, tl3_path, rec03)))
    rows = []
    for st in sorted(TL3["timelines"], key=int):
        bs = tl_blocks(TL3, st, 3)
        if bs:
            b = np.concatenate(bs)
            rows.append({"NUM_STAGES": int(st), "stall, median (ns)": np.median(b[:, 1] - b[:, 0]),
                         "compute + store, median (ns)": np.median(b[:, 2] - b[:, 1]),
                         "block period, median (ns)": np.median(np.concatenate([np.diff(x[:, 0]) for x in bs]))})
    pipe_tl = pd.DataFrame(rows).set_index("NUM_STAGES")
    display(Markdown("For comparison, pattern 3's single-stream `gluon-pipelined` timeline (same M, N; 3 stamps per block):"))
    display(pipe_tl.round(1))
else:
    pipe_tl = pd.DataFrame()
    nodata(f"pattern 3's timeline ({tl3_path.name} is missing)")

# %%
if TL4 is not None and len(ws_tl):
    def gantt(ax, st, ctas=(0, 1, 2), xmax_us=None):
        bs = tl_blocks(TL4, st, K4)
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
    sts = list(ws_tl.index)
    zoom = 10 * ws_tl["block period, median (ns)"].max() / 1e3
    fig, axes = plt.subplots(len(sts), 1, figsize=(13, 2.4 * len(sts)), sharex=True, squeeze=False)
    for ax, st in zip(axes[:, 0], sts):
        gantt(ax, st, xmax_us=zoom)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    axes[-1, 0].set_xlabel("time since the first stamp of the launch (us)")
    fig.suptitle(f"MEASURED (%globaltimer, run {TL4['run_id']}): gluon-ws RMSNorm M={TL4['M']} N={TL4['N']}, first 3 CTAs, "
                 f"first {zoom:.1f} us (10 of the slower configuration's block periods)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1)); plt.show()
    fig, axes = plt.subplots(1, len(sts), figsize=(13, 3), squeeze=False)
    for ax, st in zip(axes[0], sts):
        bs = tl_blocks(TL4, st, K4)
        ra = np.concatenate([b[:, ix["consumer_before_full_wait"]] - b[:, ix["producer_issued"]] for b in bs]) / 1e3
        sl = np.concatenate([b[:, ix["consumer_ready"]] - b[:, ix["consumer_before_full_wait"]] for b in bs]) / 1e3
        ax.hist(ra, bins=60, alpha=0.6, label="run-ahead (us)")
        ax.hist(sl, bins=60, alpha=0.6, label="consumer FULL stall (us)")
        ax.set_yscale("log"); ax.set_title(f"NUM_STAGES={st}: every block of every CTA", fontsize=9); ax.legend(fontsize=7)
        ax.set_xlabel("us"); ax.set_ylabel("blocks")
        ax.grid(alpha=0.3)
    fig.tight_layout(); plt.show()
    a, b = ws_tl.iloc[0], ws_tl.iloc[-1]
    print(f"NUM_STAGES {ws_tl.index[0]} -> {ws_tl.index[-1]}: run-ahead {a['run-ahead, median (ns)']:.0f} -> "
          f"{b['run-ahead, median (ns)']:.0f} ns, blocks ahead {a['blocks ahead, median']:.0f} -> {b['blocks ahead, median']:.0f}, "
          f"consumer stall {a['consumer FULL stall, median (ns)']:.0f} -> {b['consumer FULL stall, median (ns)']:.0f} ns, "
          f"period {a['block period, median (ns)']:.0f} -> {b['block period, median (ns)']:.0f} ns "
          f"({a['block period, median (ns)'] / b['block period, median (ns)']:.2f}x)")
    if len(pipe_tl) and ws_tl.index[-1] in pipe_tl.index:
        st = ws_tl.index[-1]
        print(f"NUM_STAGES={st}, gluon-ws vs gluon-pipelined (same M, N, same ring): consumer stall "
              f"{b['consumer FULL stall, median (ns)']:.0f} vs {pipe_tl.loc[st, 'stall, median (ns)']:.0f} ns, work "
              f"{b['consumer work, median (ns)']:.0f} vs {pipe_tl.loc[st, 'compute + store, median (ns)']:.0f} ns, period "
              f"{b['block period, median (ns)']:.0f} vs {pipe_tl.loc[st, 'block period, median (ns)']:.0f} ns")

# %% [markdown]
# ### Every CTA: when does each one finish?
#
# The norm kernels of patterns 3 and 4 are **persistent**: about one CTA per SM, and CTA `p` takes row
# blocks `p, p + grid, p + 2·grid, …` — a **static round-robin** schedule fixed at launch. The launch lasts
# as long as its **slowest** CTA. The table uses all traced CTAs of both timelines: per-CTA finish = its last
# stamp; `tail` = slowest finish vs the median; `block-count imbalance` is what the round-robin split alone
# explains (some CTAs get one block more); `per-CTA pace` is each CTA's median block period.

# %%
spread = pd.DataFrame()
sources = []  # (label, timeline, stamps per block, column of the consumer's wait)
if TL3 is not None:
    sources.append(("gluon-pipelined (03)", TL3, 3, 0))
if TL4 is not None:
    sources.append(("gluon-ws (04)", TL4, K4, ix["consumer_before_full_wait"]))
fin = {}
rows = []
for label, TL, k, wait_col in sources:
    item = 2 if TL["dtype"] in ("bfloat16", "float16") else 4
    for st in sorted(TL["timelines"], key=int):
        bs = tl_blocks(TL, st, k)
        if not bs:
            continue
        ends = np.array([b.max() for b in bs])
        t0 = min(b.min() for b in bs)
        nb = np.array([len(b) for b in bs])
        pace = np.array([np.median(np.diff(b[:, wait_col])) for b in bs])
        fin[(label, int(st))] = (ends, nb, pace)
        moved = TL["M"] * TL["N"] * item * 2  # read x + write y
        rows.append({"kernel": label, "NUM_STAGES": int(st), "CTAs": len(bs), "blocks per CTA": f"{nb.min()}-{nb.max()}",
                     "finish min (us)": ends.min() / 1e3, "finish median (us)": np.median(ends) / 1e3,
                     "finish max (us)": ends.max() / 1e3,
                     "tail: max / median - 1 (%)": 100 * (ends.max() / np.median(ends) - 1),
                     "block-count imbalance (%)": 100 * (nb.max() / nb.min() - 1),
                     "per-CTA pace min / median / max (ns)": f"{pace.min():.0f} / {np.median(pace):.0f} / {pace.max():.0f}",
                     "whole-grid GB/s from stamps": moved / (ends.max() - t0),
                     "GB/s if the CTA time were spread evenly": moved / (ends.mean() - t0)})
if rows:
    spread = pd.DataFrame(rows).set_index(["kernel", "NUM_STAGES"])
    display(spread.round(1))
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.4))
    for (label, st), (ends, nb, pace) in fin.items():
        o = np.argsort(ends)
        axes[0].plot(np.arange(len(ends)), ends[o] / 1e3, ".-", ms=3, label=f"{label}, NUM_STAGES={st}")
        if st == max(s for _, s in fin):
            axes[1].scatter(np.arange(len(ends)), ends / 1e3, s=9, label=f"{label}, NUM_STAGES={st}")
    axes[0].set_xlabel("CTAs, sorted by finish"); axes[0].set_ylabel("last stamp (us)"); axes[0].legend(fontsize=7)
    axes[1].set_xlabel("CTA id (program_id)"); axes[1].set_ylabel("last stamp (us)"); axes[1].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("MEASURED per-CTA finish times, every CTA of the launch (%globaltimer)", fontsize=10)
    fig.tight_layout(); plt.show()
else:
    nodata("per-CTA finish times (no timeline file)")


# %% [markdown]
# The tail, next to the timed records of the same cell. A one-row-per-CTA kernel (`gluon-tma`) launches one
# CTA per row block (thousands of CTAs); the **hardware block scheduler** hands the next CTA to whichever SM
# frees up, so an SM that runs slower simply takes fewer rows. A persistent grid cannot rebalance: its split
# is fixed at launch. `whole-grid GB/s from stamps` covers only first-stamp → last-store-issued (no launch,
# no weight load before the first stamp, no drain of the last stores), so it is an upper bound for the
# launch, not a substitute for the timed records.

# %%
def timed_same_config(df, variant, M, N, cfg):
    keys = [k for k in ("num_warps", "rows", "num_stages", "ctas_per_sm", "producer_regs") if k in cfg]
    m = (df.op == "rms_norm") & (df.variant == variant) & B(df.M == M) & B(df.N == N) & df.passed.astype(bool)
    sub = df[m]
    for k in keys:
        sub = sub[nbk.config_value(sub, k) == cfg[k]]
    return sub.sort_values("timestamp").tail(1)


grid_run = pick(use, (use.op == "rms_norm") & study.isna() & use.N.notna(), require=("gluon-ws", "gluon-pipelined"))
if len(spread) and TL4 is not None:
    chk = []
    for (label, st), r in spread.iterrows():
        TL, df, var = (TL4, use, "gluon-ws") if label.startswith("gluon-ws") else (TL3, pd.concat([use03, use], ignore_index=True), "gluon-pipelined")
        cfg = TL["timelines"][str(st)]["config"]
        rec = timed_same_config(df, var, TL["M"], TL["N"], cfg)
        chk.append({"kernel": label, "NUM_STAGES": st,
                    "timed GB/s, same config": round(float(rec.gbps.iloc[0])) if len(rec) else None,
                    "timed record": (f"run {rec.run_id.iloc[0]}" + (" STALE" if rec.stale.iloc[0] else "")
                                     + (f", study {nbk.config_value(rec, 'study').iloc[0]}" if nbk.config_value(rec, 'study').iloc[0] else ""))
                                    if len(rec) else "no timed record with this exact config",
                    "stamps / timed": r["whole-grid GB/s from stamps"] / float(rec.gbps.iloc[0]) if len(rec) else None})
    chk = pd.DataFrame(chk).set_index(["kernel", "NUM_STAGES"])
    display(chk.round(3))
    if len(grid_run):
        cell = grid_run[B(grid_run.M == TL4["M"]) & B(grid_run.N == TL4["N"])]
        gb = cell.groupby("variant").gbps.first()
        cfgs = cell.groupby("variant").config_key.first()
        if {"gluon-tma", "gluon-pipelined", "gluon-ws"} <= set(gb.index):
            st_hi = max(s for _, s in spread.index)
            tails = {lab: spread.loc[(lab, st_hi), "tail: max / median - 1 (%)"] for lab, s in spread.index if s == st_hi}
            even = {lab: spread.loc[(lab, st_hi), "GB/s if the CTA time were spread evenly"] / spread.loc[(lab, st_hi), "whole-grid GB/s from stamps"]
                    for lab, s in spread.index if s == st_hi}
            grid_of = {"gluon-pipelined (03)": "gluon-pipelined", "gluon-ws (04)": "gluon-ws"}
            parts_ = []
            for lab in tails:
                v = grid_of[lab]
                gap = gb["gluon-tma"] / gb[v] - 1
                gain = even[lab] - 1
                tl_st = TL4["timelines"][str(st_hi)]["config"]["num_stages"] if v == "gluon-ws" else TL3["timelines"][str(st_hi)]["config"]["num_stages"]
                rec_st = json.loads(cfgs[v]).get("num_stages")
                parts_.append(f"{v}: gluon-tma is **{100 * gap:.1f}%** faster in the timed grid; an even spread would be worth "
                              f"**{100 * gain:.1f}%** — " + ("as much as the whole gap" if gain >= gap else f"about {100 * gain / gap:.0f}% of the gap")
                              + (f" (the timed {v} record ran NUM_STAGES={rec_st}, the timeline {tl_st}: not the same config)" if rec_st != tl_st else ""))
            display(Markdown(
                f"**At M = N = {TL4['M']}** (rms_norm, norms grid run `{grid_run.run_id.iloc[0]}`): gluon-tma "
                f"**{gb['gluon-tma']:.0f} GB/s**, gluon-pipelined **{gb['gluon-pipelined']:.0f}**, gluon-ws **{gb['gluon-ws']:.0f}**. "
                f"In the timelines at NUM_STAGES={st_hi} the slowest CTA finishes "
                + " and ".join(f"{v:.1f}% ({k})" for k, v in tails.items()) + " after the median CTA, while the round-robin block-count "
                "imbalance explains only " + ", ".join(f"{spread.loc[(k, st_hi), 'block-count imbalance (%)']:.1f}%" for k in tails)
                + ": most of the tail is per-CTA **pace** (pace column), which a static split cannot rebalance. If the same CTA time "
                "were spread evenly over the CTAs, the stamped GB/s would rise by "
                + " and ".join(f"{100 * (v - 1):.1f}% ({k})" for k, v in even.items()) + ".\n\n"
                + "\n".join(f"- {x}" for x in parts_)
                + f"\n\nConfigs of the timed records: gluon-tma `{cfgs['gluon-tma']}`, gluon-pipelined `{cfgs['gluon-pipelined']}`, "
                f"gluon-ws `{cfgs['gluon-ws']}`."))
    for (label, st), r in chk.iterrows():
        if r["stamps / timed"] and r["stamps / timed"] > 1.05:
            print(f"{label} NUM_STAGES={st}: the stamped span implies {r['stamps / timed']:.2f}x the timed GB/s of the same config: "
                  "the timed launch includes what the stamps leave out (launch, weight load, store drain, exit), and the "
                  "timeline and the timed record come from different runs.")


# %% [markdown]
# ## 3. Codegen census on sm_90 (compiled on this CPU)
#
# Static counts from the PTX / SASS (lines, not executed instructions) of the **current source**, next to the
# pattern 3 counterparts with the same shapes. `setmaxnreg` values are read from the PTX and assigned to
# partitions by how the warp-specialize lowering uses them: the default (consumer) warps raise their budget
# for the parent code and lower it to the consumer budget when the partition starts (the first two
# `setmaxnreg` in PTX order); the producer runs at `PRODUCER_REGS`; the worker warpgroup's warps park at
# another budget between partitions. The register file
# check multiplies each budget by its warps (the producer warp's whole warpgroup counts).

# %%
def setmaxnreg_roles(ptx, producer_regs):
    # PTX order of the lowering: the default warps' entry (parent code), then the default warps' switch to the
    # consumer partition at the fork; PRODUCER_REGS is the producer's; the worker warps park at the smallest
    # other budget set after the fork
    seq = [(d, int(v)) for d, v in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx)]
    if len(seq) < 2:
        return {}, seq
    parent, consumer = seq[0][1], seq[1][1]
    vals = {v for _, v in seq}
    roles = {"default warps, parent code": parent, "consumer (in partition)": consumer,
             "producer": producer_regs if producer_regs in vals else None,
             "worker warps parked": min((v for _, v in seq[2:] if v != producer_regs), default=None)}
    return roles, seq


def census_row(what, variant, cfg_txt, spec_, consumer_warps=None, producer_regs=None):
    k = codegen.compile_sm90(**spec_)
    c = codegen.census(k)
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
    t = pd.DataFrame(rows).set_index(["kernel", "variant"]) if rows else pd.DataFrame()
    for c in INTS:
        if c in t:
            t[c] = pd.to_numeric(t[c], errors="coerce").astype("Int64")
    return t


def wscfg(c):
    return f"warps={c.num_warps} rows={c.rows} stages={c.num_stages} ctas/SM={c.ctas_per_sm} producer_regs={c.producer_regs}"


def pipecfg(c):
    return f"warps={c.num_warps} rows={c.rows} stages={c.num_stages} ctas/SM={c.ctas_per_sm}"


CEN_M = 16384
norm_cases = [("rms_norm", 4096), ("rms_norm", 5120), ("rms_norm", 8192), ("layer_norm", 8192), ("add_rms_norm", 8192)]
crow = []
for op, N in norm_cases:
    what = f"{op} N={N} (M={CEN_M})"
    try:
        cw = W.WsNormConfig.heuristic(op, N, "bfloat16", CEN_M)
        crow.append(census_row(what, "gluon-ws", wscfg(cw), W.norm_codegen_spec(op, N, "bfloat16", cw), cw.num_warps, cw.producer_regs))
    except Exception as e:  # a config the current source refuses: say so, do not invent a row
        print(f"{what} gluon-ws: {type(e).__name__}: {e}")
    try:
        cp = pipelined.PipeConfig.heuristic(op, N, "bfloat16", CEN_M)
        crow.append(census_row(what, "gluon-pipelined", pipecfg(cp), pipelined.codegen_spec(op, N, "bfloat16", cp)))
    except Exception as e:
        print(f"{what} gluon-pipelined: {type(e).__name__}: {e}")
norm_census = as_table(crow)
display(norm_census)


# %%
def gcfg(c):
    return f"{c.BM}x{c.BN}x{c.BK} stages={c.num_stages} warps={c.num_warps}"


grow = []
for what, cfg in (("GEMM default", gemm.GemmConfig()), ("GEMM BN=128, 4 warps", gemm.GemmConfig(BN=128, num_stages=4, num_warps=4))):
    try:
        grow.append(census_row(what, "gluon-ws", gcfg(cfg) + f" producer_regs={cfg.producer_regs}", W.codegen_spec(cfg, "bfloat16"),
                               cfg.num_warps, cfg.producer_regs))
    except Exception as e:
        print(f"{what} gluon-ws: {type(e).__name__}: {e}")
    try:
        grow.append(census_row(what, "gluon-pipelined", gcfg(cfg), gemm.codegen_spec(cfg, "bfloat16")))
    except Exception as e:
        print(f"{what} gluon-pipelined: {type(e).__name__}: {e}")
gemm_census = as_table(grow)
display(gemm_census)

# %%
lines = []
for name, cen in (("norm", norm_census), ("GEMM", gemm_census)):
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
    try:
        pp = cen.xs("gluon-pipelined", level="variant")
        both = ws.index.intersection(pp.index)
        if len(both):
            d = (ws.loc[both, "mbarrier waits"] - pp.loc[both, "mbarrier waits"])
            lines.append(f"- {name}: wait sites gluon-ws minus gluon-pipelined: " + ", ".join(f"{k}: {v:+d}" for k, v in d.items())
                         + " (one EMPTY wait in the producer per ring; FULL in the consumer replaces pattern 3's slot wait).")
    except KeyError:
        pass
display(Markdown("\n".join(lines) if lines else "**No census rows** (compile failed above)."))


# %% [markdown]
# ## 4. The norms: gluon-ws vs gluon-pipelined vs gluon-tma vs the baselines (bf16, one run)
#
# M ∈ {256 … 32768} × N ∈ {4096, 5120, 8192, 16384}, RMSNorm and LayerNorm, plus add+RMSNorm at M = 16384.
# The reference of each cell is the copy of the same (M, N) timed the same way in the same run; where
# M·N ≥ 64 Mi elements it is **max(per-shape copy, the run's 2 GiB session copy)**: at the largest tensors the
# graph-timed per-shape `copy_` falls far below the session copy while the norms move their bytes faster
# (printed below; notebook 03, section 4, shows the evidence). `% of ceiling` = GB/s ÷ that reference.

# %%
def ceiling_table(df, run):
    return nbk.copy_reference_table(df, run, BIG)


grids, ceil_tab = {}, pd.DataFrame()
for op in ("rms_norm", "layer_norm", "add_rms_norm"):
    g = pick(use, (use.op == op) & (use.dtype == "bfloat16") & study.isna() & use.N.notna() & (use.pattern != "ceiling"),
             require=("gluon-ws", "gluon-pipelined"))
    if not len(g):
        nodata(f"the {op} bf16 grid"); continue
    about(g, f"{op} bf16 grid")
    ct, ce = ceiling_table(use, g.run_id.iloc[0])
    g = g.join(ct[["reference GB/s", "reference"]], on=["M", "N"])
    g["pct_ceiling"] = 100 * g.gbps / g["reference GB/s"]
    grids[op] = g
    ceil_tab = ct
if grids:
    run0 = grids[next(iter(grids))].run_id.iloc[0]
    _, ce = ceiling_table(use, run0)
    if ce:
        print(f"run {run0}: session copy {ce['copy_gbps']:.0f} GB/s ({ce['copy_bytes'] / 2**30:.0f} GiB moved, {ce['copy_timer']}), "
              f"bf16 matmul {ce['matmul_tflops']:.0f} TFLOP/s ({ce['matmul_shape']}, {ce['matmul_timer']})")
    display(ceil_tab.sort_index().round(1))
    low = ceil_tab[ceil_tab["per-shape copy GB/s"] < 0.9 * ceil_tab["session copy GB/s"]]
    low = low[[m * n >= BIG for m, n in low.index]]
    if len(low):
        fastest = pd.concat(grids.values()).groupby(["M", "N"]).gbps.max().reindex(low.index)
        print("M*N >= 64 Mi cells where the per-shape copy is < 90% of the session copy: "
              + ", ".join(f"{m}x{n} ({t:.0f} MiB per tensor): copy {c:.0f} GB/s, fastest norm {f:.0f} GB/s"
                          for (m, n), c, t, f in zip(low.index, low["per-shape copy GB/s"], low["tensor MiB"], fastest)))


# %% [markdown]
# ### Headline: gluon-ws vs gluon-pipelined, cell by cell
#
# Left and middle: % of the copy ceiling. Right: speed ratio gluon-ws / gluon-pipelined, centred on 1; a cell
# marked ✗ misses the target (≥ 0.98, i.e. within 2% or better).

# %% tags=["headline"]
def ratio_map(ax, t, col, title, lo=0.75, hi=1.25, target=WS_VS_PIPE):
    Ms = sorted(t.index.get_level_values("M").unique()); Ns = sorted(t.index.get_level_values("N").unique())
    grid = np.full((len(Ms), len(Ns)), np.nan)
    for (m, n), v in t[col].items():
        grid[Ms.index(m), Ns.index(n)] = v
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn", vmin=lo, vmax=hi, aspect="auto")
    ax.set_facecolor("#eeeeee")
    for i in range(len(Ms)):
        for j in range(len(Ns)):
            v = grid[i, j]
            ax.text(j, i, "missing" if np.isnan(v) else f"{v:.3f}" + ("" if v >= target else " ✗"), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(Ns)), [str(n) for n in Ns]); ax.set_yticks(range(len(Ms)), [str(m) for m in Ms])
    ax.set_xlabel("N"); ax.set_ylabel("M"); ax.set_title(title, fontsize=10)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


def ws_vs(g):
    piv = g[g.passed.astype(bool)].pivot_table(index=["M", "N"], columns="variant", values="gbps")
    return piv


heat = {op: g for op, g in grids.items() if op != "add_rms_norm"}
if heat:
    fig, axes = plt.subplots(len(heat), 3, figsize=(15, 3.6 * len(heat)), squeeze=False)
    for row, (op, g) in zip(axes, heat.items()):
        piv = ws_vs(g)
        pc = g.pivot_table(index=["M", "N"], columns="variant", values="pct_ceiling")
        t = pd.DataFrame({"ws": pc["gluon-ws"], "pipe": pc["gluon-pipelined"], "ratio": piv["gluon-ws"] / piv["gluon-pipelined"]})
        plots.sol_heatmap(t.reset_index(), value="ws", ax=row[0], vmax=110, title=f"{op}: gluon-ws, % of ceiling")
        plots.sol_heatmap(t.reset_index(), value="pipe", ax=row[1], vmax=110, title=f"{op}: gluon-pipelined, % of ceiling")
        ratio_map(row[2], t, "ratio", f"{op}: gluon-ws / gluon-pipelined (speed)")
    g0 = next(iter(heat.values()))
    fig.suptitle(f"bf16 norms on {slug}, run {g0.run_id.iloc[0]}, timer {'/'.join(sorted(g0.timer.unique()))}"
                 + (" — STALE gluon-ws records" if g0[g0.variant == 'gluon-ws'].stale.any() else ""), fontsize=10)
    fig.tight_layout(); plt.show()
else:
    nodata("the headline (no rms_norm / layer_norm grid)")

# %%
for op, g in heat.items():
    vs = [v for v in NORM_ORDER if v in set(g.variant)]
    for group, title in (([v for v in vs if v in BASELINES], "baselines"), ([v for v in vs if v not in BASELINES], "Gluon kernels")):
        if group:
            plots.sol_heatmaps(g, group, value="pct_ceiling", vmax=110,
                               suptitle=f"{op} bf16, {title}, run {g.run_id.iloc[0]}: % of the copy ceiling")
            plt.show()
    display(Markdown(f"**{op}: gluon-pipelined -> gluon-ws** (% of ceiling, speed change)"))
    display(plots.delta_table(g, "gluon-pipelined", "gluon-ws", metric="pct_ceiling"))


# %% [markdown]
# ### Target: gluon-ws within 2% of gluon-pipelined, or better, in every cell
#
# `met` is strict (ratio ≥ 0.98); `wins` counts cells where gluon-ws is faster (ratio > 1). `row blocks per CTA`
# comes from the recorded gluon-ws config (rows per slot, CTAs per SM) and the run's SM count: with few
# blocks per CTA there is little for a producer running ahead to hide, while the fork, the extra barriers
# and the producer's warpgroup are paid in full.

# %%
def target_cells(op, g):
    piv = ws_vs(g)
    if not {"gluon-ws", "gluon-pipelined"} <= set(piv):
        return pd.DataFrame()
    ws = g[g.variant == "gluon-ws"].set_index(["M", "N"])
    sms = ws.sm_count.fillna(spec.sm_count if spec else 132).astype(int).to_numpy(dtype=np.int64)
    rows_ = np.asarray(nbk.config_value(ws.reset_index(), "rows", 1).values, dtype=np.int64)
    ctas = np.asarray(nbk.config_value(ws.reset_index(), "ctas_per_sm", 1).values, dtype=np.int64)
    Ms = ws.index.get_level_values("M").to_numpy(dtype=np.int64)
    nblk = -(-Ms // rows_)
    per_cta = pd.Series(nblk / np.minimum(nblk, ctas * sms), index=ws.index)
    base = [v for v in BASELINES if v in piv]
    t = pd.DataFrame({"gluon-ws GB/s": piv["gluon-ws"], "gluon-pipelined GB/s": piv["gluon-pipelined"],
                      "ws / pipelined": piv["gluon-ws"] / piv["gluon-pipelined"],
                      "ws / gluon-tma": piv["gluon-ws"] / piv["gluon-tma"] if "gluon-tma" in piv else np.nan,
                      "ws / best baseline": piv["gluon-ws"] / piv[base].max(axis=1) if base else np.nan,
                      "best baseline": piv[base].idxmax(axis=1) if base else None,
                      "ws % of ceiling": ws.pct_ceiling.reindex(piv.index), "row blocks per CTA": per_cta.reindex(piv.index),
                      "ws config (stages, warps, rows, ctas/SM)": [tuple(json.loads(c).get(k) for k in ("num_stages", "num_warps", "rows", "ctas_per_sm"))
                                                                   for c in ws.config_key.reindex(piv.index)],
                      "stale": ws.stale.reindex(piv.index)})
    t["met: >= 0.98x gluon-pipelined"] = np.where(t["ws / pipelined"] >= WS_VS_PIPE, "met", "MISSED")
    return t


targets, summary = {}, []
for op, g in grids.items():
    t = target_cells(op, g)
    if not len(t):
        nodata(f"gluon-ws and gluon-pipelined side by side in the {op} grid"); continue
    targets[op] = t
    display(Markdown(f"**{op} bf16** (run `{g.run_id.iloc[0]}`)" + (" — STALE gluon-ws records" if t.stale.any() else "")))
    display(t.round(3))
    r = t["ws / pipelined"]
    worst = r.idxmin()
    summary.append({"op": op, "cells met (>= 0.98x)": f"{int((r >= WS_VS_PIPE).sum())}/{len(r)}", "wins (> 1.0x)": int((r > 1).sum()),
                    "geomean ws / pipelined": plots.geomean(r), "worst": f"{r.min():.3f}x at (M, N) = ({int(worst[0])}, {int(worst[1])})",
                    "best": f"{r.max():.3f}x at (M, N) = ({int(r.idxmax()[0])}, {int(r.idxmax()[1])})",
                    "all met": bool((r >= WS_VS_PIPE).all()), "stale records": int(t.stale.sum())})
norm_summary = pd.DataFrame(summary)
if len(norm_summary):
    display(Markdown("**Summary: gluon-ws vs gluon-pipelined**"))
    display(norm_summary.round(3))
    allt = pd.concat(targets.values(), keys=targets.keys(), names=["op"])
    bins = pd.cut(allt["row blocks per CTA"], [0, 2, 8, 32, np.inf], labels=["<= 2", "2-8", "8-32", "> 32"])
    by_blocks = allt.groupby(bins, observed=True)["ws / pipelined"].agg(cells="size", geomean=plots.geomean, min="min", max="max")
    display(Markdown("**gluon-ws / gluon-pipelined by row blocks per CTA** (all ops):"))
    display(by_blocks.round(3))

# %% [markdown]
# ## 5. The norm-sweep: producer registers × consumer warps × ring depth
#
# `gluon-ws` RMSNorm and LayerNorm over five shapes, every combination of `producer_regs` ∈ {24, 40, 56},
# consumer `num_warps` ∈ {4, 8} and `num_stages` ∈ {2, 3, 4} (the other knobs from the heuristic of that time;
# combinations that do not fit were not planned). GB/s.

# %%
sw = pick(use, (study == "norm-sweep") & (use.variant == "gluon-ws"))
sweep_eff = pd.DataFrame()
if not len(sw):
    nodata("the gluon-ws norm-sweep")
else:
    about(sw, "norm-sweep")
    for k in ("producer_regs", "num_warps", "num_stages", "rows", "ctas_per_sm"):
        sw[k] = nbk.config_value(sw, k)
    ok = sw[sw.passed.astype(bool)]
    full = ok.pivot_table(index=["op", "M", "N"], columns=["num_stages", "num_warps", "producer_regs"], values="gbps").round(0)
    display(Markdown("**Every config** (columns: stages / consumer warps / producer_regs):"))
    display(full)
    best = ok.groupby(["op", "M", "N"]).gbps.max()
    eff = []
    for knob in ("num_stages", "num_warps", "producer_regs"):
        m = ok.pivot_table(index=["op", "M", "N"], columns=knob, values="gbps", aggfunc="max")
        display(Markdown(f"**Best GB/s per `{knob}`** (max over the other knobs):"))
        display(m.round(0))
        for v in m.columns:
            eff.append({"knob": knob, "value": v, "geomean best-at-value / best overall": plots.geomean(m[v] / best),
                        "worst cell": (m[v] / best).min()})
    sweep_eff = pd.DataFrame(eff).set_index(["knob", "value"])
    display(Markdown("**How much each knob value costs** (1.0 = as good as the best config of the shape):"))
    display(sweep_eff.round(3))
    hv = []
    for (op, M, N), sub in ok.groupby(["op", "M", "N"]):
        b = sub.loc[sub.gbps.idxmax()]
        try:
            h = W.WsNormConfig.heuristic(op, int(N), "bfloat16", int(M))
            hs = sub[(sub.num_stages == h.num_stages) & (sub.num_warps == h.num_warps) & (sub.producer_regs == h.producer_regs)
                     & (sub.rows == h.rows) & (sub.ctas_per_sm == h.ctas_per_sm)]
            hk, hg = (h.num_stages, h.num_warps, h.producer_regs, h.rows, h.ctas_per_sm), (float(hs.gbps.max()) if len(hs) else np.nan)
        except Exception as e:
            hk, hg = f"{type(e).__name__}", np.nan
        gr = grids.get(op)
        gws = gr[(gr.variant == "gluon-ws") & B(gr.M == M) & B(gr.N == N)] if gr is not None else pd.DataFrame()
        hv.append({"op": op, "M": int(M), "N": int(N),
                   "best (stages, warps, regs, rows, ctas/SM)": (int(b.num_stages), int(b.num_warps), int(b.producer_regs), int(b.rows), int(b.ctas_per_sm)),
                   "best GB/s": round(b.gbps), "heuristic now": hk, "heuristic GB/s in the sweep": hg,
                   "heuristic / best": hg / b.gbps if hg == hg else np.nan,
                   "gluon-ws GB/s in the norms grid (later run)": round(float(gws.gbps.iloc[0])) if len(gws) else None})
    heur_tab = pd.DataFrame(hv).set_index(["op", "M", "N"])
    display(Markdown("**Best config per shape vs what the current heuristic picks** (`nan`: the heuristic's config was not in the sweep):"))
    display(heur_tab.round(3))

# %% [markdown]
# ## 6. The GEMM: gluon-ws vs gluon-pipelined vs cuBLAS vs Triton (bf16)
#
# The four GEMMs were measured **side by side in one run** by pattern 3's `gemm` part, so this section reads
# `03-multibuffer-pipelining.jsonl` (and this notebook's own file, should its `gemm` part have run later):
# the newest run holding all four variants. Older runs in the 03 file hold an older gluon-pipelined GEMM
# (before its load-indexing fix) and are not mixed in. `torch` = `torch.matmul` (cuBLAS), `triton` = the
# persistent `tl.dot` kernel. TFLOP/s = 2·M·N·K / time.

# %%
GEMM4 = ("torch", "triton", "gluon-pipelined", "gluon-ws")
mm = pd.concat([use[(use.op == "matmul") & study.isna() & (use.pattern != "ceiling")],
                use03[(use03.op == "matmul") & study03.isna() & (use03.pattern != "ceiling")]], ignore_index=True)
gm = pick(mm, mm.op == "matmul", require=GEMM4) if len(mm) else mm
gemm_tab, gt = pd.DataFrame(), pd.DataFrame()
if not len(gm) or not set(GEMM4) <= set(gm.variant):
    nodata("a GEMM run with all of " + ", ".join(GEMM4))
else:
    about(gm, "GEMM grid")
    older = sorted(set(mm.run_id) - {gm.run_id.iloc[0]})
    if older:
        print("other GEMM runs not used here:", ", ".join(older))
    piv = gm[gm.passed.astype(bool)].pivot_table(index=["M", "N", "K"], columns="variant", values="tflops")
    gemm_tab = piv[list(GEMM4)].round(1)
    for v in GEMM4[1:]:
        gemm_tab[f"{v} / cuBLAS"] = (piv[v] / piv["torch"]).round(3)
    gemm_tab["gluon-ws / gluon-pipelined"] = (piv["gluon-ws"] / piv["gluon-pipelined"]).round(3)
    display(gemm_tab)
    geo = {c: plots.geomean(gemm_tab[c]) for c in gemm_tab.columns if "/" in c}
    display(Markdown("geomean over the shapes: " + ", ".join(f"{k} **{v:.3f}**" for k, v in geo.items())))
    gce = nbk.ceilings(pd.concat([use, use03], ignore_index=True).query("run_id == @gm.run_id.iloc[0]"))
    if gce:
        over = gm[gm.tflops > gce["matmul_tflops"]]
        print(f"run {gm.run_id.iloc[0]}: its own cuBLAS ceiling ({gce['matmul_shape']}, {gce['matmul_timer']}) = {gce['matmul_tflops']:.0f} TFLOP/s")
        for r in over.sort_values("tflops", ascending=False).itertuples():
            if r.tflops > 1.05 * gce["matmul_tflops"]:
                print(f"  note: {r.variant} {r.M}x{r.N}x{r.K} reached {r.tflops:.0f} TFLOP/s, {100 * (r.tflops / gce['matmul_tflops'] - 1):.0f}% above "
                      "that ceiling (different shape and timer; not investigated here)")
    gg = gm[gm.variant.str.startswith("gluon")]
    display(Markdown("configs the gluon records ran with:"))
    display(gg.pivot_table(index=["M", "N", "K"], columns="variant", values="config_key", aggfunc="first"))
    plots.speedup_bars(gm[gm.passed.astype(bool)], "torch", [v for v in GEMM4 if v != "torch"], by=("M", "N", "K"),
                       title=f"bf16 GEMM vs cuBLAS, run {gm.run_id.iloc[0]} (timer {'/'.join(sorted(gm.timer.unique()))})")
    plt.show()

# %% [markdown]
# ### GEMM targets
#
# gluon-ws ≥ 1.0× cuBLAS at 8192³ (moonshot 1.05×), geomean ≥ 0.98× cuBLAS over the shape set, and ≥
# gluon-pipelined at every shape. `met` is strict.

# %%
if len(gemm_tab):
    r = gemm_tab["gluon-ws / cuBLAS"]
    sq = r.loc[[i for i in r.index if tuple(int(d) for d in i) == (8192, 8192, 8192)]]
    rows = []
    for goal, name in ((1.0, "target"), (1.05, "moonshot")):
        rows.append({"target": f">= {goal:.2f}x cuBLAS at 8192^3 ({name})",
                     "measured": f"{sq.iloc[0]:.3f}x" if len(sq) else "no 8192^3 record",
                     "met": bool(len(sq) and sq.iloc[0] >= goal)})
    gmn = plots.geomean(r)
    rows.append({"target": ">= 0.98x cuBLAS, geomean", "measured": f"{gmn:.3f}x over {r.notna().sum()} shapes", "met": bool(gmn >= 0.98)})
    rp = gemm_tab["gluon-ws / gluon-pipelined"]
    worst = rp.idxmin()
    rows.append({"target": ">= gluon-pipelined at every shape",
                 "measured": f"{int((rp >= 1).sum())}/{rp.notna().sum()} shapes; worst {rp.min():.3f}x at {'x'.join(str(int(d)) for d in worst)}",
                 "met": bool((rp >= 1).all())})
    gt = pd.DataFrame(rows)
    display(Markdown(f"run `{gm.run_id.iloc[0]}`" + (" — STALE records" if gm.stale.any() else "")))
    display(gt)
else:
    nodata("the GEMM targets")


# %% [markdown]
# ### ws-sweep: producer registers × tile × ring depth
#
# `gluon-ws` GEMM over three shapes, tiles `(BM, BN, BK, num_warps, num_stages)` × `producer_regs` ∈ {24, 40, 56,
# 88}. A config that does not fit in shared memory is not a measurement: where the plan skipped it or a record
# holds its error, it is listed as **does not fit**. Below it, the earlier producer-registers × stages sweep
# in pattern 3's file, which did hold such configs.

# %%
def tile_of(c):
    c = json.loads(c)
    return f"{c.get('BM')}x{c.get('BN')}x{c.get('BK')} w{c.get('num_warps')} s{c.get('num_stages')}"


def sweep_table(ws_, what):
    ws_ = ws_.copy()
    ws_["tile"] = ws_.config_key.map(tile_of)
    ws_["producer_regs"] = nbk.config_value(ws_, "producer_regs")
    ws_["shape"] = ws_.M.astype(str) + "x" + ws_.N.astype(str) + "x" + ws_.K.astype(str)
    ok = ws_[ws_.passed.astype(bool)]
    bad = ws_[~ws_.passed.astype(bool)]
    tab = ok.pivot_table(index=["shape", "tile"], columns="producer_regs", values="tflops").round(1).astype(object)
    for r in bad.itertuples():
        why = "does not fit" + (f" ({m.group(0)})" if (m := re.search(r"needs \d+ B of shared memory > \d+", r.notes or "")) else "")
        tab.loc[(r.shape, r.tile), r.producer_regs] = why
    display(Markdown(f"**{what}**: TFLOP/s (columns: producer_regs)"))
    display(tab.sort_index())
    if len(ok):
        spread_ = ok.groupby(["shape", "tile"]).tflops.agg(lambda s: 100 * (s.max() / s.min() - 1))
        print("spread over producer_regs, max/min - 1 (%): " + ", ".join(f"{sh} {t}: {v:.1f}" for (sh, t), v in spread_.items()))
    return ok, bad


wsw = pick(use, (study == "ws-sweep") & (use.op == "matmul"))
ws_ok = pd.DataFrame()
if not len(wsw):
    nodata("the gluon-ws GEMM ws-sweep")
else:
    about(wsw, "ws-sweep")
    ws_ok, ws_bad = sweep_table(wsw, f"ws-sweep, run {wsw.run_id.iloc[0]}")
    planned = [(M, N, K, t, r) for (M, N, K) in PLAN.ws_sweep_shapes for t in PLAN.ws_sweep_tiles for r in PLAN.ws_sweep_regs]
    have = {(int(r.M), int(r.N), int(r.K), tuple(json.loads(r.config_key).get(k) for k in ("BM", "BN", "BK", "num_warps", "num_stages")),
             json.loads(r.config_key).get("producer_regs")) for r in wsw.itertuples()}
    skipped = []
    for (M, N, K, t, r) in planned:
        if (M, N, K, t, r) not in have:
            try:
                gemm.GemmConfig(BM=t[0], BN=t[1], BK=t[2], num_warps=t[3], num_stages=t[4], producer_regs=r).validate("bfloat16")
                why = "no record (fits: not run)"
            except ValueError as e:
                why = f"does not fit: {e}"
            skipped.append({"shape": f"{M}x{N}x{K}", "tile": t, "producer_regs": r, "why": why})
    if skipped:
        display(pd.DataFrame(skipped))
    print(f"{len(planned)} configs in the current plan; {len(have)} recorded; {len(ws_bad)} recorded as errors; {len(skipped)} without a record")
    if len(ws_ok):
        bestc = ws_ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape")[["tile", "producer_regs", "tflops"]]
        dflt = gemm.GemmConfig()
        d = ws_ok[(ws_ok.tile == f"{dflt.BM}x{dflt.BN}x{dflt.BK} w{dflt.num_warps} s{dflt.num_stages}") & (ws_ok.producer_regs == dflt.producer_regs)]
        bestc["default config TFLOP/s (same sweep)"] = d.set_index("shape").tflops.reindex(bestc.index)
        bestc["best / default"] = bestc.tflops / bestc["default config TFLOP/s (same sweep)"]
        display(Markdown("best config per shape vs the default `GemmConfig()` in the same sweep:"))
        display(bestc.round(3))
        if len(gm):  # run to run: the same gluon-ws config and shape in the GEMM grid's run and in this sweep
            KEYS = ("BM", "BN", "BK", "num_warps", "num_stages", "producer_regs")
            rr = []
            for r in gm[gm.variant == "gluon-ws"].itertuples():
                c = json.loads(r.config_key)
                m_ = ws_ok[(ws_ok.M == r.M) & (ws_ok.N == r.N) & (ws_ok.K == r.K)]
                m_ = m_[m_.config_key.map(lambda k: all(json.loads(k).get(x) == c.get(x) for x in KEYS))]
                if len(m_):
                    rr.append({"shape": f"{r.M}x{r.N}x{r.K}", "config": tile_of(r.config_key) + f" regs {c.get('producer_regs')}",
                               f"GEMM grid run {r.run_id}": r.tflops, f"ws-sweep run {m_.run_id.iloc[0]}": float(m_.tflops.iloc[0]),
                               "sweep / grid": float(m_.tflops.iloc[0]) / r.tflops})
            if rr:
                display(Markdown("**Run to run**: the same gluon-ws config and shape, timed in two runs:"))
                display(pd.DataFrame(rr).set_index("shape").round(3))
old = use03[B(study03 == "ws-sweep") & (use03.op == "matmul")]
if len(old):
    oldr = pick(old, old.op == "matmul")
    about(oldr, "earlier ws-sweep (pattern 3's file)")
    sweep_table(oldr, f"earlier ws-sweep, run {oldr.run_id.iloc[0]} ({NB3}.jsonl)")

# %% [markdown]
# ## 7. Consumer schedules: cooperative only
#
# Hopper GEMMs with warp specialization come in two consumer schedules: **cooperative** (both consumer
# warpgroups on the same output tile, splitting its rows) and **ping-pong** (each consumer warpgroup on its
# own tile, taking turns so that one runs its MMAs while the other runs its epilogue). **Only the
# cooperative schedule is implemented here; ping-pong is not**, so there is no ping-pong measurement in
# this notebook and nothing is claimed about it. The structure of the current kernel, read from its source:

# %%
src = inspect.getsource(W.ws_gemm_kernel.fn)
call = src[src.index("gl.warp_specialize("):]
m = re.search(r"\],\s*(\[[^\]]*\]),\s*(\[[^\]]*\])\)", call)
n_parts = call[:call.index("], [")].count("(_ws_")
cons = inspect.getsource(W._ws_consumer.fn)
acc = re.search(r"warps_per_cta=(\[[^\]]*\])", cons)
print(f"partitions in ws_gemm_kernel: {n_parts} (the default = _ws_consumer, then workers); worker warps {m.group(1) if m else '?'}, "
      f"worker registers {m.group(2) if m else '?'}")
print(f"consumer accumulator layout: warps_per_cta={acc.group(1) if acc else '?'} -> with num_warps=8 the two warpgroups split "
      "the BM rows of ONE tile (cooperative)")
print("ping-pong consumer schedule: not implemented (no kernel, no records)")

# %% [markdown]
# ## 8. Correctness and compute-sanitizer
#
# Every timed record carries its own check against a float64 reference. `ci/sanitize.py` runs
# `compute-sanitizer --tool racecheck` and `--tool synccheck` on one small odd-shaped case of each Gluon
# kernel and writes `results/<gpu>/sanitizer.jsonl`; it is read here as written (the newest line per
# (kernel, tool) wins).

# %%
sec = [g for g in list(grids.values()) + [gm] if len(g)]
if sec:
    cc = pd.concat(sec)
    cc = cc[cc.variant.str.startswith("gluon")]
    display(cc.groupby(["run_id", "op", "variant"]).agg(records=("passed", "size"), passed=("passed", lambda s: int(s.astype(bool).sum())),
                                                       max_abs_err=("max_abs_err", "max"), max_rel_err=("rel_err", "max")))
san_path = Path(results_dir) / slug / "sanitizer.jsonl"
san, n_old = nbk.load_sanitizer(san_path)
if len(san):
    if n_old:
        print(f"{len(san) + n_old} lines in {san_path.name}; {n_old} superseded by a later line for the same (kernel, tool)")
    san["output vs float64"] = san["check passed"]
    san["case"] = san["case"].map(lambda c: f"{c[0]} {c[1]} " + "x".join(str(v) for v in c[2].values()) if isinstance(c, list) and len(c) == 3 else c)
    san["warp_specialize"] = san["kernel"].str.startswith("ws-")
    cols = ["kernel", "case", "tool", "warp_specialize", "exit_code", "errors/hazards (summary)", "summary", "output vs float64", "clean", "seconds"]
    display(san[[c for c in cols if c in san]])
else:
    display(Markdown(f"**No compute-sanitizer records:** `{san_path}` does not exist, so racecheck and synccheck have not been run "
                     "on these kernels (or their output was not committed). Nothing is claimed about races or barrier misuse."))

# %% [markdown]
# ### Where racecheck points: the reported accesses, mapped to the source
#
# The tail of each hazard report names the kernel offset and the `file:line` of each access. The line
# numbers are those of the source **when the sanitizer ran**; the kernel's `def` line is used to shift them
# onto the current file (a docstring edit since moved every line), and the current text of each line is
# shown. The diagnostic `ws-gemm-noinval` is `ws_gemm_kernel` with its trailing `mbarrier.invalidate` loop cut,
# written to a temporary file by `ci/sanitize.py`; its lines are mapped through that same generated file.

# %%
ACC = re.compile(r"(Read|Write) access at (\w+)\+(0x[0-9a-f]+) in ([\w./-]+):(\d+)(?: \[(\d+) hazards?\])?")
src_file = Path(W.__file__)
src_lines = src_file.read_text().splitlines()


def def_line(fn):
    lines_, start = inspect.getsourcelines(fn)
    return start + next(i for i, l in enumerate(lines_) if l.lstrip().startswith("def "))


DEFS = {"ws_gemm_kernel": def_line(W.ws_gemm_kernel.fn), "ws_norm_kernel": def_line(W.ws_norm_kernel.fn)}
diag_lines = None
try:  # the diagnostic kernel's file, generated exactly as ci/sanitize.py generates it
    import importlib.util
    sp = importlib.util.spec_from_file_location("gl_sanitize", Path(gll.__file__).resolve().parents[1] / "ci" / "sanitize.py")
    sz = importlib.util.module_from_spec(sp); sp.loader.exec_module(sz)
    diag_lines = Path(inspect.getsourcefile(sz.ws_gemm_without_invalidate().fn)).read_text().splitlines()
except Exception as e:
    print(f"(could not regenerate the ws-gemm-noinval file: {type(e).__name__}: {e})")

found = []
race = san[(san.tool == "racecheck") & ~san.clean] if len(san) else pd.DataFrame()
for _, r in race.iterrows():
    tail = r.get("tail") or []
    accs = [m for m in (ACC.search(l) for l in tail) if m]
    if not accs:
        continue
    first = accs[0]
    shift = DEFS.get(first.group(2), 0) - int(first.group(5)) if first.group(4).endswith("warp_specialized.py") else 0
    for j, a in enumerate(accs):
        f, ln = a.group(4), int(a.group(5))
        if f.endswith("warp_specialized.py"):
            now, lines_of = ln + shift, src_lines
            where = f"warp_specialized.py:{now} now"
        elif diag_lines is not None:
            now, lines_of = ln, diag_lines
            where = f"{f}:{ln} (generated)"
        else:
            now, lines_of, where = 0, [], "?"
        text = lines_of[now - 1].strip() if 0 < now <= len(lines_of) else "?"
        if text.startswith("for ") and now < len(lines_of):  # a loop header: show what it loops over
            text += " -> " + lines_of[now].strip()
        found.append({"kernel": r["kernel"], "role": "first access" if j == 0 else "conflicting access", "access": a.group(1),
                      "offset": f"{a.group(2)}+{a.group(3)}", "reported at": f"{f}:{ln}", "maps to": where,
                      "source line": text, "hazards": int(a.group(6)) if a.group(6) else None})
    display(Markdown(f"**{r['kernel']} / racecheck** (exit code {r['exit_code']}, {r['case']}): sanitizer output tail\n\n```\n"
                     + "\n".join(tail) + "\n```"))
race_tab = pd.DataFrame(found)
if len(race_tab):
    race_tab["hazards"] = race_tab["hazards"].astype("Int64")
    rep_def = race_tab[(race_tab.role == "first access") & race_tab["reported at"].str.startswith("warp_specialized.py")]
    print("def lines: " + ", ".join(f"{k} reported at line {int(r.split(':')[1])}, now at {DEFS[k]} (shift {DEFS[k] - int(r.split(':')[1]):+d})"
                                    for k, r in zip(rep_def.offset.str.split("+").str[0], rep_def["reported at"])
                                    if k in DEFS))
    display(race_tab)

# %% [markdown]
# ### What sits at the reported offsets: SASS of the same kernels, compiled on this CPU
#
# The offsets in the report (`kernel+0x…`) are SASS addresses. Each sanitized case is compiled here for sm_90
# with the config its launcher picks for that shape (`GemmConfig.heuristic(M, N)` in `gemm.prepare`;
# `WsNormConfig.heuristic(op, N, dtype, M)` in `check_norm`; the diagnostic through `ci/sanitize.py`'s own
# generator), and the instruction at each reported offset is read back with a few neighbours. A static
# compile can only reproduce the sanitized binary if compiler, source and config are the same, so each row
# says whether the instruction there is a shared-memory access (what racecheck tracks).

# %%
import triton
sass_rows, sass_ctx = [], {}


def sass_of(spec_):
    k = codegen.compile_sm90(**spec_)
    ins = re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*;)", codegen.sass(k.asm["cubin"]))
    return ins, codegen.census(k)["smem_bytes"], k.asm["ptx"]


def case_spec(kernel):
    op, variant, shape, _ = sz.CASES[kernel]
    if op == "matmul":
        cfg = gemm.GemmConfig.heuristic(shape["M"], shape["N"], "bfloat16")
        sp_ = W.codegen_spec(cfg, "bfloat16")
        if variant == "diag:ws-gemm-noinval":
            sp_["fn"] = sz.ws_gemm_without_invalidate()
        return sp_, gcfg(cfg) + f" producer_regs={cfg.producer_regs}"
    cfg = W.WsNormConfig.heuristic(op, shape["N"], "bfloat16", shape["M"])
    return W.norm_codegen_spec(op, shape["N"], "bfloat16", cfg), wscfg(cfg)


BAR1 = re.compile(r"BAR\.SYNC\S*\s+0x1\s*;")
if len(race_tab) and diag_lines is not None:
    for kern, sub in race_tab.groupby("kernel", sort=False):
        try:
            sp_, cfg_txt = case_spec(kern)
            ins, smem, ptx = sass_of(sp_)
        except Exception as e:
            print(f"{kern}: could not compile for the SASS check: {type(e).__name__}: {e}")
            continue
        where = {int(o, 16): i for i, (o, _) in enumerate(ins)}
        last_word = smem - 4
        ptx_st = len(re.findall(rf"st\.shared\.b32\s+\[global_smem\+{last_word}\]", ptx))
        ptx_ld = len(re.findall(r"ld\.shared\.b8", ptx))
        for _, a in sub.iterrows():
            off = int(a["offset"].split("+")[1], 16)
            i = where.get(off)
            text = ins[i][1] if i is not None else "no instruction at this offset in the CPU compile"
            imm = re.search(r"\+0x([0-9a-f]+)\]", text)
            write = a["access"] == "Write"
            near = (i is not None) and (bool(BAR1.search(ins[i + 1][1])) if write and i + 1 < len(ins)
                                        else any(BAR1.search(t) for _, t in ins[max(0, i - 4):i]))
            sass_rows.append({"kernel": kern, "config compiled here": cfg_txt, "access (racecheck)": a["access"], "offset": a["offset"],
                              "SASS here": text, "kind matches (Read=LDS / Write=STS)": bool(re.match(r"LDS" if not write else r"STS", text)),
                              "immediate address": int(imm.group(1), 16) if imm else None, "kernel smem bytes": smem,
                              "to the last smem word": bool(imm) and int(imm.group(1), 16) == last_word,
                              "BAR.SYNC 0x1 next to it": near,
                              "PTX: st.shared.b32 to that word / ld.shared.b8": f"{ptx_st} / {ptx_ld}"})
            if i is not None:
                sass_ctx[(kern, a["offset"])] = "\n".join(f"/*{o}*/ {t}" for o, t in ins[max(0, i - 4):i + 3])
    sass_tab = pd.DataFrame(sass_rows)
    if len(sass_tab):
        print(f"compiled with triton {triton.__version__} on this CPU")
        display(sass_tab)
        for (kern, off), ctx in sass_ctx.items():
            if kern in ("ws-gemm", "ws-norm"):
                display(Markdown(f"`{kern}` around `{off}`:\n```\n{ctx}\n```"))
else:
    sass_tab = pd.DataFrame()
    print("no racecheck findings to locate" if not len(race_tab) else "ci/sanitize.py could not be loaded: no SASS check")

# %%
if len(san):
    sync = san[san.tool == "synccheck"]
    rc = san[san.tool == "racecheck"]
    ws_rc, plain_rc = rc[rc.warp_specialize], rc[~rc.warp_specialize]
    firsts = race_tab[race_tab.role == "first access"] if len(race_tab) else pd.DataFrame()
    entry = firsts[firsts.apply(lambda x: x["source line"].startswith("def "), axis=1)] if len(firsts) else firsts
    conf = race_tab[race_tab.role == "conflicting access"] if len(race_tab) else pd.DataFrame()
    nl = []
    nl.append(f"- synccheck: {int(sync.clean.sum())}/{len(sync)} kernels clean (" + ", ".join(sync.kernel) + ").")
    nl.append(f"- racecheck, kernels without warp_specialize: {int(plain_rc.clean.sum())}/{len(plain_rc)} clean ("
              + ", ".join(plain_rc.kernel) + ").")
    nl.append(f"- racecheck, warp_specialize kernels: {int((~ws_rc.clean).sum())}/{len(ws_rc)} report hazards ("
              + ", ".join(f"{k}: {n} reported" for k, n in zip(ws_rc.kernel, ws_rc['errors/hazards (summary)'])) + ").")
    if len(firsts):
        nl.append(f"- In {len(entry)}/{len(firsts)} of them the first access is a **Read at kernel offset "
                  + "/".join(sorted(set(x.split('+')[1] for x in firsts.offset))) + "**, attributed to the kernel's `def` line (kernel entry).")
    if len(conf):
        for k, sub in conf.groupby("kernel", sort=False):
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
                  "that word (the kernel's buffers and barriers lie below it; see the `SYNCS` addresses in the context above): it is the state the `warp_specialize` lowering keeps for the worker warps' dispatch (the PTX's "
                  "`st.shared.b32` to it and `ld.shared.b8`, counted above), and the source lines racecheck names are where the "
                  "debug info attributes that lowering code.")
    chk_ok = san["output vs float64"].eq("passed")
    nl.append(f"- Outputs under the sanitizer matched the float64 reference in {int(chk_ok.sum())}/{len(san)} runs.")
    nl.append("- **Unresolved.** The evidence: the hazard appears only in kernels that fork with `gl.warp_specialize`; it pairs a "
              "read at kernel entry with writes at kernel entry and at the kernel's tail; cutting the trailing `mbarrier.invalidate` "
              "loop (`ws-gemm-noinval`) does not remove it — the tail write then points at the `warp_specialize` call; synccheck is "
              "clean and the results are correct. Whether the named barrier between these accesses orders them (and racecheck "
              "reports a pair it cannot see ordered) or the lowering has a real race is **not established** here: the finding is "
              "neither declared benign nor a bug.")
    display(Markdown("\n".join(nl)))

# %% [markdown]
# ## 9. Takeaways (computed from the data above)

# %%
lines = []
if len(gemm_tab):
    r = gemm_tab["gluon-ws / cuBLAS"]; rp = gemm_tab["gluon-ws / gluon-pipelined"]
    sqk = [i for i in r.index if tuple(int(d) for d in i) == (8192, 8192, 8192)]
    lines.append(f"- **GEMM: where WS pays** (run `{gm.run_id.iloc[0]}`): gluon-ws "
                 + (f"{gemm_tab.loc[sqk[0], 'gluon-ws']:.0f} TFLOP/s = **{r.loc[sqk[0]]:.3f}x cuBLAS at 8192³**, " if sqk else "")
                 + f"geomean **{plots.geomean(r):.3f}x** cuBLAS and {plots.geomean(gemm_tab['triton / cuBLAS']):.3f}x for Triton's tl.dot; "
                 f"vs gluon-pipelined geomean {plots.geomean(rp):.3f}x, ahead at "
                 + (", ".join("x".join(str(int(d)) for d in i) for i in rp[rp >= 1].index) or "no shape")
                 + ", behind at " + (", ".join(f"{'x'.join(str(int(d)) for d in i)} ({v:.3f}x)" for i, v in rp[rp < 1].items()) or "no shape") + ".")
    if len(gt):
        lines.append("  - GEMM targets: " + "; ".join(f"{t['target']}: {t['measured']} ({'met' if t['met'] else 'MISSED'})" for _, t in gt.iterrows()) + ".")
if len(ws_ok):
    sp_ = ws_ok.groupby(["shape", "tile"]).tflops.agg(lambda s: 100 * (s.max() / s.min() - 1))
    lines.append(f"- ws-sweep: the producer's register budget moves a (shape, tile) by {sp_.min():.1f}-{sp_.max():.1f}% "
                 f"(median {sp_.median():.1f}%); the tile matters more: best per shape " + ", ".join(
                     f"{sh}: {t.tile} regs {int(t.producer_regs)} {t.tflops:.0f} TFLOP/s" for sh, t in
                     ws_ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape").iterrows()) + ".")
if len(norm_summary):
    for _, s in norm_summary.iterrows():
        t = targets[s["op"]]
        wins = t[t["ws / pipelined"] > 1].index
        gmr = s["geomean ws / pipelined"]
        verdict = "WS pays" if gmr > 1.0 else "on par (geomean within 2%)" if gmr >= WS_VS_PIPE else "WS does not pay here"
        lines.append(f"- **{s['op']}: {verdict}**: gluon-ws / gluon-pipelined geomean {gmr:.3f}x, "
                     f"target (>= 0.98x) met in {s['cells met (>= 0.98x)']} cells, worst {s['worst']}; gluon-ws faster in {len(wins)} cells"
                     + (": " + ", ".join(f"{int(m)}x{int(n)}" for m, n in wins) if len(wins) else "")
                     + (f"; vs gluon-tma geomean {plots.geomean(t['ws / gluon-tma']):.3f}x" if t['ws / gluon-tma'].notna().any() else "")
                     + f"; {t['ws % of ceiling'].min():.0f}-{t['ws % of ceiling'].max():.0f}% of the copy ceiling.")
    if len(by_blocks):
        lines.append("  - by row blocks per CTA, ws / pipelined geomean: " + ", ".join(f"{k}: {v:.3f}x ({int(n)} cells)" for k, v, n in
                                                                                    zip(by_blocks.index, by_blocks["geomean"], by_blocks["cells"]))
                     + ". The ratio rises with the blocks each CTA walks: with few blocks the producer has little to run ahead "
                     "over, while the fork and the extra EMPTY round trip are still paid (consistent with the timeline, not proven by it).")
if len(ws_tl) >= 2:
    a, b = ws_tl.iloc[0], ws_tl.iloc[-1]
    lines.append(f"- Timeline (RMSNorm {TL4['M']}x{TL4['N']}): at NUM_STAGES={ws_tl.index[0]} the consumer waits "
                 f"{a['consumer FULL stall, median (ns)']:.0f} ns per block (run-ahead {a['run-ahead, median (ns)']:.0f} ns); at "
                 f"NUM_STAGES={ws_tl.index[-1]} the producer runs {b['run-ahead, median (ns)']:.0f} ns ({b['blocks ahead, median']:.0f} blocks) "
                 f"ahead and the stall drops to {b['consumer FULL stall, median (ns)']:.0f} ns; the period follows the consumer's work "
                 f"({b['consumer work, median (ns)']:.0f} ns of {b['block period, median (ns)']:.0f} ns).")
if len(spread):
    st_hi = max(s for _, s in spread.index)
    lines.append("- Persistent tail at NUM_STAGES=" + str(st_hi) + ": slowest CTA vs median " + ", ".join(
        f"{k} +{spread.loc[(k, st_hi), 'tail: max / median - 1 (%)']:.1f}%" for k, s in spread.index if s == st_hi)
                 + " (block-count imbalance " + ", ".join(f"{spread.loc[(k, st_hi), 'block-count imbalance (%)']:.1f}%" for k, s in spread.index if s == st_hi)
                 + "): a static split cannot rebalance per-SM pace, which the one-row-per-CTA kernels get from the hardware scheduler.")
if len(sweep_eff):
    okk = sw[sw.passed.astype(bool)]
    bst = okk.pivot_table(index=["op", "M", "N"], columns="num_stages", values="gbps", aggfunc="max")
    for op_, sub in bst.groupby(level="op"):
        best_st = sub.idxmax(axis=1)
        h_st = {k: (v[0] if isinstance(v, tuple) else None) for k, v in heur_tab["heuristic now"].items()}
        lines.append(f"- norm-sweep{' (STALE)' if sw.stale.any() else ''}, {op_}: best NUM_STAGES per (M, N): "
                     + ", ".join(f"{int(m)}x{int(n)}: {int(b)} (heuristic now: {h_st.get((o, m, n))}, "
                                 f"{sub.loc[(o, m, n), h_st.get((o, m, n))] / sub.loc[(o, m, n)].max():.3f}x of the best)"
                                 if h_st.get((o, m, n)) in sub.columns else f"{int(m)}x{int(n)}: {int(b)}"
                                 for (o, m, n), b in best_st.items()) + ".")
    e = sweep_eff["geomean best-at-value / best overall"]
    for knob in ("num_stages", "num_warps", "producer_regs"):
        if knob in e.index.get_level_values("knob"):
            s = e.xs(knob)
            lines.append(f"- norm-sweep{' (STALE)' if sw.stale.any() else ''}, `{knob}`: best-at-value / best overall geomean "
                         + ", ".join(f"{v}: {x:.3f}" for v, x in s.items()) + f" (range {100 * (s.max() - s.min()):.1f} points).")
if len(norm_census) and "setmaxnreg producer" in norm_census:
    ws_c = norm_census.xs("gluon-ws", level="variant")
    lines.append("- Registers: the producer warp runs at " + "/".join(str(v) for v in sorted(set(ws_c["setmaxnreg producer"].dropna()))) + " registers, the "
                 "consumer at " + "/".join(str(v) for v in sorted(set(ws_c["setmaxnreg consumer"].dropna()))) + " (norm kernels, by CTAs per SM; "
                 "the launch cap is set for CTAs per SM, and the producer's warpgroup gives the rest to the consumer); no spills in any "
                 "census row: " + str(int(pd.concat([norm_census, gemm_census])["spill bytes"].sum())) + " B.")
if len(san):
    bad = san[~san.clean]
    lines.append(f"- compute-sanitizer: {int(san.clean.sum())}/{len(san)} runs clean; not clean: "
                 + (", ".join(f"{k}/{t}" for k, t in zip(bad.kernel, bad.tool)) or "none")
                 + " — the racecheck finding in the warp_specialize kernels is **unresolved** (section 8).")
lines.append("- Consumer schedule: cooperative only; ping-pong is not implemented and not measured.")
display(Markdown("\n".join(lines)))
