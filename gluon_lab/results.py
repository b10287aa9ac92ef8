"""Record schema, append-only JSONL store + compressed history, provenance, kernel-source hashes and staleness.

One measured case = one Record = one JSON line in results/<gpu-slug>/<notebook>.jsonl.

Writing. Writes are append-only: each append takes an exclusive lock (fcntl.flock LOCK_EX) on the
file and writes all lines with one O_APPEND write, so concurrent writers never interleave partial
lines. append_records checks field types by the same rules as reading (a record a reader would
refuse is never written); physics is checked on reading only. Record stores must be written with
append_records only: a reader takes an unterminated, unparsable last line it sees under its lock
for the leftover of a dead writer (below).

Reading (read_records / load) takes a shared lock (LOCK_SH) while it reads, so it never sees a
line a writer is still writing, decodes the file line by line and checks every line:

* UTF-8 and JSON: a line that is not valid UTF-8 or not a JSON object is malformed.
* types: every field has one type (TYPES): str, int (not bool), float (int accepted; finite; not
  bool), bool (true/false: not a string, not 0/1), dict; null only where the field is optional.
  op, variant, pattern, dtype, shape are required; config and schema may be absent (defaults)
  but not null. shape entries are integers, except the string entries in SHAPE_STRING_ENTRIES
  (the group_norm / instance_norm "layout"). ms_* > 0; bytes, flops >= 0; timer one of TIMERS.
* unknown fields are kept, not refused or dropped: they go to Record.extra (a dict; the "extra"
  column of load's DataFrame) and to_json writes them back as top-level fields.
* physics is recomputed, never trusted: gbps = bytes / (ms_median * 1e-3) / 1e9, tflops =
  flops / (ms_median * 1e-3) / 1e12, sol_datasheet_pct = 100 * tflops / datasheet bf16 TFLOP/s for
  compute-bound ops (matmul), else 100 * gbps / datasheet HBM GB/s, with the datasheet of the
  record's gpu_name (device.lookup_spec). A stored gbps / tflops / sol_datasheet_pct that differs
  from the recomputed one by more than REL_TOL (relative) is malformed; a missing one is filled in
  load's DataFrame (the Records read_records returns stay as stored). A value that cannot be
  recomputed (bytes or ms_median null, no datasheet for the GPU) is kept as stored. "host-loop"
  records time the host per call: no bandwidth meaning, so their gbps / tflops / sol_datasheet_pct
  must be null. A gbps above the datasheet bandwidth, a tflops above the datasheet peak or a SOL
  above 100% is a PhysicsError: the measurement is wrong, not the GPU.

History. Superseded runs do not stay in the live store: archive() / archive_store() (`python -m
gluon_lab archive`, run by adopt) moves every run live_runs() does not keep, whole, to
<notebook>.history.jsonl.gz beside it (gzip of the same JSON lines; mtime 0, so the same records
give the same bytes) and back if the rule keeps it again. load() and read_records() read the live
store only unless history=True: then the history's lines come first, checked by the same rules,
errors naming <notebook>.history.jsonl.gz:LINE (LINE of the decompressed lines; a damaged or cut
gzip stream is an error at the line where it breaks). Both files are read under the store's shared
lock; archive holds the exclusive lock and replaces them by rename, history first, so a reader sees
each record once (a record a crash left in both is read from the store) and a writer or reader that
waited for the lock of the replaced file opens the new one (_lock_open).

Every error names file:line and the rule: MalformedRecordError (or PhysicsError) with on_error=
"raise"; with on_error="warn" a warning per bad line, the line left out and the message listed in
``df.attrs["malformed"]``; never silently dropped. Two cases are not errors:

* a torn LAST line (the file does not end in "\\n" and its last line is not valid JSON: a writer
  was killed mid-write) is quarantined: under the exclusive lock it is appended to
  ``<file>.rejected`` (after a "# ..." note saying where it came from) and cut off the store with
  ftruncate (the inode stays, so other processes' locks stay valid), with a warning naming
  file:line; the load goes on. append_records does the same before it appends, so a torn line
  never ends up in the middle of a store (an unterminated last line that IS valid JSON is kept
  and the append starts a new line). A malformed line in the middle of a file is corruption and
  raises as above.
* a folder given to load() is searched for *.jsonl measurement stores; files whose name is in
  NON_RECORD_STORES (sanitizer.jsonl: ci/sanitize.py's lines, read by notebook.load_sanitizer)
  are skipped. Naming such a file explicitly raises NotARecordStoreError.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import functools
import json
import math
import os
import platform
import subprocess
import uuid
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

# 1: first records (2026-11-29). 2: the cudagraph timer keeps every captured call's outputs alive,
# so variants that allocate their output write K distinct buffers (schema-1 graph records of such
# variants may have reused one output buffer across the K calls: see notebook.graph_output_caveat).
SCHEMA_VERSION = 2
TIMERS = ("do_bench-l2flush", "cudagraph", "host-loop")  # host-loop: wall time per call of a Python loop
HOST_TIMERS = ("host-loop",)  # ms_median is host time per call: no bandwidth / FLOP rate meaning
REL_TOL = 0.01  # a stored gbps / tflops / sol_datasheet_pct may differ from the recomputed one by 1%
SHAPE_STRING_ENTRIES = ("layout",)  # shape entries that are strings ("nchw" | "channels_last"); others: ints
# Stores in results/<gpu>/ that hold other lines than Records: load() of a folder skips them.
HISTORY_SUFFIX = ".history.jsonl.gz"  # <notebook>.history.jsonl.gz: the superseded runs of <notebook>.jsonl
NON_RECORD_STORES = {
    "sanitizer.jsonl": "compute-sanitizer runs written by ci/sanitize.py; read them with "
                       "gluon_lab.notebook.load_sanitizer",
}


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
    # where it ran (gluon_lab.shard): the CUDA ordinal of the GPU on its host, that GPU's UUID, and "I/N", the
    # shard of the run that measured it ("0/1": an unsharded run); absent on records older than sharding
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    shard: str | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know: kept, written back as they were

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        for k in OMIT_IF_NULL:  # a record older than these fields is written back as it was read
            if d[k] is None:
                del d[k]
        extra = d.pop("extra")
        clash = sorted(set(extra) & set(d))
        if clash:
            raise ValueError(f"extra field(s) {clash} have the names of Record fields")
        return json.dumps({**d, **extra}, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """A Record from one parsed line; ValueError naming the field and the rule when a field
        is missing or has the wrong type. Fields Record does not know go to ``extra``."""
        if not isinstance(d, dict):
            raise ValueError(f"a record must be a JSON object, got {type(d).__name__}")
        missing = [k for k in REQUIRED if k not in d]
        if missing:
            raise ValueError(f"missing required field(s) {missing}")
        known = {k: v for k, v in d.items() if k in TYPES}
        extra = {k: v for k, v in d.items() if k not in TYPES}
        for k, v in known.items():
            check_field(k, v)
        if known.get("timer") is not None and known["timer"] not in TIMERS:
            raise ValueError(f"field 'timer' must be one of {TIMERS} or null, got {_show(known['timer'])}")
        return cls(**known, extra=extra)

    def validate(self) -> "Record":
        """Check this Record by the rules a reader applies to its line (types; not physics)."""
        return Record.from_dict(json.loads(self.to_json()))


# field -> (type, optional). float accepts int; int and float refuse bool; bool refuses everything else.
TYPES: dict[str, tuple[str, bool]] = {
    "op": ("str", False), "variant": ("str", False), "pattern": ("str", False), "shape": ("dict", False),
    "dtype": ("str", False), "config": ("dict", False),
    "ms_median": ("float", True), "ms_min": ("float", True), "ms_max": ("float", True), "n_reps": ("int", True),
    "timer": ("str", True), "bytes": ("int", True), "flops": ("int", True), "gbps": ("float", True),
    "tflops": ("float", True), "sol_datasheet_pct": ("float", True), "sol_measured_pct": ("float", True),
    "max_abs_err": ("float", True), "rel_err": ("float", True), "passed": ("bool", True),
    "gpu_name": ("str", True), "sm_count": ("int", True), "driver": ("str", True), "cuda": ("str", True),
    "torch": ("str", True), "triton": ("str", True), "python": ("str", True), "git_commit": ("str", True),
    "kernel_source_hash": ("str", True), "run_id": ("str", True), "timestamp": ("str", True),
    "notes": ("str", True), "schema": ("int", False),
    "gpu_index": ("int", True), "gpu_uuid": ("str", True), "shard": ("str", True),
}
OMIT_IF_NULL = ("gpu_index", "gpu_uuid", "shard")
REQUIRED = ("op", "variant", "pattern", "shape", "dtype")
POSITIVE = ("ms_median", "ms_min", "ms_max")  # > 0 when present
NON_NEGATIVE = ("bytes", "flops")  # >= 0 when present
_TYPE_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true/false",
               "dict": "an object"}
assert set(TYPES) == {f.name for f in dataclasses.fields(Record)} - {"extra"}


def _show(v) -> str:
    """A value as it looks in the JSON line ("false", 4096.5, NaN)."""
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _is_type(v, kind: str) -> bool:
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "dict":
        return isinstance(v, dict)
    raise AssertionError(kind)


def check_field(name: str, v) -> None:
    """ValueError unless v is a valid value of Record field `name` (see TYPES)."""
    kind, optional = TYPES[name]
    if v is None:
        if not optional:
            raise ValueError(f"field {name!r} must be {_TYPE_WORDS[kind]}, got null")
        return
    if not _is_type(v, kind):
        raise ValueError(f"field {name!r} must be {_TYPE_WORDS[kind]}{' or null' if optional else ''}, got {_show(v)}")
    if kind == "float" and not math.isfinite(v):
        raise ValueError(f"field {name!r} must be a finite number, got {_show(v)}")
    if name in POSITIVE and v <= 0:
        raise ValueError(f"field {name!r} must be > 0, got {_show(v)}")
    if name in NON_NEGATIVE and v < 0:
        raise ValueError(f"field {name!r} must be >= 0, got {_show(v)}")
    if name == "gpu_index" and v < 0:
        raise ValueError(f"field 'gpu_index' must be >= 0 (a CUDA ordinal), got {_show(v)}")
    if name == "shard":  # "I/N" (gluon_lab.shard.parse_shard's rule; not imported: results sits below it)
        parts = v.split("/")
        if len(parts) != 2 or not all(x.isdigit() for x in parts):
            raise ValueError(f"field 'shard' must be 'I/N' (shard I of N), got {_show(v)}")
        if int(parts[1]) < 1 or int(parts[0]) >= int(parts[1]):
            raise ValueError(f"field 'shard' {_show(v)}: N must be >= 1 and I in 0..N-1")
    if name == "shape":
        for k, x in v.items():
            if k in SHAPE_STRING_ENTRIES:
                if not isinstance(x, str):
                    raise ValueError(f"field 'shape' entry {k!r} must be a string, got {_show(x)}")
            elif not _is_type(x, "int"):
                raise ValueError(f"field 'shape' entry {k!r} must be an integer, got {_show(x)}")


class RecordError(ValueError):
    """A line of a store that cannot be trusted (the message starts with file:line)."""


class MalformedRecordError(RecordError):
    """A line that is not a valid Record: encoding, JSON, a field's type, fields that contradict
    each other (a stored gbps that bytes / ms_median does not give)."""


class PhysicsError(RecordError):
    """A record claims more than the datasheet allows: the measurement is wrong, not the GPU."""


class NotARecordStoreError(ValueError):
    """A file that is not a measurement store (NON_RECORD_STORES) was named to read_records/load."""


# ----------------------------------------------------------------------------------------------
# physics: what a record's own bytes, flops and ms_median say

def _missing(x) -> bool:
    """None, NaN or pandas.NA."""
    if x is None:
        return True
    try:
        return bool(x != x)
    except TypeError:  # pandas.NA
        return True


@functools.lru_cache(maxsize=None)
def _compute_bound(op) -> bool:
    from . import specs
    try:
        return bool(specs.get(op).compute_bound)
    except (ValueError, KeyError, TypeError):  # copy ceilings, ops no longer defined: bandwidth-bound
        return False


def physics(fields: Mapping) -> dict:
    """Recompute the physics of one record (a dict, a DataFrame row, or vars(Record)).

    Returns {"gbps", "tflops", "sol_datasheet_pct"}: the recomputed value where the record's bytes /
    flops / ms_median (and the datasheet of its gpu_name) allow it, else the stored value (None if
    none); plus "recomputed" (the names that were recomputed), "spec" (device.Spec or None),
    "compute_bound" and "host" (a host-timed record: nothing is recomputed). The SOL is against the
    datasheet bf16 TFLOP/s for compute-bound ops, else against the datasheet HBM GB/s."""
    from . import device
    get = (lambda k: None if _missing(fields.get(k)) else fields.get(k))  # noqa: E731
    gpu = get("gpu_name")
    spec = device.lookup_spec(gpu) if isinstance(gpu, str) else None
    cb = _compute_bound(get("op"))
    out: dict[str, Any] = {k: get(k) for k in ("gbps", "tflops", "sol_datasheet_pct")}
    out.update(recomputed=set(), spec=spec, compute_bound=cb, host=get("timer") in HOST_TIMERS)
    if out["host"]:
        return out
    ms, nb, nfl = get("ms_median"), get("bytes"), get("flops")
    if ms is not None and ms > 0:
        if nb is not None:
            out["gbps"] = float(nb) / (ms * 1e-3) / 1e9
            out["recomputed"].add("gbps")
        # flops == 0 (copies): no FLOP rate; bench stores None, so 0.0 is only used to check a stored one
        if nfl is not None and (nfl > 0 or out["tflops"] is not None):
            out["tflops"] = float(nfl) / (ms * 1e-3) / 1e12
            out["recomputed"].add("tflops")
    basis = out["tflops"] if cb else out["gbps"]
    if spec is not None and basis is not None:
        out["sol_datasheet_pct"] = 100 * basis / (spec.bf16_tflops if cb else spec.hbm_gbps)
        out["recomputed"].add("sol_datasheet_pct")
    return out


def physics_violations(p: dict, limit_pct: float = 100.0) -> list[str]:
    """What in physics() output exceeds limit_pct of the datasheet (messages; empty if nothing)."""
    spec, bad = p["spec"], []
    name = f"the {spec.name} datasheet" if spec else "the datasheet"
    if spec is not None:
        for k, peak, unit, how in (("gbps", spec.hbm_gbps, "GB/s", "bytes / ms_median"),
                                   ("tflops", spec.bf16_tflops, "TFLOP/s", "flops / ms_median")):
            v = p[k]
            if v is not None and 100 * v / peak > limit_pct:
                src = how if k in p["recomputed"] else "as stored"
                bad.append(f"{k} {v:.6g} ({src}) is {100 * v / peak:.1f}% of {name} {peak:.6g} {unit}")
    s = p["sol_datasheet_pct"]
    if s is not None and s > limit_pct and not bad:
        src = "recomputed" if "sol_datasheet_pct" in p["recomputed"] else "as stored"
        bad.append(f"sol_datasheet_pct {s:.1f}% ({src})")
    if bad:
        bad[-1] += f": a measurement cannot exceed {limit_pct:.0f}% of the datasheet"
    return bad


def _verify_physics(rec: Record) -> dict:
    """Check a Record's stored gbps / tflops / sol_datasheet_pct against physics(); return the
    values to fill ({name: recomputed} for the missing ones). MalformedRecordError-worthy problems
    raise ValueError, impossible ones PhysicsError (both without file:line: the caller adds it)."""
    d = {f: getattr(rec, f) for f in ("op", "variant", "timer", "gpu_name", "bytes", "flops", "ms_median",
                                      "gbps", "tflops", "sol_datasheet_pct")}
    p = physics(d)
    if p["host"]:
        for k in ("gbps", "tflops", "sol_datasheet_pct"):
            if d[k] is not None:
                raise ValueError(f"field {k!r} must be null for timer {rec.timer!r} (host time per call has no "
                                 f"bandwidth meaning), got {_show(d[k])}")
        return {}
    spec, cb = p["spec"], p["compute_bound"]
    sol_how = (f"100 * {'tflops' if cb else 'gbps'} / the {spec.name} datasheet "
               f"{spec.bf16_tflops if cb else spec.hbm_gbps:g} {'TFLOP/s' if cb else 'GB/s'}") if spec else ""
    how = {"gbps": "bytes / ms_median", "tflops": "flops / ms_median", "sol_datasheet_pct": sol_how}
    fill = {}
    for k in ("gbps", "tflops", "sol_datasheet_pct"):
        if k not in p["recomputed"]:
            continue
        st, rc = d[k], p[k]
        if st is None:
            fill[k] = rc
        elif not math.isclose(st, rc, rel_tol=REL_TOL, abs_tol=1e-12):
            rel = abs(st - rc) / abs(rc) if rc else math.inf
            raise ValueError(f"field {k!r} is {st:.6g} but {how[k]} gives {rc:.6g} (they differ by {100 * rel:.3g}%; "
                             f"the rule: within {100 * REL_TOL:g}%)")
    bad = physics_violations(p)
    if bad:
        raise PhysicsError(f"{rec.op}/{rec.variant} {_show(rec.shape)} timer {rec.timer}: " + "; ".join(bad))
    return fill


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


def provenance(run_id: str | None = None, shard: str = "0/1") -> dict:
    """Fields every Record of one run shares: GPU (name, its CUDA ordinal on the host, UUID), driver, versions,
    commit, run id, shard ("I/N": which part of a sharded run; "0/1" unsharded), time."""
    from . import device
    prov: dict[str, Any] = {"python": platform.python_version(), "git_commit": git_commit(),
                            "run_id": run_id or new_run_id(), "shard": shard,
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
        prov.update(gpu_name=info["gpu_name"], sm_count=info["sm_count"], driver=info["driver"], cuda=info["cuda"],
                    gpu_index=info.get("host_index"), gpu_uuid=info.get("uuid"))
    return prov


# ----------------------------------------------------------------------------------------------
# JSONL store

def store_path(results_dir: str | os.PathLike, gpu_slug: str, notebook: str) -> Path:
    return Path(results_dir) / gpu_slug / f"{notebook}.jsonl"


def rejected_path(path: str | os.PathLike) -> Path:
    """Where torn trailing lines of a store are quarantined: <file>.rejected (not *.jsonl, so a
    folder load never reads it)."""
    path = Path(path)
    return path.with_name(path.name + ".rejected")


def _pread_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, off = [], 0
    while off < size:
        b = os.pread(fd, min(1 << 24, size - off), off)
        if not b:
            break
        chunks.append(b)
        off += len(b)
    return b"".join(chunks)


def _tail_start(fd: int, size: int) -> int:
    """Offset where the last line of the file begins (just after the last b"\\n", or 0)."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        i = os.pread(fd, end - start, start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def _is_torn(tail: bytes) -> bool:
    """An unterminated last line is torn when it is not valid JSON (blank is not torn)."""
    if not tail.strip():
        return False
    try:
        json.loads(tail.decode("utf-8"))
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return True
    return False


