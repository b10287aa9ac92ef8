"""Live records and history: which runs of a store the pages can show (live_runs), and the move of the
superseded ones, whole, to <notebook>.history.jsonl.gz beside it (archive_store, `python -m gluon_lab_old
archive`). Readers of both files are in gluon_lab_old.results (load(..., history=True))."""
from __future__ import annotations

import fcntl
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .results import (
    CASE_COLUMNS, HISTORY_SUFFIX, NON_RECORD_STORES, _check_store_name, _frame, _is_torn, _lock_open, _parse,
    _parse_history, _pread_all, _quarantine_locked, _read_file, _warn_quarantined, case_key, history_path, live_path)


def artifact_runs(store: str | os.PathLike) -> set[str]:
    """Run ids named by the store's artifacts, results/<gpu>/<notebook>.*.json (a timeline's
    top-level "run_id"): the pages show those runs' records beside the artifact."""
    store = live_path(store)
    stem = store.name[: -len(".jsonl")]
    out = set()
    for a in sorted(store.parent.glob(stem + ".*.json")):
        try:
            d = json.loads(a.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and isinstance(d.get("run_id"), str):
            out.add(d["run_id"])
    return out


def live_runs(df, pinned: Iterable[str] = ()) -> set[str]:
    """The runs of one store (a load() DataFrame of ALL its records, live and history) that stay in
    the live file; every other run is superseded history, which archive() moves to
    <notebook>.history.jsonl.gz. A run stays live while

    1. it holds the newest record of a case, or the newest record of a case that passed its
       check. A case is compare's: op, variant, dtype, the shape columns, the timer and
       case_key(config) (the config minus what a record only measured, e.g. sm_clock_mhz; grid
       records by the knobs a plan sets). results.latest's cases are these without the timer, so
       every record a page takes per case (latest(), newest_only) is live, and so is the newest
       passing one a page that drops failures takes;
    2. within some (op, dtype, study) group (study: the config's "study", else "grid") no later run
       holds every variant it holds there: notebook.newest_run(mask, require=...) takes the newest
       run holding the variants a section needs, so such a run can still be the one a section
       shows even when each of its cases was re-measured by some later, partial run;
    3. it is the newest run (ceilings aside), or the run compare's `previous` picks for it (the
       pair a page's "Compare runs" section shows by default), or it is in `pinned` (the runs a
       store's artifacts name, artifact_runs()).

    Records without a run_id are always live. Whole runs move, never single records: a page shows
    one run's records side by side (newest_run), takes that run's ceilings and copies by run_id,
    and compare pairs whole runs; a run cut in two would show a section half of itself, or make
    `previous` pick another run. Everything else that names older runs (compare --list, previous,
    explicit run ids, run= / compare_to= on a page, the provenance table, adopt's
    already-adopted check, the selection table) reads the history too (load(history=True))."""
    live = {str(r) for r in pinned}
    d = df[df["run_id"].notna()] if len(df) else df
    if not len(d):
        return live
    d = d.assign(_case=[case_key(c, t) for c, t in zip(d["config_key"], d["timer"])])
    d = d.sort_values(["timestamp", "run_id"], kind="stable")
    keys = [k for k in CASE_COLUMNS if k in d.columns] + ["_case"]
    live |= set(d.groupby(keys, dropna=False, sort=False).tail(1)["run_id"])
    ok = d[d["passed"].eq(True)]
    if len(ok):
        live |= set(ok.groupby(keys, dropna=False, sort=False).tail(1)["run_id"])
    study = d["config_key"].map(lambda c: json.loads(c).get("study", "grid") if c else "grid")
    for _, g in d.assign(_study=study).groupby(["op", "dtype", "_study"], dropna=False, sort=False):
        last = g.groupby("run_id")["timestamp"].max()
        held = g.groupby("run_id")["variant"].agg(frozenset)
        order = sorted(held.index, key=lambda r: (str(last[r]), r))
        for i, r in enumerate(order):
            if not any(held[r] <= held[o] for o in order[i + 1:]):
                live.add(r)
    from . import compare  # compare imports this module
    runs = compare.runs_table(d[d["pattern"] != "ceiling"])
    if len(runs):
        live.add(runs["run_id"].iloc[-1])
        pair = compare.default_pair(d)
        if pair:
            live.update(pair)
    return live


@dataclass
class ArchivePlan:
    """What archive_store() moved (or, with check, would move) between a store and its history."""
    store: Path
    history: Path
    moved: dict  # run_id -> records moved from the store to the history
    restored: dict  # run_id -> records moved back to the store (the rule keeps them live again)
    dropped: int  # history lines that were also in the store (an interrupted archive): removed
    live_runs: int
    live_records: int
    history_runs: int
    history_records: int

    @property
    def changes(self) -> bool:
        return bool(self.moved or self.restored or self.dropped)

    def describe(self, check: bool = False) -> str:
        where = (f"live: {self.live_runs} run(s), {self.live_records} records; " +
                 (f"history {self.history.name}: {self.history_runs} run(s), {self.history_records} records"
                  if self.history_records else "no history"))
        if not self.changes:
            return f"{self.store}: nothing to move ({where})"
        verb = "would move" if check else "moved"
        parts = []
        if self.moved:
            parts.append(f"{verb} {len(self.moved)} superseded run(s), {sum(self.moved.values())} records, to "
                         f"{self.history.name} ({', '.join(sorted(self.moved))})")
        if self.restored:
            parts.append(f"{verb} {len(self.restored)} run(s), {sum(self.restored.values())} records, back from "
                         f"{self.history.name} ({', '.join(sorted(self.restored))})")
        if self.dropped:
            parts.append(f"{'would drop' if check else 'dropped'} {self.dropped} history line(s) also in the store")
        return f"{self.store}: " + "; ".join(parts) + f" ({'after' if not check else 'then'} {where})"


def _replace_file(path: Path, data: bytes | None, mode: int = 0o644) -> None:
    """Replace path by data atomically (a temp file in its folder, fsync, rename); None removes it."""
    import tempfile
    if data is None:
        if path.exists():
            os.remove(path)
    else:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _gzip_lines(lines: list[bytes]) -> bytes | None:
    """The bytes of a history file holding lines; the same lines give the same bytes (mtime 0, no
    file name, level 9). None for no lines (no file)."""
    import gzip
    return gzip.compress(b"".join(x + b"\n" for x in lines), compresslevel=9, mtime=0) if lines else None


def archive_store(path: str | os.PathLike, check: bool = False) -> ArchivePlan:
    """Move the superseded runs of one store (live_runs() of all its records, live and history) to
    <notebook>.history.jsonl.gz, and runs the rule keeps live back to the store. Idempotent: the
    split is a function of the records and the store's artifacts, so a second call moves nothing
    and writes nothing. check: only say what would move (nothing is written).

    Under the store's exclusive lock (appenders wait; readers of store + history hold the shared
    lock, so they see each record in one of the two): a torn last line is quarantined first
    (as append_records does), every line of both files is checked (a bad line raises, naming
    file:line, and nothing moves), then the files are replaced by rename, history first: every
    record is in at least one of them at every moment, and a record that a crash left in both is
    read once (from the store) until the next archive removes the copy. Waiting writers and
    readers notice the rename and open the new store (_lock_open)."""
    store = live_path(path)
    hpath = history_path(store)
    _check_store_name(store)
    if not store.exists() and not hpath.exists():
        raise FileNotFoundError(f"{store}: no such record store")
    if check and not store.exists():
        fd = None
    else:
        fd = _lock_open(store, os.O_RDONLY if check else os.O_RDWR | os.O_CREAT,
                        fcntl.LOCK_SH if check else fcntl.LOCK_EX)
    try:
        if fd is None:
            data, mode = b"", 0o644
        else:
            if not check:
                q = _quarantine_locked(fd, store)
                if q:
                    _warn_quarantined(store, q, stacklevel=2)
            data, mode = _pread_all(fd), os.fstat(fd).st_mode & 0o777
            if data and not data.endswith(b"\n") and _is_torn(data[data.rfind(b"\n") + 1:]):
                data = data[: data.rfind(b"\n") + 1]  # check: a torn tail moves nowhere
        hist = _read_file(hpath)
        lrows, _ = _parse(store, data, "raise")
        hrows, _ = _parse_history(hpath, hist, "raise") if hist is not None else ([], [])
        in_store = frozenset(raw for _, raw, _, _ in lrows)
        dropped = sum(raw in in_store for _, raw, _, _ in hrows)
        hrows = [r for r in hrows if r[1] not in in_store]
        keep = live_runs(_frame([(hpath, *r) for r in hrows] + [(store, *r) for r in lrows], []),
                         pinned=artifact_runs(store))

        def live(rec):
            return rec.run_id is None or rec.run_id in keep

        restored = [(raw, rec) for _, raw, rec, _ in hrows if live(rec)]
        kept_hist = [(raw, rec) for _, raw, rec, _ in hrows if not live(rec)]
        moved = [(raw, rec) for _, raw, rec, _ in lrows if not live(rec)]
        new_live = restored + [(raw, rec) for _, raw, rec, _ in lrows if live(rec)]
        new_hist = kept_hist + moved
        def count(rs) -> dict:
            return dict(sorted(Counter(r.run_id for _, r in rs).items()))

        plan = ArchivePlan(store, hpath, count(moved), count(restored), dropped,
                           len({r.run_id for _, r in new_live}), len(new_live),
                           len({r.run_id for _, r in new_hist}), len(new_hist))
        if check or not plan.changes:
            return plan
        # history first, holding every line the store may still hold, then the store, then the
        # history without the lines that went back: no moment without a record
        _replace_file(hpath, _gzip_lines([raw for raw, _ in kept_hist + restored + moved]), mode)
        _replace_file(store, b"".join(raw + b"\n" for raw, _ in new_live), mode)
        if restored:
            _replace_file(hpath, _gzip_lines([raw for raw, _ in new_hist]), mode)
        return plan
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def archive(results_dir: str | os.PathLike, check: bool = False) -> list[ArchivePlan]:
    """archive_store() every record store under results_dir (*.jsonl but NON_RECORD_STORES, and
    history files whose store is gone). Returns the plans, one per store."""
    root = Path(results_dir)
    stores = [f for f in sorted(root.rglob("*.jsonl")) if f.name not in NON_RECORD_STORES]
    have = set(stores)
    stores += [live_path(h) for h in sorted(root.rglob("*" + HISTORY_SUFFIX)) if live_path(h) not in have]
    return [archive_store(s, check=check) for s in sorted(stores)]
