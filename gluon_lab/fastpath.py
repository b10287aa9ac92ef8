"""The host fast path: a call signature's work done once, the launch replayed after.

A public call (`gll.rms_norm(x, w)`) on the slow path validates every input with the spec's rules,
resolves `auto`, checks the variant can run, computes its config, allocates outputs, builds TMA
descriptors in Python and goes through Triton's JIT launcher (argument binding, specialization
key, cache lookup): 110-430 us per call on the H200 host (00-ceilings, "Host cost of a call").
None of that depends on the data pointers, so it is done once per **call signature** — op,
variant, grad mode, and for each input its type, shape, strides, dtype, device and requires_grad,
plus the scalars' values — and kept as a plan:

* ``launches``: the slow path ran under a recorder that saw every Triton launch it made (the
  compiled kernel, its grid, every argument) and every torch op (only allocations and views are
  allowed; so are the ops that only make a `pin`ned workspace, e.g. the dynamic schedule's block
  counter zeroed by the first call on a stream, which a replay resolves instead). Each launch is kept as the compiled kernel's own C launcher, its CUfunction, grid and
  packed metadata, with every argument either a constant, an operand's pointer (inputs then
  outputs, plus a byte offset) or a TMA descriptor over an operand (shape, strides, block and
  swizzle fixed; the CUtensorMap is encoded by Triton's own `make_tensordesc_arg` once per base
  pointer and reused while the pointer repeats). A tensor the call allocated and passed to a
  kernel without returning it (a workspace: split-K's fp32 partials) is a *scratch* operand, allocated
  again at each replay like an output. A replay allocates the outputs and scratch
  (`torch.empty_strided`), reads the operands' pointers and launches: that is all that changes
  with the data.
* ``direct``: a variant whose call runs torch ops (eager torch, torch.compile'd baselines — these
  are not recorded at all — and peer libraries that allocate workspaces) or whose launches the
  recorder cannot replay (a callable grid, a tensor argument that is neither an operand nor allocated by
  the call, aliasing): the
  plan calls the variant's function with the validated scalars, skipping only the checks the
  signature already passed.

What stays per call: the signature key, the pointers, and one rule the key cannot hold — every
tensor operand's pointer must be 16-byte aligned (TMA requires it, and Triton specializes pointer
arguments on 16-byte divisibility); an unaligned operand takes the slow path, which gives its error
or compiles its own specialization. A call whose signature failed validation is never planned:
the same bad call fails again, with the same message, every time. While a Triton launch hook is
installed (proton), every call takes the full path (the standard launcher calls the hooks).

Controls: ``GLUON_LAB_FASTPATH=0`` (or ``fastpath.enabled = False``) turns it off; ``clear()``
drops every plan; ``stats()`` counts hits, plans by kind and slow-path calls; ``plan_of(...)``
shows the plan a call would replay.
"""
from __future__ import annotations

import os
import threading
import types
import weakref

import torch

enabled = os.environ.get("GLUON_LAB_FASTPATH", "1") not in ("0", "false", "off")
MAX_PLANS = 4096  # signatures kept (a model uses tens); beyond it the cache starts over
MAX_MAPS = 16  # CUtensorMaps kept per descriptor argument (the caching allocator cycles a few pointers)

_PLANS: dict = {}
_tls = threading.local()
# data_ptr -> (tensor, resolve): workspaces that live for the process. Held by a stdlib object, not a
# module-level dict, so staleness.code_hash (which hashes module constants) never sees what was pinned.
_pinned = types.SimpleNamespace(by_ptr={})


def pin(t, resolve) -> None:
    """Keep t alive for the process as a workspace a kernel reuses on every call (the dynamic schedulers'
    block counters); a plan calls resolve() at each replay for the tensor to pass in its place (a counter
    per stream: the stream current at the replay)."""
    _pinned.by_ptr[t.data_ptr()] = (t, resolve)


_stats = {"hits": 0, "slow": 0, "planned_launches": 0, "planned_direct": 0}


