"""One spec per op: the only place per-op knowledge lives.

An :class:`OpSpec` names the op's positional inputs and scalars (with defaults), its outputs, the
rules its inputs must satisfy (``validate``: clear errors naming the argument and the rule), the
float64 reference, the byte and FLOP models used for SOL, the input maker used by benchmarks and
tests, the shape dict of a call (what records store), the eager torch formulation (variant
"torch") and the fp32 formula torch.compile gets (variant "inductor"). Kernel templates read the
declarative features of a family (``spec.row`` for row norms) instead of testing op names.

Every module in this package that defines specs calls :func:`define`; importing the package
imports all of them, so adding an op is one new module here plus the pattern modules that
implement it (they register variants for it), its notebook and its tests.

Nothing here imports torch or triton at import time (``import gluon_lab_old`` never touches CUDA).
"""
from __future__ import annotations

import importlib
import pkgutil

from ._base import (DTYPES, ITEMSIZE, InPlaceOpSpec, IntOperand, Operand, OpSpec, RowNorm, all_specs, define, family, get, log2_bucket,  # noqa: F401
                    names, shape_columns)

FIRST = ("norms", "group", "matmul")  # listing order of the existing families; new spec modules follow, sorted
for _m in sorted((m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")),
                 key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n)):
    importlib.import_module(f"{__name__}.{_m}")
