"""The steps every notebook's measurement plan shares (gluon_lab.experiments, gluon_lab.backward_plan): one
measurement session over a list of cases, and whether a variant takes a shape with given knobs."""
from __future__ import annotations


def measure_plan(notebook: str, results_dir: str, quick: bool, cases):
    """One measurement session of a notebook: ceilings first (small ones when quick), then every
    case, appended to the store as it goes. Returns (records, session). GLUON_LAB_EXCLUDE_VARIANTS /
    GLUON_LAB_EXCLUDE_OPS (comma-separated) leave those variants' / ops' cases out of a run (a time-limited
    device call)."""
    import os
    from .bench import Session
    skip = {v for v in os.environ.get("GLUON_LAB_EXCLUDE_VARIANTS", "").split(",") if v}
    skip_ops = {v for v in os.environ.get("GLUON_LAB_EXCLUDE_OPS", "").split(",") if v}
    cases = [c for c in cases if c.get("variant") not in skip and c.get("op") not in skip_ops]
    s = Session(notebook, results_dir, **({"copy_gib": 0.5, "matmul_n": 4096} if quick else {}))
    recs = list(s.records)
    s.save()
    recs += s.sweep(cases, desc=notebook)
    return recs, s


def resolves(op: str, variant: str, shape: dict, dtype: str, knobs: dict | None = None) -> bool:
    """Does the variant take this shape with these knobs (its configure hook accepts them)? Plans
    ask the variant instead of importing its config class; a shape it refuses is not a case."""
    from . import registry
    try:
        registry.get_variant(op, variant).resolve(shape, dtype, knobs)
    except ValueError:
        return False
    return True