def clear() -> None:
    """Drop every plan (e.g. after the selection table or a kernel module was reloaded)."""
    _PLANS.clear()


def stats() -> dict:
    """Counters since import: fast-path hits, full-path calls, plans built by kind; the plans kept."""
    kinds = [p.kind for p in _PLANS.values()]
    return {**_stats, "plans": len(_PLANS), "launch_plans": kinds.count("launches"),
            "direct_plans": kinds.count("direct")}


# ----------------------------------------------------------------------------------------------
# the call signature

def signature(spec, inputs: tuple, scalars: dict, variant) -> tuple | None:
    """The key of a call: everything the slow path's decisions depend on except the data pointers.
    None when an input cannot be keyed (unhashable): that call takes the slow path."""
    key = [spec.name, variant, torch.is_grad_enabled()]
    for t in inputs:
        if isinstance(t, torch.Tensor):
            key.append((type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad))
        else:
            key.append((type(t), t))
    for k, v in scalars.items():
        key.append((k, type(v), v))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _ptrs(inputs):
    """Data pointers of the tensor inputs (None for the rest); None if one is not 16-byte aligned."""
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor):
            p = t.data_ptr()
            if p & 15:
                return None
            out.append(p)
        else:
            out.append(None)
    return out


# ----------------------------------------------------------------------------------------------
# the entry point api.call uses

def call(spec, inputs: tuple, scalars: dict, variant: str, prepare):
    """Run a public call through its signature's plan, or through the full path (`prepare` =
    api.prepare, then the variant), keeping a plan when the signature is new and the call succeeded."""
    if not _hooks_idle():
        v, scalars = prepare(spec, inputs, scalars, variant)
        return scalars if v is None else v.fn(*inputs, **scalars)
    key = signature(spec, inputs, scalars, variant)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None and getattr(_tls, "recorder", None) is None:  # inside a recording: the full path
        ptrs = _ptrs(inputs)
        if ptrs is not None:
            check = plan.data_check
            if check is not None:
                check(*inputs)  # rules on the data hold on every call (the variant's device guard: no sync)
            _stats["hits"] += 1
            return plan.run(inputs, ptrs)
    _stats["slow"] += 1
    v, scalars = prepare(spec, inputs, scalars, variant)  # the clear error of a bad call; nothing is planned
    if v is None:
        return scalars  # empty input: its outputs (no kernel runs)
    ptrs = _ptrs(inputs)
    if key is None or ptrs is None or getattr(_tls, "recorder", None) is not None:
        return v.fn(*inputs, **scalars)  # not plannable: unhashable, unaligned, or nested in a recording
    if v.differentiable:
        # torch / torch.compile formulations: the call itself is the plan (recording would put a
        # dispatch mode under torch.compile's guards)
        out, plan = v.fn(*inputs, **scalars), _Direct(v, scalars)
        _stats["planned_direct"] += 1
    else:
        rec = _Recorder()
        with rec:
            out = v.fn(*inputs, **scalars)
        plan = _build(rec, v, scalars, inputs, out)
    from .registry import data_rule
    plan.data_check = data_rule(spec, v)
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan
    return out


def plan_of(op: str, *inputs, variant: str = "auto", **scalars):
    """The plan kept for a public call's signature (None: not planned yet), e.g.
    `plan_of("rms_norm", x, w)` -> <launches plan: 1 launch(es) ['tma_cache_norm_kernel'], 1 output(s)>."""
    from . import specs
    spec = specs.get(op)
    given = dict(zip(spec.input_names, inputs))
    full = tuple(given.get(n) for n in spec.input_names)
    key = signature(spec, full, {**spec.scalars, **scalars}, variant)
    return _PLANS.get(key) if key is not None else None


_RT = None  # triton.knobs.runtime, looked up once (an import statement per call costs ~2 us)


def _hooks_idle() -> bool:
    """No Triton launch hook is installed (proton and friends get the standard launcher)."""
    global _RT
    rt = _RT
    if rt is None:
        from triton import knobs
        rt = _RT = knobs.runtime
    return not _chain_active(rt.launch_enter_hook) and not _chain_active(rt.launch_exit_hook)


