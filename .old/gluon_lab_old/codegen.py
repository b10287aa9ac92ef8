"""Compile any Gluon or Triton kernel for sm_90 on a CPU-only machine and take its census.

    k = compile_sm90(fn, signature, constexprs, num_warps=8, aligned=("w_ptr",))
    c = census(k)            # dict: TMA loads/stores, ld/st.global by width, mbarrier, wgmma, smem, regs, spills
    k, c = inspect_variant("rms_norm", "triton", N=5120, dtype="bfloat16")
    ins = inspect_kernel("matmul", "gluon-ws", shape={"M": 4096, "N": 4096, "K": 4096})  # + config, spec, notes
    print(format_inspection(ins))  # what `python -m gluon_lab_old inspect` prints

inspect_kernel compiles a registered variant as its launch would run it and refuses (Refused, a
ValueError) what launch or the CUDA runtime would refuse: the variant's own checks on meta tensors,
its configure, then shared memory / threads / registers past the sm_90 per-CTA limits.

Counts are STATIC: lines of PTX / SASS, not executed instructions (a line inside a loop runs many
times; one TMA line may be issued by several warps). They prove which instructions a pattern
emits and how wide its memory accesses are, which is what the notebooks compare.
Registers and spills come from running the wheel's ptxas -v on the PTX (what triton itself runs);
SASS opcodes from the wheel's cuobjdump. No CUDA driver needed.
"""
from __future__ import annotations

import collections
import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

def _tool(name: str) -> str | None:
    """The ptxas / cuobjdump triton itself uses (`triton.knobs.nvidia`: TRITON_PTXAS_PATH, a CUDA
    toolkit it prefers, else the wheel's bin/): the PTX version triton emits follows that ptxas, so
    a different one can refuse the PTX (seen on the H200 image: wheel PTX 9.0, an older ptxas 8.7)."""
    try:
        from triton import knobs
        p = getattr(knobs.nvidia, name).path
        if p and Path(p).exists():
            return str(p)
    except Exception:  # noqa: BLE001 - older triton: fall back to the wheel's copy
        pass
    import triton
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(p) if p.exists() else None


def compile_sm90(fn, signature: dict, constexprs: dict | None = None, num_warps: int = 4,
                 aligned=(), **options):
    """triton.compile a @gluon.jit or @triton.jit function for cuda:90 without a GPU.

    signature: {arg: type} with "*bf16", "i32", "fp32", "constexpr", or for a host
    TensorDescriptor f"tensordesc<bf16[1, 2048],{layout!r}>". Every constexpr is listed as
    "constexpr" and given in constexprs. aligned: args the runtime would mark 16-divisible
    (16-byte aligned pointers, ints divisible by 16); without these hints loads do not vectorize.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    try:
        from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    except ImportError:  # pragma: no cover - pinned triton has gluon
        GluonASTSource = GluonJITFunction = None
    names = list(signature)
    for a in aligned:
        if a not in names:
            raise ValueError(f"aligned names {a!r}, which is not in the signature {names}")
    attrs = {(names.index(a), ): [["tt.divisibility", 16]] for a in aligned}
    is_gluon = GluonJITFunction is not None and isinstance(fn, GluonJITFunction)
    src_cls = GluonASTSource if is_gluon else ASTSource
    src = src_cls(fn, signature, constexprs=dict(constexprs or {}), attrs=attrs)
    opts = {"num_warps": num_warps, **options}
    ptx = _ptx_version()
    if ptx is not None:
        opts.setdefault("ptx_version", ptx)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


@functools.lru_cache(maxsize=None)
def _ptx_version() -> int | None:
    """The PTX ISA version the census's ptxas accepts (triton's own rule, from `ptxas --version`).
    Pinned in the compile options so the PTX and the ptxas that counts its registers always agree:
    on the H200 image a notebook kernel emitted PTX 9.0 (a CUDA 13 toolchain in its environment)
    that the wheel's ptxas 12.8 refused."""
    ptxas = _tool("ptxas")
    if ptxas is None:
        return None
    try:
        out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=30).stdout
        from triton.backends.nvidia.compiler import ptx_get_version
        m = re.search(r"release (\d+\.\d+)", out)
        return ptx_get_version(m.group(1)) if m else None
    except Exception:  # noqa: BLE001 - leave the choice to triton
        return None


