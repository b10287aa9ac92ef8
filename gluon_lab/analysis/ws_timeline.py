"""Notebook 04's per-partition timeline and every CTA's finish: the %globaltimer stamps of the INSTRUMENT builds
of gluon-ws RMSNorm (5 per block: the producer's EMPTY wait and issue, the consumer's FULL wait, ready, stored),
read beside pattern 3's single-stream timeline; the finish spread of both, checked against the timed record of
the same config. The stamps' files and the shared readers (blocks per CTA, stage keys, granularity) are
`timeline`'s; this module is what warp specialization adds to them (split from `warp_specialized`, whose page
section 'the per-partition timeline' calls it).

    ws_timeline_stats / pipe_timeline_summary / timeline_views / ws_gantt / runahead_hist / timeline_lines
        results/<gpu>/04-warp-specialization.timeline.json and 03's, stale-flagged by the records of their run
    finish_spreads / spread_table / spread_figure / spread_check / tail_note
        every traced CTA's finish in both timelines, against the timed record of that config (norm grid run)
"""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import common as cm
from . import pipelined as P
from . import timeline as tl

NB3 = P.NB  # pattern 3's records and its single-stream timeline
F4 = ("producer_before_empty_wait", "producer_issued", "consumer_before_full_wait", "consumer_ready", "consumer_stored")
EMPTY = pd.DataFrame()


# ---- per-partition timeline ----------------------------------------------------------------------
def fields(TL) -> dict:
    """{field: column} of a 5-stamp timeline (the file's `fields`, else F4)."""
    f = list(TL.get("fields", F4))
    return {k: f.index(k) for k in F4} | {"_k": len(f)}


def tl_provenance(ctx, TL, recs, notebook: str | None = None) -> str:
    """Which file, GPU, run (records and git commit of that run), shape and timer granularity."""
    path = tl.timeline_path(ctx, notebook)
    run = recs[recs.run_id == TL["run_id"]]
    commit = ", ".join(sorted(run.git_commit.dropna().unique())) or "?"
    return (f"`{path.name}`: MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` (records of that run: "
            f"{len(run)}, git commit {commit}; the timeline file carries no kernel-source hash, so it cannot be checked "
            f"for staleness), RMSNorm {TL['dtype']} M={TL['M']} N={TL['N']}; stamps are multiples of {tl.stamp_granularity(TL)} ns.")


def ws_timeline_stats(TL):
    """Per NUM_STAGES: producer wait+issue, run-ahead (consumer's FULL wait - producer's issue), blocks
    ahead, the consumer's stall and work, the block period and the share of time the consumer stalls."""
    if TL is None:
        return EMPTY
    ix = fields(TL)
    rows = []
    for st in tl.stage_keys(TL):
        bs = tl.timeline_blocks(TL, st, ix["_k"])
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
    s = tl.timeline_stats(TL3)
    if not len(s):
        return EMPTY
    return s[["median stall / block (ns)", "median compute+store (ns)", "median block period (ns)"]].set_axis(
        ["stall, median (ns)", "compute + store, median (ns)", "block period, median (ns)"], axis=1)


def timeline_views(ctx, TL4, TL3, allrec, rec03, ws_tl, pipe_tl, stale: str = "flag") -> list:
    out = []
    if TL4 is None:
        out.append(cm.nodata(ctx, f"the measured gluon-ws timeline ({tl.timeline_path(ctx).name} is missing)", stale, name=""))
    else:
        out += [tl_provenance(ctx, TL4, allrec), cm.table(ws_tl.round(1))]
    if TL3 is not None:
        out += [tl_provenance(ctx, TL3, rec03, NB3),
                "For comparison, pattern 3's single-stream `gluon-pipelined` timeline (same M, N; 3 stamps per block):",
                cm.table(pipe_tl.round(1))]
    else:
        out.append(cm.nodata(ctx, f"pattern 3's timeline ({tl.timeline_path(ctx, NB3).name} is missing)", stale, name=""))
    return out


def _ws_gantt(ax, TL, ws_tl, st, ctas=(0, 1, 2), xmax_us=None):
    ix = fields(TL)
    bs = tl.timeline_blocks(TL, st, ix["_k"])
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
    tl.lane_axes(ax, f"NUM_STAGES={st}: run-ahead {r['run-ahead, median (ns)']:.0f} ns, consumer stall "
                     f"{r['consumer FULL stall, median (ns)']:.0f} ns, work {r['consumer work, median (ns)']:.0f} ns, "
                     f"period {r['block period, median (ns)']:.0f} ns (medians over all CTAs)", xmax_us)


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
        bs = tl.timeline_blocks(TL, st, ix["_k"])
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
        for st in tl.stage_keys(TL):
            fs = tl.finish_spread(TL, st, k, wait_col)
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
    sub = df[cm.mask((df.op == "rms_norm") & (df.variant == variant) & (df.M == M) & (df.N == N) & df.passed.astype(bool))]
    for k in keys:
        sub = sub[cm.mask(cm.config_value(sub, k) == cfg[k])] if len(sub) else sub
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
    return cm.pick(use, (use.op == "rms_norm") & cm.study(use).isna() & use.N.notna(), require=("gluon-ws", "gluon-pipelined"))


def tail_note(spread, grid_run, TL3, TL4) -> str | None:
    """At the timeline's cell: gluon-tma vs the persistent kernels in the timed grid, next to the tail
    and what an even spread of the CTA time would be worth."""
    if not len(spread) or TL4 is None or not len(grid_run):
        return None
    cell = grid_run[cm.mask((grid_run.M == TL4["M"]) & (grid_run.N == TL4["N"]))]
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