def _chain_active(h) -> bool:
    if h is None:
        return False
    calls = getattr(h, "calls", None)
    return True if calls is None else bool(calls)


# ----------------------------------------------------------------------------------------------
# recording: Triton launches (JITFunction.run) and torch ops seen while the slow path runs

_ALLOWED_OPS = frozenset({
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "view", "_unsafe_view", "as_strided",
    "alias", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "select", "slice", "detach",
    "_reshape_alias", "narrow", "split", "unbind", "lift_fresh", "sym_size", "sym_stride", "sym_numel",
    "is_contiguous", "sym_storage_offset"})  # allocate or view: no data is read or written


_ALLOCATING_OPS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})


class _Launch:
    __slots__ = ("jit", "compiled", "grid", "args", "kwargs")

    def __init__(self, jit, compiled, grid, args, kwargs):
        self.jit, self.compiled, self.grid, self.args, self.kwargs = jit, compiled, grid, args, kwargs


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Sees the slow path's torch ops (dispatch mode) and Triton launches (thread-local list)."""

    def __init__(self):
        super().__init__()
        self.launches: list = []
        self.impure: list = []  # torch ops that read or write data
        self._impure_outs: list = []  # per impure op, weak references to the tensors it returned
        self.allocated: list = []  # tensors the call allocated (candidates for scratch operands)

    def __enter__(self):
        _install_launch_hook()
        _tls.recorder = self
        return super().__enter__()

    def __exit__(self, *exc):
        _tls.recorder = None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        out = func(*args, **(kwargs or {}))
        if name not in _ALLOWED_OPS:
            self.impure.append(name)
            outs = out if isinstance(out, (tuple, list)) else (out, )
            self._impure_outs.append([weakref.ref(t) for t in outs if isinstance(t, torch.Tensor)])
        if name in _ALLOCATING_OPS and isinstance(out, torch.Tensor):
            self.allocated.append(out)
        return out

    def unpinned_impure(self) -> list:
        """The impure ops that make the call unreplayable: all but those that only made a pinned workspace
        (a dynamic schedule's block counter zeroed on the first call on its stream: `pin`ned, so a plan
        resolves it per replay instead of replaying its allocation)."""
        def pinned(refs):
            ts = [r() for r in refs]
            return bool(ts) and all(t is not None and _pinned.by_ptr.get(t.data_ptr(), (None, ))[0] is t for t in ts)
        return [n for n, refs in zip(self.impure, self._impure_outs) if not pinned(refs)]


_hook_lock = threading.Lock()
_hooked = False


def _install_launch_hook() -> None:
    """Wrap triton's JITFunction.run once: while this thread records, each launch is also kept.
    Outside a recording the wrapper costs one thread-local lookup per Triton launch."""
    global _hooked
    if _hooked:
        return
    with _hook_lock:
        if _hooked:
            return
        from triton.runtime.jit import JITFunction
        orig = JITFunction.run

        def run(self, *args, grid, warmup, **kwargs):
            kernel = orig(self, *args, grid=grid, warmup=warmup, **kwargs)
            rec = getattr(_tls, "recorder", None)
            if rec is not None and not warmup:
                rec.launches.append(_Launch(self, kernel, grid, args, kwargs))
            return kernel

        run.__wrapped__ = orig
        JITFunction.run = run
        _hooked = True


# ----------------------------------------------------------------------------------------------
# plans

class _Unplannable(Exception):
    pass


def _extent(t) -> tuple:
    """[lo, hi) bytes a tensor's elements span."""
    lo = t.data_ptr()
    if t.numel() == 0:
        return lo, lo
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    return lo, lo + span * t.element_size()