def local_ptx(ptx: str) -> str:
    """PTX written by another toolchain (the GPU image's CUDA 13: `.version 9.0`) with its ISA header
    lowered to what this machine's ptxas takes, for ptxas_info's register count. Only the header line
    changes: the kernels counted here use sm_90 instructions both versions know."""
    v = _ptx_version()
    return ptx if v is None else re.sub(r"^\.version \d+\.\d+", f".version {v // 10}.{v % 10}", ptx, count=1,
                                       flags=re.M)


# ----------------------------------------------------------------------------------------------
# PTX census

_PTX = {
    "tma_load": r"cp\.async\.bulk\.tensor\.\d+d\.shared",  # global -> shared (TMA load)
    "tma_store": r"cp\.async\.bulk\.tensor\.\d+d\.global\.shared",  # shared -> global (TMA store)
    "tma_store_wait": r"cp\.async\.bulk\.wait_group",
    "cp_async": r"\bcp\.async\.(?:ca|cg)\.shared",  # Ampere-style async copies
    "ld_shared": r"\bld\.shared",
    "st_shared": r"\bst\.shared",
    "ldmatrix": r"\bldmatrix",
    "stmatrix": r"\bstmatrix",
    "mbarrier_init": r"mbarrier\.init",
    "mbarrier_wait": r"mbarrier\.try_wait|mbarrier\.test_wait",
    "mbarrier_arrive": r"mbarrier\.arrive",
    "mbarrier_expect_tx": r"mbarrier\.arrive\.expect_tx|mbarrier\.expect_tx",
    "bar_sync": r"\bbar\.sync|\bbarrier\.sync|\bbarrier\.cta\.sync|\bbar\.cta\.sync",
    "fence_proxy_async": r"fence\.proxy\.async",
    "wgmma": r"wgmma\.mma_async",
    "wgmma_wait": r"wgmma\.wait_group",
    "setmaxnreg": r"setmaxnreg",
    "shfl": r"shfl\.sync",
    "ld_local": r"\bld\.local",
    "st_local": r"\bst\.local",
}
_TYPE_BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "b32": 32,
              "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64, "b128": 128}
_LDST_GLOBAL = re.compile(r"\b(ld|st)\.global((?:\.[A-Za-z0-9_:]+)*)")


def _code_lines(ptx: str) -> list[str]:
    return [l for l in ptx.splitlines() if l.strip() and not l.strip().startswith("//")]


def _access_bits(suffixes: str) -> int | None:
    parts = suffixes.strip(".").split(".")
    vec = 1
    bits = None
    for p in parts:
        if p in ("v2", "v4", "v8"):
            vec = int(p[1:])
        elif p in _TYPE_BITS:
            bits = _TYPE_BITS[p]
    return None if bits is None else vec * bits


def ptx_census(ptx: str) -> dict:
    lines = _code_lines(ptx)
    out = {k: sum(1 for l in lines if re.search(p, l)) for k, p in _PTX.items()}
    ld, st = collections.Counter(), collections.Counter()
    for l in lines:
        for kind, suf in _LDST_GLOBAL.findall(l):
            (ld if kind == "ld" else st)[_access_bits(suf)] += 1
    out["ld_global"] = sum(ld.values())
    out["st_global"] = sum(st.values())
    out["ld_global_by_bits"] = {int(k) if k else 0: v for k, v in sorted(ld.items(), key=lambda kv: kv[0] or 0)}
    out["st_global_by_bits"] = {int(k) if k else 0: v for k, v in sorted(st.items(), key=lambda kv: kv[0] or 0)}
    out["setmaxnreg_values"] = sorted({int(m) for m in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)})
    out["wgmma_shapes"] = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
    return out


