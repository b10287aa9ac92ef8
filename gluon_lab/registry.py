"""Variant registry (tritonbench-style: a variant is one registered callable next to its kernels).

Each module under ``gluon_lab.kernels`` registers its own variants when imported; the registry
imports every such module on first use and knows no pattern itself. A variant carries what the
rest of the lab needs: the pattern it demonstrates, whether it needs a CUDA / Hopper GPU, an
eligibility check that raises a clear ValueError/TypeError, its knobs (for sweeps), the config
hook that resolves them, and a codegen hook (compile for sm_90 on a CPU machine).

Staleness: ``Variant.code_hash()`` hashes what compiles and launches — the normalized source of
every jit function, host function, class and module constant reachable from the variant's
callable (``gluon_lab.staleness``) — never comments or docstrings.

Variant callables take the op spec's positional inputs in order, its scalars as keywords, and
optionally ``out=`` (pre-allocated outputs, when ``supports_out``) and ``config=`` (a resolved
config object from ``configure``).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

from . import device, specs

PATTERNS = ("baseline", "tma-caching", "chunked", "pipelined", "warp-specialized", "fused-rope", "implicit-gemm",
            "backward")  # display order


@dataclass(frozen=True, eq=False)
class Variant:
    op: str
    name: str
    pattern: str
    fn: Callable
    needs_cuda: bool = True
    needs_hopper: bool = False
    supports_out: bool = False  # fn accepts out= (pre-allocated, poisonable outputs)
    check: Callable | None = None  # check(*inputs) raises ValueError/TypeError if the variant cannot take them
    codegen: Callable | None = None  # codegen(shape, dtype, config=None) -> compile_sm90 kwargs (what launch JITs)
    configure: Callable | None = None  # configure(shape, dtype, overrides: dict) -> the config object launch uses
    knobs: dict = field(default_factory=dict)  # knob -> values a sweep may try
    roots: tuple = ()  # extra objects whose code decides what launches (fn is always a root)
    available: Callable[[], bool] = lambda: True
    description: str = ""
    # differentiable: fn is built from torch ops autograd records (eager torch, torch.compile of the
    # formula). A gluon-lab kernel variant is not: an op with a backward op (<op>_backward, pattern 7)
    # differentiates through its custom op's autograd formula (gluon_lab.library), and api.call refuses
    # inputs that require grad for every other op's kernels.
    differentiable: bool = False
    # data_guard(*inputs): the variant enforces the spec's data rule (InPlaceOpSpec.data_check) on the GPU
    # and this raises what the GPU recorded on an earlier call (no sync); api and the fast path call it in
    # place of data_check, which reads the data (a device sync per call)
    data_guard: Callable | None = None

    @property
    def spec(self):
        return specs.get(self.op)

    @property
    def ours(self) -> bool:
        """A gluon-lab kernel (not a baseline or a peer library)."""
        return self.pattern != "baseline"

    def code_hash(self) -> str:
        """Hash of what compiles and launches (computed fresh: the source may have changed)."""
        from .staleness import code_hash
        return code_hash(self.fn, *self.roots)

    def resolve(self, shape: dict, dtype: str, overrides: dict | None = None):
        """The config the variant runs at this shape (None for variants without knobs). Raises
        ValueError when the overrides are not a valid config there (sweeps skip those)."""
        if self.configure is None:
            if overrides:
                raise ValueError(f"variant {self.name!r} of {self.op} has no knobs; got {sorted(overrides)}")
            return None
        return self.configure(shape, dtype, dict(overrides or {}))


_REGISTRY: dict[str, dict[str, Variant]] = {}
_loaded = False
_loading = False


def register(op: str, name: str, *, pattern: str, **kw):
    """Decorator: register ``fn`` as variant ``name`` of ``op`` (an op with a spec)."""
    specs.get(op)  # unknown op -> ValueError naming the known ones
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")

    def deco(fn):
        ops = _REGISTRY.setdefault(op, {})
        if name in ops:
            raise ValueError(f"variant {name!r} of {op} is registered twice")
        ops[name] = Variant(op=op, name=name, pattern=pattern, fn=fn, **kw)
        return fn

    return deco


def _ensure_loaded():
    """Import every kernel module once: each registers its variants (baselines first)."""
    global _loaded, _loading
    if _loaded or _loading:  # _loading: a kernel module asking the registry while it registers
        return
    _loading = True
    try:
        from . import kernels
        mods = sorted(m.name for m in pkgutil.iter_modules(kernels.__path__))
        for name in ["baselines"] + [m for m in mods if m != "baselines"]:
            importlib.import_module(f"{kernels.__name__}.{name}")
        _loaded = True  # only once every module imported: a failed import raises again next time
    finally:
        _loading = False


def variants(op: str, *, available_only: bool = True) -> list[str]:
    """Variant names registered for op (those whose optional dependencies are installed)."""
    specs.get(op)
    _ensure_loaded()
    vs = sorted(_REGISTRY.get(op, {}).values(), key=lambda v: PATTERNS.index(v.pattern))  # stable: baselines first
    return [v.name for v in vs if not available_only or v.available()]


def all_variants():
    _ensure_loaded()
    return [v for ops in _REGISTRY.values() for v in ops.values()]


def get_variant(op: str, name: str) -> Variant:
    specs.get(op)
    _ensure_loaded()
    try:
        return _REGISTRY[op][name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} for {op}; choose one of {variants(op, available_only=False)} "
                         "or 'auto'") from None


def current_hash(op: str, name: str) -> str:
    """Hash of the current code of (op, variant); KeyError if it no longer exists."""
    _ensure_loaded()
    if name not in _REGISTRY.get(op, {}):
        raise KeyError((op, name))
    return _REGISTRY[op][name].code_hash()


# ----------------------------------------------------------------------------------------------
# can this variant run these inputs here?

def check_runnable(v: Variant, inputs) -> None:
    """Raise the clear error that stops v from running inputs here (package, device, GPU, rules)."""
    if not v.available():
        raise ValueError(f"variant {v.name!r} of {v.op} needs an optional package that is not installed")
    if v.needs_cuda:
        for n, t in zip(v.spec.input_names, inputs):
            if getattr(t, "is_cuda", True) is False:  # ints and None have no is_cuda
                raise ValueError(f"variant {v.name!r} runs on a CUDA GPU: {n} is on {t.device}; move it with "
                                 ".cuda() or use variant='torch'")
        if not device.cuda_available():
            raise device.GPUUnavailableError(f"variant {v.name!r} needs a CUDA GPU; none is visible")
    if v.needs_hopper:
        device.require_hopper(f"variant {v.name!r} of {v.op}")
    if v.check is not None:
        v.check(*inputs)


def data_rule(spec, v: Variant):
    """What enforces the spec's rule on the data (InPlaceOpSpec.data_check) for variant v: its device guard's
    error read (no sync), the spec's check (reads the data: a sync), or None."""
    check = getattr(spec, "data_check", None)
    if check is None:
        return None
    return v.data_guard or check