class _Operands:
    """Inputs, then outputs, then scratch: which one (and at what byte offset) a kernel argument points into."""

    def __init__(self, tensors):
        self.ranges = [(_extent(t) if isinstance(t, torch.Tensor) else None) for t in tensors]

    def locate(self, t) -> tuple:
        p = t.data_ptr()
        hits = [i for i, r in enumerate(self.ranges) if r is not None and r[0] <= p < max(r[1], r[0] + 1)]
        if len(hits) != 1:
            raise _Unplannable(f"a kernel argument at {p:#x} lies in {len(hits)} operands (aliasing or a workspace)")
        i = hits[0]
        return i, p - self.ranges[i][0]


def _build(rec, v, scalars, inputs, out):
    """A launches plan when the call only allocated, viewed and launched Triton kernels on its
    operands; else a direct plan (peer libraries with workspaces, torch ops)."""
    outs = out if isinstance(out, tuple) else (out, )
    plan = None
    impure = rec.unpinned_impure()
    if impure and rec.launches:
        _stats["last_unplannable"] = f"{v.op}/{v.name}: torch ops that read or write data: {sorted(set(impure))}"
    if not impure and rec.launches and all(isinstance(o, torch.Tensor) for o in outs):
        try:
            plan = _build_launches(rec, inputs, outs, isinstance(out, tuple))
        except _Unplannable as e:
            _stats["last_unplannable"] = f"{v.op}/{v.name}: {e}"
        except Exception as e:  # noqa: BLE001 - triton internals moved (an upgrade): the call already ran,
            # so it must not fail now; the signature gets a direct plan and the reason is kept
            _stats["last_unplannable"] = f"{v.op}/{v.name}: {type(e).__name__}: {e}"
    if plan is None:
        plan = _Direct(v, scalars)
    _stats["planned_" + plan.kind] += 1
    return plan


class _Direct:
    """Call the variant with the validated scalars (the signature already passed every check)."""
    kind = "direct"
    data_check = None  # set when kept: the op's data rule, checked on every replay

    def __init__(self, v, scalars):
        self.fn, self.scalars, self.variant = v.fn, scalars, v.name

    def run(self, inputs, ptrs):
        return self.fn(*inputs, **self.scalars)

    def __repr__(self):
        return f"<direct plan: variant {self.variant!r}, scalars {self.scalars}>"


class _Alloc:
    """How a replay allocates one output: like input `like` (torch.empty_like keeps its strides; the
    cheapest allocation torch has), or torch.empty_strided with the recorded geometry."""
    __slots__ = ("shape", "stride", "dtype", "device", "like")

    def __init__(self, t, inputs):
        self.shape, self.stride, self.dtype, self.device = tuple(t.shape), tuple(t.stride()), t.dtype, t.device
        self.like = next((i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.shape == t.shape
                          and x.stride() == t.stride() and x.dtype == t.dtype and x.device == t.device
                          and x.is_contiguous()), None)

    def new(self, inputs):
        if self.like is not None:
            return torch.empty_like(inputs[self.like])
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)


def _build_launches(rec, inputs, outs, is_tuple):
    in_ranges = _Operands(inputs).ranges
    allocs, fresh = [], []
    for o in outs:
        same = [i for i, t in enumerate(inputs) if o is t]
        if same:  # an in-place op returns its input
            allocs.append(_Same(same[0]))
            continue
        if o._base is not None:
            raise _Unplannable("an output is a view")
        lo, hi = _extent(o)
        if any(r is not None and r[0] < hi and lo < r[1] for r in in_ranges):
            raise _Unplannable("an output overlaps an input")
        allocs.append(_Alloc(o, inputs))
        fresh.append(o)
    # scratch: what the call allocated besides its outputs (a workspace its kernels read and write); a
    # replay allocates it again, so the plan holds none of this call's memory
    out_storage = {o.untyped_storage().data_ptr() for o in fresh}
    scratch = [t for t in rec.allocated if t._base is None and t.numel()
               and t.untyped_storage().data_ptr() not in out_storage]
    operands = _Operands(list(inputs) + fresh + scratch)
    steps = tuple(_Step(launch, operands) for launch in rec.launches)
    base = len(inputs) + len(fresh)
    used = {j for st in steps for j in [p[1] for p in st.ptr_slots] + [d.operand for d in st.desc_slots]}
    if any(base + i not in used for i in range(len(scratch))):  # keep only what a kernel reads or writes
        scratch = [t for i, t in enumerate(scratch) if base + i in used]
        operands = _Operands(list(inputs) + fresh + scratch)
        steps = tuple(_Step(launch, operands) for launch in rec.launches)
    return _Launches(steps, tuple(allocs), is_tuple, tuple(_Alloc(t, inputs) for t in scratch))