# ----------------------------------------------------------------------------------------------
# ptxas / cuobjdump

def ptxas_info(ptx: str, arch: str = "sm_90a") -> dict:
    """Registers, spill bytes, stack frame and smem from the wheel's ptxas -v."""
    ptxas = _tool("ptxas")
    if ptxas is None:
        return {}
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        Path(src).write_text(ptx)
        res = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", src, "-o", os.path.join(d, "k.o")],
                             capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError(f"ptxas failed:\n{log[-2000:]}")

    def grab(pat, default=0):
        m = re.search(pat, log)
        return int(m.group(1)) if m else default

    return {"registers": grab(r"Used (\d+) registers", None), "spill_store_bytes": grab(r"(\d+) bytes spill stores"),
            "spill_load_bytes": grab(r"(\d+) bytes spill loads"), "stack_frame_bytes": grab(r"(\d+) bytes stack frame"),
            "ptxas_log": log.strip()}


SASS_OPS = ("UTMALDG", "UTMASTG", "HGMMA", "SYNCS", "BAR", "USETMAXREG", "LDG", "STG", "LDS", "STS", "LDSM", "STSM",
            "LDL", "STL", "SHFL", "LDGSTS")


def sass(cubin: bytes) -> str:
    tool = _tool("cuobjdump")
    if tool is None:
        return ""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.cubin")
        Path(p).write_bytes(cubin)
        return subprocess.run([tool, "-sass", p], capture_output=True, text=True, timeout=600).stdout


def sass_census(sass_text: str) -> dict:
    ops = collections.Counter()
    for line in sass_text.splitlines():
        m = re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops[m.group(1)] += 1
    return {op: ops.get(op, 0) for op in SASS_OPS}


def census(k) -> dict:
    """Full census of a CompiledKernel: PTX counts, SASS opcodes, smem, registers, spills, TMA boxes."""
    ptx = k.asm["ptx"]
    c = ptx_census(ptx)
    md = k.metadata
    c["smem_bytes"] = int(md.shared)
    c["num_warps"] = int(md.num_warps)
    info = ptxas_info(ptx)
    c["registers"] = info.get("registers")
    c["spill_bytes"] = info.get("spill_store_bytes", 0) + info.get("spill_load_bytes", 0)
    c["stack_frame_bytes"] = info.get("stack_frame_bytes", 0)
    c["sass"] = sass_census(sass(k.asm["cubin"]))
    tdm = getattr(md, "tensordesc_meta", None) or []
    c["tma_boxes"] = [{"block_size": list(m.get("block_size", [])), "swizzle": m.get("swizzle")} for m in tdm]
    return c


# ----------------------------------------------------------------------------------------------
# inspect: a registered variant compiled exactly as it would launch, refused where launch would be

SM90_THREADS_PER_CTA = 1024  # cudaFuncAttribute maxThreadsPerBlock without register pressure
SM90_REGS_PER_CTA = 65536  # 32-bit registers one CTA may hold (the whole register file of an SM)
REG_ALLOC_PER_WARP = 256  # registers are allocated to warps in units of 256 (8 per thread)
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class InspectError(ValueError):
    """inspect cannot show a census for this request; kind says why (the CLI's message prefix)."""
    kind = "error"


class NoCodegen(InspectError):
    """The variant has no CPU codegen hook (a library call, torch.compile, ...)."""
    kind = "no CPU codegen"


class Refused(InspectError):
    """The variant's launch (its checks, its configure) or the CUDA runtime would refuse this."""
    kind = "refused"


@dataclass
class Inspection:
    """What inspect compiled: the variant's configure() result (config; None for variants without
    knobs), the compile_sm90 arguments (spec), the CompiledKernel, its census, and notes (e.g. a
    fallback launch takes) and warnings (spills)."""
    op: str
    variant: str
    shape: dict
    dtype: str
    config: Any
    spec: dict
    kernel: Any
    census: dict
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def kernel_name(self) -> str:
        return self.kernel.metadata.name


