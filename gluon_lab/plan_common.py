"""The steps every notebook's measurement plan shares (gluon_lab.experiments, gluon_lab.backward_plan): one
measurement session over a list of cases, whether a variant takes a shape with given knobs, and the
INSTRUMENT builds' %globaltimer stamps (record_stamps) saved beside the records (save_timeline)."""
from __future__ import annotations

import dataclasses


def measure_plan(notebook: str, results_dir: str, quick: bool, cases):
    """One measurement session of a notebook: ceilings first (small ones when quick), then every
    case, appended to the store as it goes. Returns (records, session). GLUON_LAB_EXCLUDE_VARIANTS /
    GLUON_LAB_EXCLUDE_OPS (comma-separated) leave those variants' / ops' cases out of a run (a time-limited
    device call); GLUON_LAB_WHERE (bench --where) keeps only the cases it matches (where_matches)."""
    import os
    from .bench import Session
    skip = {v for v in os.environ.get("GLUON_LAB_EXCLUDE_VARIANTS", "").split(",") if v}
    skip_ops = {v for v in os.environ.get("GLUON_LAB_EXCLUDE_OPS", "").split(",") if v}
    where = parse_where(os.environ.get("GLUON_LAB_WHERE", ""))
    cases = [c for c in cases if c.get("variant") not in skip and c.get("op") not in skip_ops
             and where_matches(c, where)]
    s = Session(notebook, results_dir, **({"copy_gib": 0.5, "matmul_n": 4096} if quick else {}))
    recs = list(s.records)
    s.save()
    recs += s.sweep(cases, desc=notebook)
    return recs, s


WHERE_KEYS = ("op", "variant", "dtype", "study")  # besides the shape's own keys (M, N, K, Nb, C, ...)


def parse_where(text: str) -> list[dict]:
    """bench --where: 'M=5000,N=5000,K=5000;op=matmul' -> [{"M": "5000", ...}, {"op": "matmul"}]: clauses
    split by ';' (a case matching any clause is kept), each a comma-separated list of KEY=VALUE that must all
    hold. Keys are a case's shape keys or one of WHERE_KEYS; '' keeps every case."""
    out = []
    for clause in (c.strip() for c in text.split(";")):
        if not clause:
            continue
        terms = {}
        for term in (t.strip() for t in clause.split(",")):
            key, eq, value = (x.strip() for x in term.partition("="))
            if not eq or not key or not value:
                raise ValueError(f"--where: {term!r} in {clause!r} is not KEY=VALUE (e.g. 'M=5000,K=4104'; "
                                 "clauses joined by ';')")
            if key in terms:
                raise ValueError(f"--where: {key!r} is given twice in {clause!r} (a case has one value; "
                                 "join alternatives as clauses with ';')")
            terms[key] = value
        out.append(terms)
    return out


def where_matches(case: dict, where: list[dict]) -> bool:
    """Does the plan case match one clause of parse_where's list (every KEY=VALUE of it, compared as text
    against the case's shape, op, variant, dtype or config study)? No clauses: every case matches."""
    if not where:
        return True
    facts = {k: (case.get("config") or {}).get(k) if k == "study" else case.get(k) for k in WHERE_KEYS}
    facts.update(case.get("shape") or {})
    return any(all(k in facts and str(facts[k]) == v for k, v in clause.items()) for clause in where)


def resolves(op: str, variant: str, shape: dict, dtype: str, knobs: dict | None = None) -> bool:
    """Does the variant take this shape with these knobs (its configure hook accepts them)? Plans
    ask the variant instead of importing its config class; a shape it refuses is not a case."""
    from . import registry
    try:
        registry.get_variant(op, variant).resolve(shape, dtype, knobs)
    except ValueError:
        return False
    return True


def record_stamps(launch, configs: dict, fields: int, device: str = "cuda", tags: int = 0) -> dict:
    """Run launch(cfg, trace) twice per config (the first launch compiles) and keep the second
    launch's %globaltimer stamps: {key: {"config", "ns": [[stamps of a block] per block] per CTA]}, in
    ns from the earliest stamp. A program stamps only the blocks it ran (< TRACE_ITERS): the zero
    rows are dropped, and programs that did not exist (grid < TRACE_CTAS) with them. The first `tags`
    fields of a row are labels (kept as written), not times."""
    import torch
    from .kernels.pipelined import TRACE_CTAS, TRACE_ITERS
    out = {}
    for key, cfg in configs.items():
        trace = torch.zeros(TRACE_CTAS * TRACE_ITERS * fields, dtype=torch.int64, device=device)
        for _ in range(2):
            trace.zero_()
            launch(cfg, trace)
        if device == "cuda":
            torch.cuda.synchronize()
        t = trace.view(TRACE_CTAS, TRACE_ITERS, fields).cpu()
        times = t[..., tags:]
        t0 = times[times > 0].min()
        shift = torch.tensor([0] * tags + [int(t0)] * (fields - tags), dtype=t.dtype)
        out[str(key)] = {"config": dataclasses.asdict(cfg),
                         "ns": [p for p in ([(b - shift).tolist() for b in prog if (b > 0).all()] for prog in t) if p]}
    return out


def save_timeline(session, results_dir: str, notebook: str, capture, suffix: str = ".timeline.json") -> None:
    """capture()'s stamps as results/<gpu>/<notebook><suffix>, tagged with the session's run."""
    import json
    from pathlib import Path
    from .results import atomic_write_text
    if not session.primary:  # shards 1.. of a job array: shard 0 takes the captures
        return
    path = Path(results_dir) / session.info["gpu_slug"] / f"{notebook}{suffix}"
    atomic_write_text(path, json.dumps({"gpu": session.info["gpu_name"], "run_id": session.prov["run_id"], **capture()},
                                       indent=0))
