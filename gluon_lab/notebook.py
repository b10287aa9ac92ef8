"""Small helpers the notebooks share: mode resolution, loading records for one notebook, provenance
and ceilings tables, and markdown takeaways. Kept here so the notebooks read as prose + calls."""
from __future__ import annotations

from pathlib import Path

from . import device, ops, results


def resolve_mode(mode: str) -> str:
    """'auto' -> 'measure' on an sm_90+ GPU, else 'replay'. 'measure' without one is an error."""
    if mode not in ("auto", "measure", "replay"):
        raise ValueError(f"mode must be 'auto', 'measure' or 'replay', got {mode!r}")
    if mode == "auto":
        return "measure" if device.is_hopper_or_newer() else "replay"
    if mode == "measure":
        device.require_hopper("mode='measure'")
    return mode


def gpu_slug(gpu: str | None, run_mode: str, default: str = "h200") -> str:
    """Which results/<slug>/ to show: the GPU present when measuring, else `gpu` or the default."""
    if run_mode == "measure":
        return device.gpu_info()["gpu_slug"]
    return device.gpu_slug(gpu) if gpu else default


def load(results_dir, slug: str, notebook: str, newest_only: bool = True):
    """Records of one notebook on one GPU, stale-marked; newest record per case by default."""
    path = results.store_path(results_dir, slug, notebook)
    if not Path(path).exists():
        import pandas as pd
        df = results.load([], on_error="raise")
        df["stale"] = pd.Series([], dtype=bool)
        return df
    df = results.mark_stale(results.load(path, on_error="raise"), ops.current_hash)
    return results.latest(df) if newest_only else df


def provenance_table(df):
    import pandas as pd
    if not len(df):
        return pd.DataFrame()
    cols = ["run_id", "gpu_name", "driver", "cuda", "torch", "triton", "python", "git_commit"]
    g = df.groupby("run_id", dropna=False)
    t = g[cols[1:]].first()
    t["records"] = g.size()
    t["stale"] = g["stale"].sum()
    t["first"] = g["timestamp"].min()
    t["last"] = g["timestamp"].max()
    return t.reset_index()


def ceilings(df) -> dict | None:
    """Ceilings of the newest run in df: {'copy_gbps', 'matmul_tflops', 'run_id'} (None if none)."""
    c = df[df["pattern"] == "ceiling"]
    copy = c[(c["op"] == "copy") & (c["M"].isna())]
    mm = c[c["op"] == "matmul"]
    if not len(copy) or not len(mm):
        return None
    copy = copy.sort_values("timestamp").iloc[-1]
    mm = mm.sort_values("timestamp").iloc[-1]
    return {"copy_gbps": float(copy["gbps"]), "matmul_tflops": float(mm["tflops"]), "run_id": copy["run_id"],
            "copy_bytes": int(copy["bytes"]), "matmul_shape": f'{mm["M"]}x{mm["N"]}x{mm["K"]}',
            "copy_timer": copy["timer"], "matmul_timer": mm["timer"]}


def missing_note(df, what: str) -> str | None:
    if len(df):
        return None
    return (f"**No records for {what}.** Nothing is drawn from imagination: run this notebook with "
            "`mode='measure'` on an sm_90+ GPU (or `python -m gluon_lab bench …` there) and commit the records.")
