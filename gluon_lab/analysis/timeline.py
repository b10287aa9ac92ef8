"""The measured timelines (%globaltimer stamps of INSTRUMENT builds) and every CTA's finish, read the same way by
notebooks 03, 04, 06 and 07: plan_common.save_timeline's JSON (results/<gpu>/<notebook><suffix>) loaded, its blocks
per CTA, the stage statistics and Gantt views, the finish spread, and the check that the timeline's source is the
code the records measured.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import common as cm

EMPTY = pd.DataFrame()


def load_timeline(ctx: cm.Context, notebook: str | None = None, suffix: str = ".timeline.json"):
    """results/<gpu>/<notebook><suffix> as written by plan_common.save_timeline, or None."""
    p = timeline_path(ctx, notebook, suffix)
    return json.loads(p.read_text()) if p.exists() else None


def timeline_path(ctx: cm.Context, notebook: str | None = None, suffix: str = ".timeline.json") -> Path:
    return ctx.results_dir / ctx.slug / f"{notebook or ctx.notebook}{suffix}"


def timeline_blocks(TL, st, k: int = 3) -> list:
    """One (blocks, k) array of ns stamps per traced CTA of the NUM_STAGES=st timeline."""
    return [np.asarray(c, dtype=float).reshape(-1, k) for c in TL["timelines"][str(st)]["ns"] if len(c)]


def stamp_granularity(TL) -> int:
    """The timer's observed granularity: gcd of every positive stamp (ns)."""
    stamps = np.concatenate([np.asarray(c, dtype=np.int64).ravel() for t in TL["timelines"].values()
                             for c in t["ns"] if len(c)])
    return int(np.gcd.reduce(stamps[stamps > 0])) if (stamps > 0).any() else 0


def stage_keys(TL) -> list:
    return sorted(TL["timelines"], key=int)


def itemsize(dtype: str) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def timeline_source(TL, allrec):
    """(records of the timeline's run, its gluon-pipelined rms_norm records, a phrase on staleness)."""
    tl_run = allrec[allrec.run_id == TL["run_id"]]
    tl_src = tl_run[(tl_run.op == "rms_norm") & (tl_run.variant == "gluon-pipelined")]
    state = ("no gluon-pipelined rms_norm record of that run to check the kernel source against" if not len(tl_src)
             else "STALE: the kernel source has changed since" if tl_src.stale.any()
             else "the kernel source is unchanged since")
    return tl_run, tl_src, state


def timeline_note(ctx: cm.Context, TL, allrec, stale: str = "flag") -> str:
    """Provenance of the measured timeline, or the missing note."""
    if TL is None:
        return cm.nodata(ctx, f"the measured timeline ({timeline_path(ctx).name} is missing)", stale)
    _, _, state = timeline_source(TL, allrec)
    return (f"MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` ({state}); "
            f"RMSNorm {TL['dtype']} M={TL['M']} N={TL['N']}; stamps are multiples of {stamp_granularity(TL)} ns "
            "(the timer's observed granularity).")


def timeline_stats(TL):
    """Per NUM_STAGES of the 3-stamp (before wait, ready, stored) gluon-pipelined timeline: medians of the
    stall, compute+store, store-to-next-wait gap, block period, and the share of time stalled."""
    if TL is None:
        return EMPTY
    rows = []
    for st in stage_keys(TL):
        bs = timeline_blocks(TL, st)
        if not bs:
            continue
        stall = np.concatenate([b[:, 1] - b[:, 0] for b in bs])
        work = np.concatenate([b[:, 2] - b[:, 1] for b in bs])
        gap = np.concatenate([b[1:, 0] - b[:-1, 2] for b in bs])
        period = np.concatenate([np.diff(b[:, 0]) for b in bs])
        frac = np.median([(b[:, 1] - b[:, 0]).sum() / (b[-1, 2] - b[0, 0]) for b in bs])
        cfg = TL["timelines"][st]["config"]
        rows.append({"NUM_STAGES": int(st), "config": ", ".join(f"{k}={v}" for k, v in cfg.items()),
                     "CTAs traced": len(bs), "blocks per CTA": int(np.median([len(b) for b in bs])),
                     "median stall / block (ns)": np.median(stall), "median compute+store (ns)": np.median(work),
                     "median store-to-next-wait gap (ns)": np.median(gap) if len(gap) else np.nan,
                     "median block period (ns)": np.median(period) if len(period) else np.nan,
                     "time stalled (median over CTAs) %": 100 * frac,
                     "rows": cfg.get("rows", 1), "ctas_per_sm": cfg.get("ctas_per_sm")})
    return pd.DataFrame(rows).set_index("NUM_STAGES") if rows else EMPTY


