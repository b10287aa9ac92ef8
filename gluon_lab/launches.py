"""What a case launches, found on a CPU: the variant's own host code run on meta tensors, every Triton
launch it makes compiled for sm_90 and kept (not launched), and one hash over all of it.

    with emulate(sms=132) as seen:                     # no GPU, no CUDA driver
        v.fn(*meta_inputs, config=cfg)                 # the real launcher: checks, configure, descriptors, grids
    seen                                               # [Launch(kernel name, grid, args, ttgir, options)]
    launch_hash(seen)                                  # 16 hex chars

This is the identity a record's staleness follows (``gluon_lab.currency``): a record stays current
while the launches of its case are the same — the same compiled kernels (normalized TTGIR: debug
locations, value names and the entry name dropped, so renaming a local, moving a jit helper to
another module or folding a duplicate changes nothing), in the same order, with the same launch
parameters (grid, num_warps, num_ctas, num_stages, maxnreg, shared memory, cooperative / PDL flags,
every scalar argument, each tensor-descriptor's shape / strides / block, each pointer's byte
offset into its tensor). A constant, layout, tile or ``num_warps`` that reaches the compiled code,
a grid or a scalar the host computes differently: a different hash.

How it runs without a GPU: triton's driver is replaced by one that names an sm_90 target (device 0,
stream 0); ``JITFunction.run`` compiles as it always does (``warmup=True``: triton's own binder,
specialization and compile, so constexprs, divisibility hints and options are triton's, not a
mirror of them) and records the launch instead of making it; the few ``torch.cuda`` calls a
launcher makes (SM count, current stream, side streams) answer as an H200 would. Inputs are meta
tensors from the op's own input maker, so every shape, stride and view is what a GPU run gets
(pointers are 16-byte aligned there, as every bench input is).

What it cannot see: code that launches no Triton kernel (eager torch, torch.compile'd baselines, the
CuTe-DSL peers, cuBLAS / cuDNN calls): those cases have no launch hash and keep the source rule.

The module is also a standalone worker (``python launches.py worker``, requests as JSON lines on stdin),
so it can run against another checkout of the package (an older commit) with that checkout on
``PYTHONPATH``: it needs only ``gluon_lab.registry`` and ``gluon_lab.specs`` from it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import types
from dataclasses import dataclass, field

H200_SMS = 132
# compile options that decide the launched code beyond the TTGIR (metadata keys of a CompiledKernel)
OPTION_KEYS = ("num_warps", "num_ctas", "num_stages", "maxnreg", "shared", "launch_cooperative_grid", "launch_pdl",
               "enable_fp_fusion", "global_scratch_size", "profile_scratch_size", "tmem_size", "cluster_dims",
               "triton_version")


@dataclass
class Launch:
    """One launch a case makes: kernel name, grid, scalar / descriptor / pointer-offset arguments by
    parameter name, compile options, and the sha256 of its normalized TTGIR."""
    name: str
    grid: tuple
    args: dict
    options: dict
    ttgir_sha: str
    ttgir: str = field(default="", repr=False)

    def key(self) -> dict:
        """What the hash covers (the kernel's name is not part of it: a renamed kernel is the same code)."""
        return {"grid": list(self.grid), "args": self.args, "options": self.options, "ttgir": self.ttgir_sha}


# ----------------------------------------------------------------------------------------------
# TTGIR normalization

_LOC_DEF = re.compile(r"^#loc\d*\s*=.*$", re.M)
_VALUE = re.compile(r"%[A-Za-z_$.\-][\w$.\-]*|%\d+(?:#\d+)?")


def _strip_locs(text: str) -> str:
    """Drop every ``loc(...)`` (balanced parentheses, strings respected) and the ``#locN = ...`` lines."""
    text = _LOC_DEF.sub("", text)
    out, i, n = [], 0, len(text)
    while i < n:
        j = text.find("loc(", i)
        if j < 0:
            out.append(text[i:])
            break
        if j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_#"):  # e.g. "alloc(": not a location
            out.append(text[i:j + 4])
            i = j + 4
            continue
        out.append(text[i:j].rstrip(" "))
        depth, k, in_str = 0, j + 3, False
        while k < n:
            c = text[k]
            if in_str:
                if c == "\\":
                    k += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    return "".join(out)


def normalize_ttgir(text: str, entry: str | None = None) -> str:
    """TTGIR without what does not reach the GPU: debug locations (file paths, lines, the source
    names MLIR prints as ``loc("x")``), SSA value names (MLIR names values after the source's locals:
    renamed to %v0, %v1, ... by first use) and the entry's symbol name."""
    text = _strip_locs(text)
    names: dict[str, str] = {}

    def rename(m):
        return names.setdefault(m.group(0), f"%v{len(names)}")

    text = _VALUE.sub(rename, text)
    if entry:
        text = re.sub(rf"@{re.escape(entry)}\b", "@kernel", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


# ----------------------------------------------------------------------------------------------
# the emulated driver

class _FakeStream:
    cuda_stream = 0

    def __init__(self, *a, **k):
        pass

    def wait_stream(self, *a, **k):
        pass

    def wait_event(self, *a, **k):
        pass

    def record_event(self, *a, **k):
        return None

    def synchronize(self):
        pass


class _Driver:
    """triton's active driver for the emulation: an sm_90 target on device 0, stream 0."""

    def __init__(self):
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_device_interface(self):
        import torch
        return torch.cuda

    def get_active_torch_device(self):
        import torch
        return torch.device("meta")


def _arg(value, param) -> object | None:
    """A launch argument as the hash sees it (None: not a launch parameter of its own)."""
    if param.is_constexpr:
        return None  # reaches the compiled code: covered by the TTGIR
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "base") and hasattr(value, "block_shape"):  # a host TensorDescriptor
        return {"desc": [list(map(int, value.shape)), list(map(int, value.strides)), list(map(int, value.block_shape)),
                         str(getattr(value, "padding", ""))], "dtype": str(value.base.dtype),
                "offset": int(value.base.storage_offset()) * value.base.element_size()}
    if hasattr(value, "data_ptr") and hasattr(value, "storage_offset"):  # a tensor: its pointer's offset
        return {"ptr": str(value.dtype), "offset": int(value.storage_offset()) * value.element_size()}
    return type(value).__name__


@contextlib.contextmanager
def emulate(sms: int = H200_SMS):
    """Run host code as on an sm_90 GPU with `sms` SMs, recording (not making) its Triton launches.
    Yields the list the launches are appended to. Not thread-safe (it patches triton and torch.cuda)."""
    import torch
    import torch.cuda as tc
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    seen: list[Launch] = []
    orig_run = JITFunction.run
    inner = getattr(orig_run, "__wrapped__", orig_run)  # under gluon_lab.fastpath's recorder hook

    def run(self, *args, grid, warmup, **kwargs):
        k = inner(self, *args, grid=grid, warmup=True, **kwargs)
        if warmup or k is None:
            return k
        given = {n: v for n, v in kwargs.items() if n in self.arg_names}
        bound = self.signature.bind(*args, **given)
        bound.apply_defaults()
        g = grid(bound.arguments) if callable(grid) else grid
        g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g, )))
        g = g + (1, ) * (3 - len(g))
        args_ = {}
        for p in self.params:
            value = bound.arguments.get(p.name)
            if value is None and self.signature.parameters[p.name].default is None:
                continue  # an optional hook left off (an INSTRUMENT build's trace pointer): Triton specializes a
                #           None argument away and the TTGIR covers it; so adding one keeps every earlier hash
            a = _arg(value, p)
            if a is not None or not p.is_constexpr:
                args_[p.name] = a
        md = k.metadata._asdict()
        opts = {o: _plain(md[o]) for o in OPTION_KEYS if o in md}
        tt = normalize_ttgir(k.asm["ttgir"], md.get("name"))
        seen.append(Launch(md.get("name", "?"), g, args_, opts, hashlib.sha256(tt.encode()).hexdigest(), tt))
        return k

    run.__wrapped__ = inner
    patched = {"get_device_properties": lambda d=None: types.SimpleNamespace(
        multi_processor_count=sms, name="NVIDIA H200 (emulated)", major=9, minor=0, L2_cache_size=50 * 2**20,
        total_memory=141 * 2**30),
        "current_stream": lambda d=None: _FakeStream(), "default_stream": lambda d=None: _FakeStream(),
        "Stream": _FakeStream, "stream": lambda s=None: contextlib.nullcontext(),
        "is_current_stream_capturing": lambda: False, "synchronize": lambda *a, **k: None,
        "current_device": lambda: 0, "device_count": lambda: 1}
    saved = {n: getattr(tc, n) for n in patched}
    prev_driver = driver._active
    driver.set_active(_Driver())
    JITFunction.run = run
    for n, f in patched.items():
        setattr(tc, n, f)
    try:
        with torch.no_grad(), _cuda_as_meta_mode():
            yield seen
    finally:
        for n, f in saved.items():
            setattr(tc, n, f)
        JITFunction.run = orig_run
        driver._active = prev_driver