def _fmt_int(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def no_codegen_reason(v) -> str:
    """What a variant without a codegen hook is, in a few words."""
    d = (v.description or "").lower()
    if "torch.compile" in d:
        return "torch.compile: Inductor generates its kernel at call time, on the GPU"
    if v.name == "torch" or d.startswith("eager torch"):
        return "a library call: eager PyTorch (ATen kernels: cuBLAS for matmuls)"
    if "liger" in d or v.name == "liger":
        return "a library call: Liger-Kernel's own Triton kernel, JIT-compiled by the library at call time"
    kind = "a baseline kernel" if not v.ours else "a kernel"
    return f"{kind} registered without a CPU compile spec (no codegen hook)"


def normalize_dtype(dtype: str) -> str:
    dt = DTYPE_ALIASES.get(dtype, dtype)
    if dt not in DTYPE_ALIASES.values():
        raise InspectError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_ALIASES)} or "
                           f"{sorted(DTYPE_ALIASES.values())}")
    return dt


def registry_variants(op: str) -> list[str]:
    from . import registry
    return registry.variants(op, available_only=False)


def _variant(op: str, variant: str):
    """The registered variant, or an InspectError listing what inspect can compile for op."""
    from . import registry, specs
    specs.get(op)  # unknown op -> ValueError naming the ops
    names = registry.variants(op, available_only=False)
    if variant not in names:
        with_cg = [n for n in names if registry.get_variant(op, n).codegen is not None]
        without = [n for n in names if n not in with_cg]
        head = ("'auto' picks a variant per call from the selection table, on the GPU; inspect a named one"
                if variant == "auto" else f"unknown variant {variant!r} for {op}")
        raise InspectError(f"{head}: with a CPU codegen: {with_cg}; without (nothing to compile here): {without}")
    return registry.get_variant(op, variant)


def _check_knob_names(v, shape: dict, dtype: str, overrides: dict) -> None:
    """Knobs a variant lacks are an error here (the configure hooks ignore unknown keys: sweeps
    pass extra record fields); known: the variant's sweep knobs and its config's fields."""
    import dataclasses
    if v.configure is None:
        raise InspectError(f"variant {v.name!r} of {v.op} has no knobs; got {sorted(overrides)}")
    known = set(v.knobs)
    try:
        cfg = v.resolve(shape, dtype, {})
        if dataclasses.is_dataclass(cfg):
            known |= {f.name for f in dataclasses.fields(cfg)}
    except (ValueError, TypeError):
        pass
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise InspectError(f"variant {v.name!r} of {v.op} has no knob {unknown[0]!r}; its knobs: {sorted(known)}")


def launch_check(v, shape: dict, dtype: str) -> None:
    """Run the op's validate and the variant's check (what launch runs first) on meta tensors of
    this shape: a Refused naming the rule if launch would refuse these inputs."""
    import torch
    spec = v.spec
    dt = getattr(torch, dtype)
    shape = dict(shape)
    if spec.shape_keys == ("M", "N") and shape.get("M") is None:
        shape["M"] = 16384  # the many-rows regime M=None stands for; the rules do not depend on M

    def rnd(*size, mean=0.0, std=1.0):
        return torch.empty(*size, dtype=dt, device="meta")

    try:
        inputs = spec.make_inputs(shape, dtype, rnd)
        spec.validate(*inputs, **spec.default_scalars())
        if v.check is not None:
            v.check(*inputs)
    except (ValueError, TypeError) as e:
        raise Refused(str(e)) from None