def timeline_table(stats):
    """The per-stage table as shown (without the config fields kept for the checks)."""
    return stats.drop(columns=["rows", "ctas_per_sm"]).round(1) if len(stats) else None


def _gantt(ax, TL, stats, st, xmax_us=None, ctas: int = 4):
    bs = timeline_blocks(TL, st)[:ctas]
    for k, b in enumerate(bs):
        b = b / 1e3  # us
        ax.broken_barh([(s, e - s) for s, e in zip(b[:, 0], b[:, 1])], (k - 0.35, 0.7), color="#d62728",
                       label="stall: wait for the copy" if k == 0 else None)
        ax.broken_barh([(s, e - s) for s, e in zip(b[:, 1], b[:, 2])], (k - 0.35, 0.7), color="#2ca02c",
                       label="compute + store issue" if k == 0 else None)
        ax.broken_barh([(s, e - s) for s, e in zip(b[:-1, 2], b[1:, 0])], (k - 0.15, 0.3), color="#bbbbbb",
                       label="stores issued -> next wait (refill issue, fence, loop)" if k == 0 else None)
    ax.set_yticks(range(len(bs)), [f"CTA {k}" for k in range(len(bs))])
    ax.set_ylim(-0.6, len(bs) - 0.4)
    r = stats.loc[int(st)]
    lane_axes(ax, f"NUM_STAGES={st}: median stall {r['median stall / block (ns)']:.0f} ns, compute+store "
                  f"{r['median compute+store (ns)']:.0f} ns, period {r['median block period (ns)']:.0f} ns, "
                  f"stalled {r['time stalled (median over CTAs) %']:.0f}% of the time", xmax_us)


def lane_axes(ax, title: str, xmax_us=None) -> None:
    """A Gantt panel's finish (03's and 04's timelines): its title, the time grid, the zoom (0..xmax_us)."""
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if xmax_us:
        ax.set_xlim(0, xmax_us)


def timeline_gantt(TL, stats, zoom: bool = False):
    """One panel per NUM_STAGES, the first 4 traced CTAs, every block: stall / compute+store / gap.
    zoom: only the first 8 block periods of the slowest configuration. None without a timeline."""
    if TL is None or not len(stats):
        return None
    sts = list(stats.index)
    xmax = 8 * stats["median block period (ns)"].max() / 1e3 if zoom else None
    fig, axes = plt.subplots(len(sts), 1, figsize=(13, 1.2 + 1.1 * len(sts) * 2), sharex=True, squeeze=False)
    for ax, st in zip(axes[:, 0], sts):
        _gantt(ax, TL, stats, st, xmax)
    axes[-1, 0].set_xlabel("time since the first stamp (us)")
    if zoom:
        fig.suptitle(f"zoom: the first {xmax:.1f} us (8 of the slowest configuration's block periods)", fontsize=10)
        fig.tight_layout()
    else:  # the legend below the panels, outside the bars
        fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9, frameon=False)
        fig.suptitle(f"MEASURED (%globaltimer, run {TL['run_id']}): gluon-pipelined RMSNorm M={TL['M']} N={TL['N']}, "
                     "first CTAs, every traced block", fontsize=10)
        fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    return fig