def _cuda_as_meta_mode():
    import torch

    class CudaAsMeta(torch.overrides.TorchFunctionMode):
        """Tensors a launcher allocates on "cuda" itself (a scheduler's block counter) come out on meta."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            d = kwargs.get("device")
            if d is not None and str(d).startswith("cuda"):
                kwargs = {**kwargs, "device": "meta"}
            return func(*args, **kwargs)

    return CudaAsMeta()


def _plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


# ----------------------------------------------------------------------------------------------
# a case's launches

def meta_inputs(op: str, shape: dict, dtype: str):
    """The op's inputs at this shape as meta tensors (its own input maker: same shapes, strides, views)."""
    import torch
    from gluon_lab import specs
    dt = getattr(torch, dtype)

    def rnd(*size, mean=0.0, std=1.0):
        return torch.empty(*size, dtype=dt, device="meta")

    return specs.get(op).make_inputs(dict(shape), dtype, rnd)


def capture(op: str, variant: str, shape: dict, dtype: str, overrides: dict | None = None, call: str = "fn",
            sms: int = H200_SMS) -> list[Launch]:
    """The launches one case makes, as bench.Session.measure runs it: call="fn" resolves the config from
    `overrides` (the variant's configure; the heuristic where overrides are empty) and calls the
    variant on pre-allocated outputs where it takes out=; call="api" runs the variant as the public
    function does (its own heuristic config)."""
    from gluon_lab import registry, specs
    v = registry.get_variant(op, variant)
    spec = specs.get(op)
    inputs = meta_inputs(op, shape, dtype)
    kw = spec.default_scalars()
    if call != "api":
        cfg = v.resolve(shape, dtype, dict(overrides or {})) if v.configure is not None else None
        if cfg is not None:
            kw["config"] = cfg
        if v.supports_out and not getattr(spec, "inplace", None):
            kw["out"] = spec.alloc_outputs(inputs)
    with emulate(sms) as seen:
        v.fn(*inputs, **kw)
    return list(seen)


