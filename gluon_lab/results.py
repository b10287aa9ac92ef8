"""Record schema, append-only JSONL store, provenance, kernel-source hashes and staleness.

One measured case = one Record = one JSON line in results/<gpu-slug>/<notebook>.jsonl.
Writes are append-only: each append takes an exclusive lock on the file and writes all lines with
one O_APPEND write, so concurrent writers never interleave partial lines. A malformed line is
reported with file:line (MalformedRecordError, or a warning plus ``df.attrs["malformed"]``),
never silently dropped.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import json
import os
import platform
import subprocess
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

# 1: first records (2026-11-29). 2: the cudagraph timer keeps every captured call's outputs alive,
# so variants that allocate their output write K distinct buffers (schema-1 graph records of such
# variants may have reused one output buffer across the K calls: see notebook.graph_output_caveat).
SCHEMA_VERSION = 2
TIMERS = ("do_bench-l2flush", "cudagraph", "host-loop")  # host-loop: wall time per call of a Python loop


@dataclass
class Record:
    op: str
    variant: str
    pattern: str
    shape: dict  # {"M": .., "N": ..[, "K": ..]}
    dtype: str  # "bfloat16" | "float16" | "float32"
    config: dict = field(default_factory=dict)  # num_warps, NUM_STAGES, chunk, ...
    ms_median: float | None = None
    ms_min: float | None = None
    ms_max: float | None = None
    n_reps: int | None = None
    timer: str | None = None
    bytes: int | None = None
    flops: int | None = None
    gbps: float | None = None
    tflops: float | None = None
    sol_datasheet_pct: float | None = None
    sol_measured_pct: float | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    passed: bool | None = None
    gpu_name: str | None = None
    sm_count: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    git_commit: str | None = None
    kernel_source_hash: str | None = None
    run_id: str | None = None
    timestamp: str | None = None
    notes: str | None = None
    schema: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in ("op", "variant", "pattern", "shape", "dtype") if k not in d]
        if missing:
            raise ValueError(f"missing required field(s) {missing}")
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}")
        if not isinstance(d["shape"], dict):
            raise ValueError("shape must be an object like {\"M\": 4096, \"N\": 5120}")
        if d.get("timer") is not None and d["timer"] not in TIMERS:
            raise ValueError(f"timer must be one of {TIMERS}, got {d['timer']!r}")
        return cls(**d)


class MalformedRecordError(ValueError):
    pass


# ----------------------------------------------------------------------------------------------
# provenance

def git_commit(repo: Path | None = None) -> str:
    """HEAD commit (+ '-dirty' when tracked files differ). GLUON_LAB_GIT_COMMIT overrides: the
    device machine receives a copy of the working tree without .git, so the caller passes it."""
    env = os.environ.get("GLUON_LAB_GIT_COMMIT")
    if env:
        return env
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def provenance(run_id: str | None = None) -> dict:
    """Fields every Record of one run shares: GPU, driver, versions, commit, run id, time."""
    from . import device
    prov: dict[str, Any] = {"python": platform.python_version(), "git_commit": git_commit(),
                            "run_id": run_id or new_run_id(),
                            "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch
        prov["torch"] = torch.__version__
    except ImportError:  # pragma: no cover
        prov["torch"] = None
    try:
        import triton
        prov["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        prov["triton"] = None
    info = device.gpu_info()
    if info:
        prov.update(gpu_name=info["gpu_name"], sm_count=info["sm_count"], driver=info["driver"], cuda=info["cuda"])
    return prov


# ----------------------------------------------------------------------------------------------
# JSONL store

def store_path(results_dir: str | os.PathLike, gpu_slug: str, notebook: str) -> Path:
    return Path(results_dir) / gpu_slug / f"{notebook}.jsonl"


def append_records(path: str | os.PathLike, records: Iterable[Record | dict]) -> int:
    """Append records as JSON lines under an exclusive lock with a single O_APPEND write."""
    lines = []
    for r in records:
        rec = r if isinstance(r, Record) else Record.from_dict(r)
        lines.append(rec.to_json() + "\n")
    if not lines:
        return 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(lines).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            # A file whose last write died mid-line must not glue our first line onto it.
            size = os.fstat(fd).st_size
            if size:
                with open(path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        data = b"\n" + data
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return len(lines)


def read_records(path: str | os.PathLike, on_error: str = "raise") -> tuple[list[Record], list[str]]:
    """Parse a JSONL store. on_error: "raise" (MalformedRecordError naming file:line) or "warn"
    (warning per bad line; the messages are returned)."""
    if on_error not in ("raise", "warn"):
        raise ValueError("on_error must be 'raise' or 'warn'")
    recs, bad = [], []
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if not isinstance(d, dict):
                    raise ValueError("line is not a JSON object")
                recs.append(Record.from_dict(d))
            except (ValueError, TypeError) as e:
                msg = f"{path}:{lineno}: malformed record: {e}"
                if on_error == "raise":
                    raise MalformedRecordError(msg) from e
                warnings.warn(msg, stacklevel=2)
                bad.append(msg)
    return recs, bad


# shape entries load() turns into columns: (M, N[, K]) of row ops and matmul; (B, C, [D,] H, W[, G])
# and the memory layout ("nchw" | "channels_last") of group_norm / instance_norm.
def _shape_columns() -> tuple:
    from . import specs
    return tuple(dict.fromkeys(("M", "N", "K") + specs.shape_columns()))


SHAPE_COLUMNS = _shape_columns()


def load(paths, on_error: str = "raise"):
    """Load one or more JSONL stores (files or folders) into a pandas DataFrame.

    Adds columns M, N, K (from shape; row ops and matmul), B, C, D, H, W, G, layout (from shape;
    group_norm / instance_norm), config_key (stable string of config) and source. A dimension a
    record's shape lacks is <NA>.
    ``df.attrs["malformed"]`` lists file:line messages for bad lines (on_error="warn")."""
    import pandas as pd
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob("*.jsonl")) if p.is_dir() else [p] if p.exists() else [])
    rows, malformed = [], []
    for f in files:
        recs, bad = read_records(f, on_error=on_error)
        malformed.extend(bad)
        for r in recs:
            d = dataclasses.asdict(r)
            for k in SHAPE_COLUMNS:
                d[k] = r.shape.get(k)
            d["config_key"] = json.dumps(r.config, sort_keys=True)
            d["source"] = str(f)
            rows.append(d)
    cols = [f.name for f in dataclasses.fields(Record)] + list(SHAPE_COLUMNS) + ["config_key", "source"]
    df = pd.DataFrame(rows, columns=cols)
    for k in SHAPE_COLUMNS:
        if k != "layout":
            df[k] = df[k].astype("Int64")  # integers with <NA> where a record has no such dimension
    df.attrs["malformed"] = malformed
    return df


def mark_stale(df, current_hash: Callable[[str, str], str | None]):
    """Add a boolean 'stale' column: the record's kernel_source_hash differs from the hash of the
    current source of (op, variant). Records of variants that no longer exist are stale too;
    ceiling records (no kernel of ours) carry hash None and are never stale."""
    cache: dict = {}

    import pandas as pd

    def is_stale(row) -> bool:
        if pd.isna(row["kernel_source_hash"]):
            return False
        key = (row["op"], row["variant"])
        if key not in cache:
            try:
                cache[key] = current_hash(*key)
            except KeyError:
                cache[key] = "<removed>"
        return cache[key] != row["kernel_source_hash"]

    df = df.copy()
    df["stale"] = df.apply(is_stale, axis=1).astype(bool) if len(df) else pd.Series([], dtype=bool)
    return df


def case_key(config_key: str, timer: str | None = None) -> str:
    """The part of a record that names the CASE (what was asked for), as opposed to what the
    heuristic resolved it to: study records (sweeps, the timer study) by their whole config plus
    the timer; grid records only by the knobs a plan sets explicitly (the store path)."""
    c = json.loads(config_key) if config_key else {}
    if "study" in c:
        return json.dumps({**c, "_timer": timer}, sort_keys=True)
    return json.dumps({k: c[k] for k in ("tma_store", "what") if k in c}, sort_keys=True)


def latest(df, keys=("op", "variant", "dtype") + SHAPE_COLUMNS):
    """Keep the newest record of each case (append-only stores keep history). A case is
    (op, variant, dtype, the shape columns, case_key(config)): M, N, K, and for group_norm /
    instance_norm B, C, D, H, W, G and layout (keys missing from df are skipped); newest = latest
    timestamp, then run_id."""
    if not len(df):
        return df
    d = df.assign(_case=[case_key(c, t) for c, t in zip(df["config_key"], df["timer"])])
    keys = [k for k in keys if k in d.columns] + ["_case"]
    d = d.sort_values(["timestamp", "run_id"], kind="stable")
    return d.groupby(keys, dropna=False, sort=False).tail(1).drop(columns="_case").reset_index(drop=True)


def atomic_write_text(path, text: str) -> None:
    """Write a whole file atomically (temp file in the same folder, then rename)."""
    import tempfile
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