class _Same:
    """An output that is input `i` itself (in-place ops): nothing to allocate, no pointer of its own."""
    __slots__ = ("i", )

    def __init__(self, i):
        self.i = i

    def new(self, inputs):
        return inputs[self.i]


class _Launches:
    kind = "launches"
    data_check = None  # set when kept: the op's data rule, checked on every replay

    def __init__(self, steps, allocs, is_tuple, scratch=()):
        self.steps, self.allocs, self.is_tuple, self.scratch = steps, allocs, is_tuple, scratch

    def run(self, inputs, ptrs):
        outs = [a.new(inputs) for a in self.allocs]
        ptrs = ptrs + [o.data_ptr() for a, o in zip(self.allocs, outs) if a.__class__ is _Alloc]
        if self.scratch:
            work = [a.new(inputs) for a in self.scratch]  # alive until the launches are queued (stream order)
            ptrs = ptrs + [w.data_ptr() for w in work]
        for s in self.steps:
            s.run(ptrs)
        return tuple(outs) if self.is_tuple else outs[0]

    def __repr__(self):
        return (f"<launches plan: {len(self.steps)} launch(es) {[s.name for s in self.steps]}, {len(self.allocs)} "
                f"output(s), {len(self.scratch)} scratch>")


def _raw_launcher(launcher):
    """The compiled C `launch` behind a CudaLauncher (under triton's tensor-descriptor wrapper)."""
    fn = launcher.launch
    code = getattr(fn, "__code__", None)
    if code is not None and "launcher" in code.co_freevars:  # wrap_handle_tensordesc's inner
        fn = fn.__closure__[code.co_freevars.index("launcher")].cell_contents
    if getattr(fn, "__code__", None) is not None:
        raise _Unplannable("the launcher's C entry point was not found")
    return fn


class _PtrAt:
    """What make_tensordesc_arg reads of a descriptor's base: its pointer."""
    __slots__ = ("p", )

    def __init__(self, p):
        self.p = p

    def data_ptr(self):
        return self.p


class _Geometry:
    """What a descriptor argument keeps of the recorded TensorDescriptor: no reference to its tensor
    (a plan must not keep the first call's inputs and outputs alive)."""
    __slots__ = ("shape", "strides", "padding")

    def __init__(self, d):
        self.shape, self.strides, self.padding = list(d.shape), list(d.strides), d.padding


class _DescAt:
    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, p, d):
        self.base, self.shape, self.strides, self.padding = _PtrAt(p), list(d.shape), list(d.strides), d.padding


_raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else None