def runtime_refusal(c: dict) -> str | None:
    """Why the CUDA runtime would refuse to launch a kernel with this census on sm_90 (None: it
    launches): shared memory over the per-CTA opt-in limit, more threads than a CTA may have, or
    more registers than the register file holds for its threads."""
    from .kernels.hopper import SMEM_LIMIT
    smem, warps, regs = c.get("smem_bytes") or 0, c.get("num_warps") or 0, c.get("registers")
    if smem > SMEM_LIMIT:
        return (f"needs {_fmt_int(smem)} B of shared memory per CTA, sm_90 allows {_fmt_int(SMEM_LIMIT)} B "
                f"({SMEM_LIMIT // 1024} KB)")
    if warps * 32 > SM90_THREADS_PER_CTA:
        return f"needs {warps * 32} threads per CTA ({warps} warps), sm_90 allows {SM90_THREADS_PER_CTA}"
    if regs:
        per_warp = -(-regs * 32 // REG_ALLOC_PER_WARP) * REG_ALLOC_PER_WARP
        if warps * per_warp > SM90_REGS_PER_CTA:
            return (f"needs {regs} registers x {warps * 32} threads = {_fmt_int(warps * per_warp)} registers per CTA "
                    f"(allocated per warp in units of {REG_ALLOC_PER_WARP}), sm_90 allows "
                    f"{_fmt_int(SM90_REGS_PER_CTA)}")
    return None


def runtime_warnings(c: dict) -> list[str]:
    """What launches but costs: spills to local memory (ptxas -v; SASS LDL/STL lines)."""
    sass_ = c.get("sass") or {}
    if c.get("spill_bytes") or c.get("ld_local") or c.get("st_local"):
        return [f"ptxas spills {c.get('spill_bytes', 0)} B to local memory at {c.get('registers')} registers per "
                f"thread (SASS: {sass_.get('LDL', '?')} LDL / {sass_.get('STL', '?')} STL lines)"]
    return []


def _resolve_spec(v, shape: dict, dtype: str, config, overrides: dict, strict: bool):
    """(config, codegen spec, notes) of inspect_kernel: launch checks, configure, codegen hook."""
    if strict:
        launch_check(v, shape, dtype)
    notes, spec = [], None
    if config is not None:
        cfg = config
    else:
        try:
            cfg = v.resolve(shape, dtype, overrides)  # raises for knobs it lacks, configs it refuses
        except (ValueError, TypeError) as e:
            if overrides:
                raise Refused(f"configure refused {overrides}: {e}") from None
            try:  # launch may run these inputs on another kernel (its codegen hook knows which)
                spec = v.codegen(shape, dtype, None)
            except (ValueError, TypeError):
                raise Refused(str(e)) from None
            notes.append(f"configure refused this shape ({e}); launch falls back and runs the kernel below")
            cfg = None
    if spec is None:
        try:
            spec = v.codegen(shape, dtype, cfg)
        except (ValueError, TypeError) as e:
            raise Refused(str(e)) from None
    return cfg, spec, notes


def inspect_kernel(op: str, variant: str, *, N: int | None = None, shape: dict | None = None,
                   dtype: str = "bfloat16", config=None, strict: bool = True, **overrides) -> Inspection:
    """Compile a registered variant on sm_90 exactly as it would launch and take its census.

    Row ops: N (and optionally M, default None: the heuristic's many-rows choice); other ops: shape.
    overrides: knobs, as a sweep would set them; config: an already resolved config object (then
    no overrides, and configure is not asked). Order: the op's and the variant's launch checks on
    meta tensors (strict), configure (where it refuses a shape that launch runs elsewhere, e.g. a
    ring variant's rows too long for a ring, the variant's codegen hook compiles what launch runs
    instead, with a note), compile, then the CUDA runtime's limits (strict). Raises NoCodegen,
    Refused (both InspectError, a ValueError) or the registry's ValueError for an unknown op."""
    v = _variant(op, variant)
    dtype = normalize_dtype(dtype)
    if v.codegen is None:
        others = [n for n in registry_variants(op) if _variant(op, n).codegen is not None]
        raise NoCodegen(f"variant {variant!r} of {op} is {no_codegen_reason(v)}; nothing to compile for sm_90 "
                        f"here. Variants of {op} with a CPU codegen: {others}")
    if shape is None:
        if v.spec.shape_keys != ("M", "N"):
            raise InspectError(f"{op} shapes are {v.spec.shape_keys}: pass shape (CLI: --shape '{{...}}'), not N")
        if N is None:
            raise InspectError("pass N (row ops) or shape")
        shape = {"M": overrides.pop("M", None), "N": N}
    else:
        unknown = [k for k in shape if k not in v.spec.shape_keys]
        if unknown:
            raise InspectError(f"{op} shapes take the keys {list(v.spec.shape_keys)}; got unknown {unknown}")
    if config is not None and overrides:
        raise InspectError(f"pass either config or knob overrides, not both (got {sorted(overrides)})")
    try:
        if overrides:
            _check_knob_names(v, shape, dtype, overrides)
        cfg, spec, notes = _resolve_spec(v, shape, dtype, config, overrides, strict)
    except KeyError as e:  # a shape dict without a dimension the op needs
        raise InspectError(f"{op} shape {shape} lacks {e.args[0]!r}; {op} shapes take the keys "
                           f"{list(v.spec.shape_keys)}") from None
    k = compile_spec(spec)
    c = census(k)
    if strict:
        why = runtime_refusal(c)
        if why:
            what = ", ".join(f"{k_}={v_}" for k_, v_ in shape.items())
            raise Refused(f"{why}: the CUDA runtime would refuse to launch {k.metadata.name} ({op} {variant}, {what}, "
                          f"{dtype})")
    return Inspection(op=op, variant=variant, shape=shape, dtype=dtype, config=cfg, spec=spec, kernel=k, census=c,
                      notes=notes, warnings=runtime_warnings(c))


def inspect_variant(op: str, variant: str, *, N: int | None = None, shape: dict | None = None, dtype: str = "bfloat16",
                    config=None, strict: bool = True, **overrides):
    """(CompiledKernel, census) of inspect_kernel(...): a registered variant compiled on sm_90 exactly as
    it would launch (its configure + codegen hooks). Row ops: N (and optionally M); other ops:
    shape. overrides: knobs; config: an already resolved config object (then no overrides).
    strict=False skips the launch checks and the runtime limits (compile whatever the hooks give)."""
    ins = inspect_kernel(op, variant, N=N, shape=shape, dtype=dtype, config=config, strict=strict, **overrides)
    return ins.kernel, ins.census


def compile_spec(spec: dict):
    """compile_sm90 of a codegen spec (fn, signature, constexprs, num_warps, aligned, and compile
    options such as maxnreg, top level or under "options")."""
    known = ("fn", "signature", "constexprs", "num_warps", "aligned", "options")
    opts = {**spec.get("options", {}), **{k: v for k, v in spec.items() if k not in known}}
    return compile_sm90(spec["fn"], spec["signature"], spec.get("constexprs"), num_warps=spec.get("num_warps", 4),
                        aligned=spec.get("aligned", ()), **opts)


# ----------------------------------------------------------------------------------------------
# readable output (python -m gluon_lab_old inspect)

def _short(v) -> str:
    if isinstance(v, (bool, int, float, str)):
        return repr(v) if isinstance(v, str) else str(v)
    name = getattr(v, "__name__", None) or getattr(getattr(v, "fn", None), "__name__", None)
    return name or type(v).__name__


def _bits(d: dict) -> str:
    return ", ".join(f"{k}-bit x{n}" if k else f"?-bit x{n}" for k, n in d.items()) or "-"


def format_header(ins: Inspection) -> str:
    shape = ", ".join(f"{k}={v}" + (" (unset: the many-rows case heuristics assume)" if v is None and k == "M" else "")
                      for k, v in ins.shape.items())
    fn = ins.spec["fn"]
    mod = getattr(getattr(fn, "fn", fn), "__module__", "?")
    spec_keys = ("fn", "signature", "constexprs", "num_warps", "aligned", "options")
    opts = {**ins.spec.get("options", {}), **{k: v for k, v in ins.spec.items() if k not in spec_keys}}
    ce = {k: v for k, v in (ins.spec.get("constexprs") or {}).items() if v is not None and k != "num_warps"}
    warps, nw = ins.census["num_warps"], ins.spec.get("num_warps", 4)
    cfg = repr(ins.config) if ins.config is not None else (
        "none (configure refused; see the note)" if ins.notes else "none (the variant has no knobs)")
    lines = [f"{ins.op} {ins.variant}: {shape}, {ins.dtype} -> sm_90 (cuda:90), compiled on this CPU",
             f"kernel: {ins.kernel_name} ({mod})",
             f"config: {cfg}",
             f"launch: num_warps={nw}" + (f" + {warps - nw} warp-specialized worker warps" if warps != nw else "")
             + f" = {warps * 32} threads per CTA" + "".join(f", {k}={v}" for k, v in opts.items()),
             "constexprs: " + (" ".join(f"{k}={_short(v)}" for k, v in ce.items()) or "-")]
    lines += [f"note: {n}" for n in ins.notes]
    return "\n".join(lines)


def format_census(c: dict) -> str:
    """The census as readable lines (static counts: PTX / SASS lines, not executed instructions)."""
    from .kernels.hopper import SMEM_LIMIT
    s = c.get("sass", {})
    boxes = "; ".join(f"{b['block_size']} swizzle {b['swizzle']}" for b in c.get("tma_boxes", [])) or "-"
    regs = c.get("registers")
    rows = [
        ("TMA", f"loads {c['tma_load']}, stores {c['tma_store']}, store waits {c['tma_store_wait']}; boxes {boxes}"),
        ("ld.global", f"{c['ld_global']} ({_bits(c['ld_global_by_bits'])})"),
        ("st.global", f"{c['st_global']} ({_bits(c['st_global_by_bits'])})"),
        ("shared", f"ld {c['ld_shared']}, st {c['st_shared']}, ldmatrix {c['ldmatrix']}, stmatrix {c['stmatrix']}, "
                   f"cp.async {c['cp_async']}"),
        ("mbarrier", f"init {c['mbarrier_init']}, wait {c['mbarrier_wait']}, arrive {c['mbarrier_arrive']}, "
                     f"expect_tx {c['mbarrier_expect_tx']}; bar.sync {c['bar_sync']}, "
                     f"fence.proxy.async {c['fence_proxy_async']}"),
        ("wgmma", f"{c['wgmma']} {c['wgmma_shapes'] or ''}, waits {c['wgmma_wait']}".replace(" , ", ", ")),
        ("setmaxnreg", f"{c['setmaxnreg']} {c['setmaxnreg_values'] or ''}".strip()),
        ("shfl", f"{c['shfl']}"),
        ("smem", f"{_fmt_int(c['smem_bytes'])} B per CTA (sm_90 allows {_fmt_int(SMEM_LIMIT)} B)"),
        ("registers", (f"{regs} per thread x {c['num_warps'] * 32} threads" if regs else "? (no ptxas)")
         + f"; spills {c['spill_bytes']} B, stack {c['stack_frame_bytes']} B, "
           f"ld/st.local {c['ld_local']}/{c['st_local']}"),
        ("SASS", " ".join(f"{k} {v}" for k, v in s.items()) or "? (no cuobjdump)"),
    ]
    w = max(len(k) for k, _ in rows)
    return "\n".join(["census (static: lines of PTX / SASS, not executed instructions)"]
                     + [f"  {k:<{w}}  {v}" for k, v in rows])


def format_inspection(ins: Inspection) -> str:
    return "\n".join([format_header(ins), format_census(ins.census)] + [f"warning: {w}" for w in ins.warnings])


def census_table(rows: dict) -> "pandas.DataFrame":  # noqa: F821
    """{label: census} -> one row per kernel with the columns the notebooks show."""
    import pandas as pd
    cols = ["tma_load", "tma_store", "ld_global", "ld_global_by_bits", "st_global", "st_global_by_bits", "ld_shared",
            "st_shared", "mbarrier_wait", "mbarrier_arrive", "bar_sync", "wgmma", "setmaxnreg", "smem_bytes",
            "registers", "spill_bytes", "num_warps"]
    return pd.DataFrame({label: {c: cen.get(c) for c in cols} for label, cen in rows.items()}).T