def cta_finish(TL, st, k: int = 3):
    """Each traced CTA's finish: its last stamp (ns; the last block's stores issued)."""
    return np.array([b.max() for b in timeline_blocks(TL, st, k)])


def many_ctas_traced(TL, k: int = 3) -> bool:
    """More CTAs traced than the Gantt charts show (4): the per-CTA finish plot is meaningful."""
    return TL is not None and max((len(timeline_blocks(TL, st, k)) for st in stage_keys(TL)), default=0) > 4


def finish_figure(TL, stats):
    """Every traced CTA's finish, sorted, per NUM_STAGES (None when at most 4 CTAs were traced)."""
    if TL is None or not len(stats) or not many_ctas_traced(TL):
        return None
    fig, ax = plt.subplots(figsize=(13, 3))
    for st in stats.index:
        ends = np.sort(cta_finish(TL, st)) / 1e3
        ax.plot(np.arange(len(ends)), ends, ".-", label=f"NUM_STAGES={st}: {len(ends)} CTAs, finish spread "
                f"{ends.max() - ends.min():.1f} us ({100 * (ends.max() - ends.min()) / ends.max():.0f}% of the last finish)")
    ax.set_xlabel("CTAs, sorted by finish")
    ax.set_ylabel("last stores issued (us)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # outside the data
    ax.set_title(f"MEASURED per-CTA finish times (run {TL['run_id']})", fontsize=10)
    fig.tight_layout()
    return fig


def finish_spread(TL, st, k: int = 3, wait_col: int = 0) -> dict | None:
    """Every traced CTA of one timeline: finish min / median / max, the tail (slowest vs median), the
    block-count imbalance of the static round-robin split, each CTA's pace (median period between its
    waits) and the bandwidth the stamps imply (x read + y written over first stamp -> last finish)."""
    bs = timeline_blocks(TL, st, k)
    if not bs:
        return None
    ends = np.array([b.max() for b in bs])
    t0 = min(b.min() for b in bs)
    nb = np.array([len(b) for b in bs])
    pace = np.array([np.median(np.diff(b[:, wait_col])) if len(b) > 1 else np.nan for b in bs])
    moved = TL["M"] * TL["N"] * itemsize(TL["dtype"]) * 2
    return {"NUM_STAGES": int(st), "ends": ends, "blocks": nb, "pace": pace, "CTAs": len(bs),
            "finish min": ends.min(), "finish median": np.median(ends), "finish max": ends.max(),
            "tail %": 100 * (ends.max() / np.median(ends) - 1),
            "spread %": 100 * (ends.max() - ends.min()) / ends.max(),
            "imbalance %": 100 * (nb.max() / nb.min() - 1),
            "whole-grid GB/s": moved / (ends.max() - t0), "even GB/s": moved / (ends.mean() - t0)}


def timeline_check(TL, stats, use, allrec, spec):
    """Bandwidth the stamps imply vs the timed record of the same config: at the median and mean block
    period (x grid size) and, when every CTA was traced, over the whole launch."""
    if TL is None or not len(stats):
        return EMPTY
    tl_run, _, _ = timeline_source(TL, allrec)
    sms = (int(tl_run.sm_count.dropna().iloc[0]) if len(tl_run) and tl_run.sm_count.notna().any()
           else (spec.sm_count if spec else None))
    M, N, item = TL["M"], TL["N"], itemsize(TL["dtype"])
    chk = []
    cands = use[cm.mask((use.op == "rms_norm") & (use.variant == "gluon-pipelined") & (use.M == M) & (use.N == N))]
    for st, r in stats.iterrows():
        bs = timeline_blocks(TL, st)
        rows_ = int(r["rows"])
        blocks_total = -(-M // rows_)
        grid = min(blocks_total, int(r["ctas_per_sm"]) * sms) if sms and r["ctas_per_sm"] else None
        per_block = rows_ * N * item * 2  # bytes of x read + y written per block
        mean_period = np.mean(np.concatenate([np.diff(b[:, 0]) for b in bs]))
        ends = np.array([b[-1, 2] for b in bs])
        whole = (M * N * item * 2 / (ends.max() - min(b[0, 0] for b in bs))) if grid and len(bs) >= grid else np.nan
        rec = cands[cm.mask((cm.config_value(cands, "num_stages") == st) & (cm.config_value(cands, "rows") == rows_)
                         & (cm.config_value(cands, "ctas_per_sm") == r["ctas_per_sm"]))] if len(cands) else cands
        rec = rec.sort_values("timestamp").tail(1)
        chk.append({"NUM_STAGES": st, "grid (CTAs)": grid, "CTAs traced": len(bs),
                    "GB/s at median period": round(grid * per_block / r["median block period (ns)"]) if grid else None,
                    "GB/s at mean period": round(grid * per_block / mean_period) if grid else None,
                    "whole-grid GB/s from stamps": round(whole) if whole == whole else "not every CTA traced",
                    "CTA finish min / median / max (us)": f"{ends.min() / 1e3:.1f} / {np.median(ends) / 1e3:.1f} / {ends.max() / 1e3:.1f}",
                    "timed GB/s, same config": round(float(rec.gbps.iloc[0])) if len(rec) else None,
                    "timed record run": rec.run_id.iloc[0] if len(rec) else "no record with this config",
                    "stale": bool(rec.stale.iloc[0]) if len(rec) else None})
    return pd.DataFrame(chk).set_index("NUM_STAGES")


def timeline_change(stats) -> dict | None:
    """First vs last NUM_STAGES of the timeline: stall, period, gap, compute+store, share stalled."""
    if len(stats) < 2:
        return None
    a, b = stats.iloc[0], stats.iloc[-1]
    col = {"stall": "median stall / block (ns)", "period": "median block period (ns)",
           "gap": "median store-to-next-wait gap (ns)", "work": "median compute+store (ns)",
           "stalled %": "time stalled (median over CTAs) %"}
    return {"stages": (int(stats.index[0]), int(stats.index[-1])),
            **{k: (float(a[c]), float(b[c])) for k, c in col.items()},
            "period speedup": float(a[col["period"]] / b[col["period"]])}


def timeline_check_notes(chk, stats, spec) -> str:
    """What the check table says, line by line (printed under it)."""
    out = []
    for st, r in chk.iterrows():
        if spec and r["GB/s at median period"] and r["GB/s at median period"] > spec.hbm_gbps:
            out.append(f"NUM_STAGES={st}: the median period implies {r['GB/s at median period']:.0f} GB/s, above the "
                       f"{spec.hbm_gbps:.0f} GB/s datasheet: blocks are not all alike (mean period -> "
                       f"{r['GB/s at mean period']:.0f} GB/s); the median shows a typical block, not the launch")
        if r["timed GB/s, same config"] and not isinstance(r["whole-grid GB/s from stamps"], str):
            out.append(f"NUM_STAGES={st}: whole-grid stamps {r['whole-grid GB/s from stamps']:.0f} GB/s vs timed "
                       f"{r['timed GB/s, same config']:.0f} GB/s ({r['whole-grid GB/s from stamps'] / r['timed GB/s, same config']:.2f}x; "
                       f"timed run {r['timed record run']})")
    c = timeline_change(stats)
    if c:
        (s0, s1), st_, pe, sf = c["stages"], c["stall"], c["period"], c["stalled %"]
        out.append(f"NUM_STAGES {s0} -> {s1}: median stall {st_[0]:.0f} -> {st_[1]:.0f} ns, block period {pe[0]:.0f} -> "
                   f"{pe[1]:.0f} ns ({c['period speedup']:.2f}x), stalled {sf[0]:.0f}% -> {sf[1]:.0f}% of the time")
    return "\n".join(out)