class _Step:
    """One recorded launch, replayable with new operand pointers."""

    def __init__(self, launch: _Launch, operands: _Operands):
        from triton.backends.nvidia import driver as nv
        from triton.backends.nvidia.driver import CudaLauncher
        from triton.runtime import driver
        jit, k = launch.jit, launch.compiled
        grid = launch.grid
        if callable(grid) or not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
            raise _Unplannable("a callable or unusual grid")
        self.grid = tuple(int(g) for g in grid) + (1, ) * (3 - len(grid))
        self.name = k.name
        launcher = k.run  # CudaLauncher (loads the module on first use)
        if not isinstance(launcher, CudaLauncher):
            raise _Unplannable("not the CUDA launcher")
        if launcher.global_scratch_size or launcher.profile_scratch_size:
            raise _Unplannable("the kernel needs global/profile scratch memory per launch")
        self.raw = _raw_launcher(launcher)
        self.function, self.packed = k.function, k.packed_metadata
        self.coop, self.pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
        self.device = driver.active.get_current_device()
        names = jit.arg_names
        given = {n: v for n, v in launch.kwargs.items() if n in names}
        bound = jit.signature.bind(*launch.args, **given)
        bound.apply_defaults()
        sig = k.src.signature
        if list(sig) != list(names):
            raise _Unplannable("the compiled signature does not list the kernel's parameters in order")
        metas = list(getattr(k.metadata, "tensordesc_meta", None) or [])
        n_desc = sum(1 for t in sig.values() if isinstance(t, str) and t.startswith("tensordesc"))
        if metas and len(metas) != n_desc:
            raise _Unplannable("tensor-descriptor metadata does not match the signature")
        template, self.ptr_slots, self.desc_slots, self.resolve_slots = [], [], [], []
        di = 0
        for name in names:
            ty, v = sig[name], bound.arguments[name]
            if ty == "constexpr":
                template.append(None)
            elif isinstance(ty, str) and ty.startswith("tensordesc"):
                meta = metas[di] if metas else None
                di += 1
                if not all(hasattr(v, a) for a in ("base", "shape", "strides", "padding")):
                    raise _Unplannable(f"argument {name} is not a host tensor descriptor")
                j, off = operands.locate(v.base)
                expanded = list(nv.make_tensordesc_arg(v, meta))
                expanded[0] = None  # the map / base of THIS call's tensor: rebuilt per call, never kept
                geometry = _Geometry(v)  # shape, strides, padding only: the plan holds no tensor
                self.desc_slots.append(_DescSlot(len(template), j, off, geometry, meta, nv.make_tensordesc_arg))
                template.extend(expanded)
            elif isinstance(ty, str) and ty.startswith("*"):
                if v is None:
                    template.append(None)
                elif isinstance(v, torch.Tensor) and _pinned.by_ptr.get(v.data_ptr(), (None, ))[0] is v:
                    self.resolve_slots.append((len(template), _pinned.by_ptr[v.data_ptr()][1]))
                    template.append(None)  # a pinned workspace: resolved per replay
                elif isinstance(v, torch.Tensor):
                    j, off = operands.locate(v)
                    self.ptr_slots.append((len(template), j, off))
                    template.append(None)  # filled per call
                else:
                    raise _Unplannable(f"pointer argument {name} is a {type(v).__name__}")
            elif isinstance(v, (bool, int, float)) or v is None:
                template.append(v)
            else:
                raise _Unplannable(f"argument {name} of type {type(v).__name__} ({ty})")
        self.template = template

    def run(self, ptrs):
        args = self.template.copy()
        for pos, j, off in self.ptr_slots:
            args[pos] = ptrs[j] + off
        for d in self.desc_slots:
            args[d.pos] = d.first(ptrs[d.operand] + d.offset)
        for pos, resolve in self.resolve_slots:
            args[pos] = resolve().data_ptr()
        gx, gy, gz = self.grid
        self.raw(gx, gy, gz, _raw_stream(self.device), self.function, self.coop, self.pdl,
                 None, None, self.packed, None, None, None, *args)


class _DescSlot:
    """A descriptor argument: its first expanded element (the CUtensorMap, or the base pointer when
    the kernel did not lower it to a TMA map) is rebuilt for a new pointer; the rest is fixed."""
    __slots__ = ("pos", "operand", "offset", "desc", "meta", "make", "maps")

    def __init__(self, pos, operand, offset, desc, meta, make):
        self.pos, self.operand, self.offset, self.desc, self.meta, self.make = pos, operand, offset, desc, meta, make
        self.maps = {}

    def first(self, p):
        if self.meta is None:
            return p
        m = self.maps.get(p)
        if m is None:
            if len(self.maps) >= MAX_MAPS:
                self.maps.clear()
            m = self.maps[p] = self.make(_DescAt(p, self.desc), self.meta)[0]
        return m