def launch_hash(launches: list[Launch]) -> str | None:
    """sha256 (16 hex) over the launches in order; None when nothing was launched through Triton."""
    if not launches:
        return None
    blob = json.dumps([l.key() for l in launches], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def summary(launches: list[Launch]) -> str:
    """``ws_gemm_kernel[132] + splitk_reduce_kernel[32x4]``: what a case launches, for people."""
    def g(t):
        return "x".join(str(x) for x in (t[:2] if t[2] == 1 else t)).removesuffix("x1")
    return " + ".join(f"{l.name}[{g(l.grid)}]" for l in launches) or "-"


def evaluate(req: dict) -> dict:
    """One request {op, variant, shape, dtype, overrides, call, sms} -> {"hash", "summary"} or {"error"}.
    A case that launches nothing through Triton gets hash None (its record keeps the source rule)."""
    try:
        from gluon_lab import registry
        v = registry.get_variant(req["op"], req["variant"])
        if getattr(v, "differentiable", False) or v.name == "torch" or v.name.startswith("inductor"):
            return {"hash": None, "summary": "-"}  # eager torch / torch.compile formulas: no Triton launch of ours
        seen = capture(req["op"], req["variant"], req["shape"], req["dtype"], req.get("overrides") or {},
                       req.get("call", "fn"), req.get("sms") or H200_SMS)
    except Exception as e:  # noqa: BLE001 - the request's answer: a case the emulation cannot run
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {"hash": launch_hash(seen), "summary": summary(seen)}


# ----------------------------------------------------------------------------------------------
# worker: requests on stdin (JSON lines), answers on stdout, against whichever gluon_lab is importable

def _worker(stream_in=None, stream_out=None) -> int:
    import gc
    stream_in = stream_in or sys.stdin
    stream_out = stream_out or sys.stdout
    from gluon_lab import registry
    hashes: dict = {}
    gc.disable()
    for line in stream_in:
        if not line.strip():
            continue
        req = json.loads(line)
        key = (req["op"], req["variant"])
        if key not in hashes:
            try:
                hashes[key] = registry.current_hash(*key)
            except Exception as e:  # noqa: BLE001
                hashes[key] = f"<{type(e).__name__}>"
        ans = {"id": req.get("id"), "src": hashes[key]}
        if req.get("src") is None or req["src"] == hashes[key]:
            ans.update(evaluate(req))
        else:
            ans["error"] = f"source hash here is {hashes[key]}, the request's is {req['src']}"
        stream_out.write(json.dumps(ans) + "\n")
        stream_out.flush()
    return 0


if __name__ == "__main__":  # python launches.py worker  (PYTHONPATH = the checkout to evaluate)
    if sys.path and sys.path[0].rstrip("/").endswith("gluon_lab"):
        sys.path.pop(0)  # this file's folder is not a top-level package root
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: python launches.py worker < requests.jsonl")
    sys.exit(_worker())