def _quarantine_locked(fd: int, path: Path) -> tuple[int, Path] | None:
    """With LOCK_EX held on fd (opened read-write): if the file's last line is torn, append it to
    <file>.rejected and cut it off the store. Returns (its line number, the .rejected path) or None."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start = _tail_start(fd, size)
    tail = os.pread(fd, size - start, start)
    if not _is_torn(tail):
        return None
    lineno = _pread_all(fd)[:start].count(b"\n") + 1
    rej = rejected_path(path)
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    note = (f"# {when} quarantined from {path}:{lineno} (bytes {start}..{size}): torn trailing line "
            "(no newline at the end of the file and not valid JSON: a writer died mid-line)\n").encode()
    rfd = os.open(rej, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(rfd, note + tail + b"\n")
        os.fsync(rfd)
    finally:
        os.close(rfd)
    os.ftruncate(fd, start)  # one call: a reader (LOCK_SH) sees the line either there or gone
    os.fsync(fd)
    return lineno, rej


def _warn_quarantined(path: Path, q: tuple[int, Path], stacklevel: int) -> None:
    warnings.warn(f"{path}:{q[0]}: torn trailing line (no newline at the end of the file, not valid JSON: a writer "
                  f"died mid-line) moved to {q[1]}; the rest of the file is kept", stacklevel=stacklevel + 1)


def _lock_open(path: Path, flags: int, op: int) -> int:
    """os.open(path, flags) with flock(op) held on the file the path names NOW. archive() replaces a
    store by rename while it holds LOCK_EX on the old file, so a process that opened the old file
    and waited for its lock would read (or append to) a file no path names any more: after the
    lock is granted the inode is compared with the path's, and on a mismatch the path is opened
    again. Returns the locked fd (the caller unlocks and closes it)."""
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, op)
            st = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if now is None and not flags & os.O_CREAT:
            raise FileNotFoundError(f"{path}: removed while waiting for its lock")


def quarantine_torn_tail(path: str | os.PathLike) -> tuple[int, Path] | None:
    """Take the exclusive lock and quarantine a torn last line of path (see the module docstring).
    Returns (line number, .rejected path) when one was moved, else None."""
    path = Path(path)
    fd = _lock_open(path, os.O_RDWR, fcntl.LOCK_EX)
    try:
        try:
            return _quarantine_locked(fd, path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_records(path: str | os.PathLike, records: Iterable[Record | dict]) -> int:
    """Append records as JSON lines under an exclusive lock with a single O_APPEND write.
    Every record is checked first (Record.from_dict / Record.validate: ValueError naming the field);
    a torn last line left by a killed writer is quarantined first (warning), so it never ends up
    in the middle of the store."""
    lines = []
    for r in records:
        rec = r.validate() if isinstance(r, Record) else Record.from_dict(r)
        lines.append(rec.to_json() + "\n")
    if not lines:
        return 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(lines).encode()
    fd = _lock_open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, fcntl.LOCK_EX)
    try:
        try:
            q = _quarantine_locked(fd, path)
            if q:
                _warn_quarantined(path, q, stacklevel=2)
            # An unterminated last line that is valid JSON stays: our first line must not glue onto it.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
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


def history_path(path: str | os.PathLike) -> Path:
    """The history file beside a live store: results/<gpu>/<notebook>.jsonl ->
    results/<gpu>/<notebook>.history.jsonl.gz (gzip of JSON lines; see archive())."""
    path = Path(path)
    if path.name.endswith(HISTORY_SUFFIX):
        return path
    if not path.name.endswith(".jsonl"):
        raise ValueError(f"{path}: a record store is named <notebook>.jsonl")
    return path.with_name(path.name[: -len(".jsonl")] + HISTORY_SUFFIX)


def live_path(path: str | os.PathLike) -> Path:
    """The live store a history file belongs to (the inverse of history_path)."""
    path = Path(path)
    if not path.name.endswith(HISTORY_SUFFIX):
        return path
    return path.with_name(path.name[: -len(HISTORY_SUFFIX)] + ".jsonl")


def _read_file(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def _read_shared(path: Path, with_history: bool = False) -> tuple[bytes, bytes | None]:
    """(the store's bytes, its history file's bytes or None), both read under one shared lock on
    the store: archive() moves records between the two under the exclusive lock, so a reader sees
    each record in exactly one of them. The history is read only when asked for (with_history)."""
    fd = _lock_open(path, os.O_RDONLY, fcntl.LOCK_SH)  # writers hold LOCK_EX while they write
    try:
        try:
            data = _pread_all(fd)
            hist = _read_file(history_path(path)) if with_history and path.name.endswith(".jsonl") else None
            return data, hist
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_store(path: Path, with_history: bool = False) -> tuple[bytes, bytes | None]:
    """The store's bytes (and its history's, see _read_shared) under a shared lock, after
    quarantining a torn last line (warning)."""
    for _ in range(3):  # another writer may die between our read and our quarantine: look again
        data, hist = _read_shared(path, with_history)
        if not data or data.endswith(b"\n") or not _is_torn(data[data.rfind(b"\n") + 1:]):
            return data, hist
        start = data.rfind(b"\n") + 1
        try:
            q = quarantine_torn_tail(path)
        except OSError as e:  # a read-only store: leave the file alone, skip the line in this load
            lineno = data[:start].count(b"\n") + 1
            warnings.warn(f"{path}:{lineno}: torn trailing line (no newline at the end of "
                          f"the file, not valid JSON) could not be quarantined ({e}); skipped in this load",
                          stacklevel=4)
            return data[:start], hist
        if q:
            _warn_quarantined(path, q, stacklevel=4)
    return _read_shared(path, with_history)


def _gunzip(raw: bytes) -> tuple[bytes, str | None]:
    """The decompressed bytes of a gzip file of one or more members, and None; or, for a damaged
    or cut stream, the bytes decoded before the damage and what is wrong."""
    out, buf = [], raw
    while buf:
        d = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
        try:
            out.append(d.decompress(buf))
            out.append(d.flush())
        except zlib.error as e:
            return b"".join(out), f"not a valid gzip stream ({e})"
        if not d.eof:
            return b"".join(out), "the gzip stream is cut short (no end of stream)"
        buf = d.unused_data
        if buf and not buf.lstrip(b"\0"):  # zero padding after the last member
            break
    return b"".join(out), None


def _check_store_name(path: Path) -> None:
    if path.name in NON_RECORD_STORES:
        raise NotARecordStoreError(f"{path}: not a measurement store ({NON_RECORD_STORES[path.name]}); "
                                   "load() of a folder skips it")


def _bad(e: RecordError, on_error: str, bad: list, stacklevel: int) -> None:
    if on_error == "raise":
        raise e
    warnings.warn(str(e), stacklevel=stacklevel + 1)
    bad.append(str(e))


def _parse(path: Path, data: bytes, on_error: str):
    """Check every line of data (the bytes of path): [(line number, raw line, Record as stored,
    recomputed values to fill)], bad-line messages."""
    out, bad = [], []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise MalformedRecordError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                                           f"column {e.start + 1}: {e.reason})") from None
            try:
                d = json.loads(text)
            except ValueError as e:
                raise MalformedRecordError(f"{path}:{lineno}: not valid JSON: {e}") from None
            try:
                rec = Record.from_dict(d)
                fill = _verify_physics(rec)
            except PhysicsError as e:
                raise PhysicsError(f"{path}:{lineno}: {e}") from None
            except (ValueError, TypeError) as e:
                raise MalformedRecordError(f"{path}:{lineno}: {e}") from None
        except RecordError as e:
            _bad(e, on_error, bad, stacklevel=4)
            continue
        out.append((lineno, raw, rec, fill))
    return out, bad


def _parse_history(path: Path, raw: bytes, on_error: str):
    """_parse of a history file's bytes (gzip): errors name <file>.history.jsonl.gz:LINE, LINE
    counted in the decompressed lines; a damaged gzip stream is an error at the line it cuts."""
    data, damage = _gunzip(raw)
    bad = []
    if damage:
        whole = data[: data.rfind(b"\n") + 1]
        at = whole.count(b"\n") + 1
        e = MalformedRecordError(f"{path}:{at}: {damage}" + ("; the lines before it are kept" if on_error == "warn" else ""))
        if on_error == "raise":  # name the first bad line if one comes before the damage
            _parse(path, whole, "raise")
        _bad(e, on_error, bad, stacklevel=3)
        data = whole
    out, bad2 = _parse(path, data, on_error)
    return out, bad + bad2


def _read_lines(path: Path, on_error: str, history: bool) -> tuple[list, list[str]]:
    """[(source, line number, raw, Record, fill)] of one store (path: a live *.jsonl or a
    *.history.jsonl.gz), bad-line messages. history: also the live store's history file, read
    under the same shared lock, its lines first (they are older). A history line that is also in
    the live store (an archive() that died between its two renames) is read once, from the store."""
    if on_error not in ("raise", "warn"):
        raise ValueError(f"on_error must be 'raise' or 'warn', got {on_error!r}")
    _check_store_name(path)
    if path.name.endswith(HISTORY_SUFFIX):  # a history file named explicitly: it alone
        live, hpath = live_path(path), path
        raw = _read_shared(live, True)[1] if live.exists() else _read_file(path)
        if raw is None:
            raise FileNotFoundError(f"{path}: no such history file")
        rows, bad = _parse_history(hpath, raw, on_error)
        return [(hpath, *r) for r in rows], bad
    history = history and path.name.endswith(".jsonl")  # a store of another name has no history file
    if path.exists():
        data, hist = _read_store(path, with_history=history)
    else:  # only the history is left (read for history=True); no lock to take on a missing store
        data, hist = b"", _read_file(history_path(path)) if history else None
        if hist is None:
            raise FileNotFoundError(f"{path}: no such record store")
    rows, bad = [], []
    if hist is not None:
        hpath = history_path(path)
        live_lines = frozenset(x for x in data.split(b"\n") if x.strip())
        hrows, hbad = _parse_history(hpath, hist, on_error)
        dup = [r for r in hrows if r[1] in live_lines]
        if dup:
            warnings.warn(f"{hpath}: {len(dup)} line(s) are also in {path.name} (an archive was interrupted); "
                          "read once, from the store: `python -m gluon_lab archive` finishes the move", stacklevel=3)
        rows += [(hpath, *r) for r in hrows if r[1] not in live_lines]
        bad += hbad
    lrows, lbad = _parse(path, data, on_error)
    return rows + [(path, *r) for r in lrows], bad + lbad


def read_records(path: str | os.PathLike, on_error: str = "raise",
                 history: bool = False) -> tuple[list[Record], list[str]]:
    """Parse a JSONL store (every rule of the module docstring). on_error: "raise" (the first bad
    line raises MalformedRecordError / PhysicsError naming file:line) or "warn" (a warning per bad
    line, which is left out; the messages are returned). The Records are as stored: the recomputed
    values that fill missing gbps / tflops / sol_datasheet_pct are load()'s. history: also the
    records archived beside it (<notebook>.history.jsonl.gz), first; a history file given as path
    is read alone."""
    rows, bad = _read_lines(Path(path), on_error, history)
    return [r for _, _, _, r, _ in rows], bad


# shape entries load() turns into columns: (M, N[, K]) of row ops and matmul; (B, C, [D,] H, W[, G])
# and the memory layout ("nchw" | "channels_last") of group_norm / instance_norm.
def _shape_columns() -> tuple:
    from . import specs
    return tuple(dict.fromkeys(("M", "N", "K") + specs.shape_columns()))


SHAPE_COLUMNS = _shape_columns()
# A case as compare and archive() see it: results.latest's case (op, variant, dtype, shape, case_key
# of the config) plus the timer: a do_bench and a graph-timed record of one cell are two cases.
CASE_COLUMNS = ("op", "variant", "dtype") + SHAPE_COLUMNS + ("timer",)


def _store_files(paths, history: bool) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            stores = [f for f in sorted(p.rglob("*.jsonl")) if f.name not in NON_RECORD_STORES]
            files.extend(stores)
            if history:  # a history whose live store is gone is still history
                have = set(stores)
                files.extend(h for h in sorted(p.rglob("*" + HISTORY_SUFFIX)) if live_path(h) not in have)
        elif p.exists():
            files.append(p)
        elif history and p.name.endswith(".jsonl") and history_path(p).exists():
            files.append(p)  # every record of it archived (or the store removed): its history
    return files


def _frame(rows, malformed):
    import pandas as pd
    out = []
    for src, lineno, _, r, fill in rows:
        d = dataclasses.asdict(r)
        d.update(fill)
        for k in SHAPE_COLUMNS:
            d[k] = r.shape.get(k)
        d["config_key"] = json.dumps(r.config, sort_keys=True)
        d["source"] = str(src)
        d["line"] = lineno
        out.append(d)
    cols = [f.name for f in dataclasses.fields(Record)] + list(SHAPE_COLUMNS) + ["config_key", "source", "line"]
    df = pd.DataFrame(out, columns=cols)
    for k in SHAPE_COLUMNS:
        if k != "layout":
            df[k] = df[k].astype("Int64")  # integers with <NA> where a record has no such dimension
    df.attrs["malformed"] = malformed
    return df


def load(paths, on_error: str = "raise", history: bool = False):
    """Load one or more JSONL stores (files or folders) into a pandas DataFrame.

    A folder is searched recursively for *.jsonl; files named in NON_RECORD_STORES
    (sanitizer.jsonl) are skipped there, and raise NotARecordStoreError when named explicitly.
    Every line is checked as the module docstring says (read_records); missing gbps / tflops /
    sol_datasheet_pct are filled with the values recomputed from bytes, flops, ms_median and the
    datasheet (a stored one was checked to agree within REL_TOL).

    history=False (the default, what the pages read): the live stores only. history=True: each
    store's superseded runs too (<notebook>.history.jsonl.gz beside it, see archive()), read under
    the store's shared lock and checked line by line like the store (errors name
    <notebook>.history.jsonl.gz:LINE), their rows first. A *.history.jsonl.gz named explicitly is
    read whatever history says.

    Adds columns M, N, K (from shape; row ops and matmul), B, C, D, H, W, G, layout (from shape;
    group_norm / instance_norm), config_key (stable string of config), source (the file: the
    history file for an archived record) and line (its line number; in a history file, of the
    decompressed lines). A dimension a record's shape lacks is <NA>; "extra" holds the fields
    Record does not know (a dict, usually empty).
    ``df.attrs["malformed"]`` lists file:line messages for bad lines (on_error="warn")."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows, malformed = [], []
    for f in _store_files(paths, history):
        got, bad = _read_lines(f, on_error, history)
        rows.extend(got)
        malformed.extend(bad)
    return _frame(rows, malformed)


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
    c.pop("sm_clock_mhz", None)  # a measurement (bench records it beside compute-bound timings), not the case
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