def eligible(v: Variant, inputs) -> bool:
    try:
        check_runnable(v, inputs)
    except (ValueError, TypeError, device.GPUUnavailableError):
        return False
    return True



def source_object(op: str, name: str, obj: str):
    """The function (a Gluon kernel's .fn) or class called `obj` in the code variant `name` of op launches
    (its staleness closure, staleness.code_closure(v.fn, *v.roots)): analysis reads kernel code by variant and
    plain name ("_ws_consumer", "tap_box_issue") instead of importing kernels' private names. The name matches
    the last component of a qualified name in the closure; none or several -> ValueError naming them."""
    import importlib
    from .staleness import code_closure
    v = get_variant(op, name)
    hits = [k for k in code_closure(v.fn, *v.roots) if not k.startswith("<") and k.rsplit(".", 1)[-1] == obj]
    if len(hits) != 1:
        raise ValueError(f"source_object({op!r}, {name!r}): {obj!r} names {len(hits)} objects in the variant's code "
                         f"({hits or 'none'}); it must name exactly one")
    parts = hits[0].split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest importable prefix is the module
        try:
            target = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            target = getattr(target, attr)
        return getattr(target, "fn", target)
    raise ValueError(f"source_object({op!r}, {name!r}): {hits[0]!r} is not importable")


def sources(op: str, name: str, *objects: str) -> str:
    """The current source of each named object of the variant's code (source_object), one after the other."""
    import inspect
    return "\n".join(inspect.getsource(source_object(op, name, o)) for o in objects)
