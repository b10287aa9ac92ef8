"""Compile any Gluon or Triton kernel for sm_90 on a CPU-only machine and take its census.

    k = compile_sm90(fn, signature, constexprs, num_warps=8, aligned=("w_ptr",))
    c = census(k)            # dict: TMA loads/stores, ld/st.global by width, mbarrier, wgmma, smem, regs, spills
    c = inspect_variant("rms_norm", "triton", N=5120, dtype="bfloat16")

Counts are STATIC: lines of PTX / SASS, not executed instructions (a line inside a loop runs many
times; one TMA line may be issued by several warps). They prove which instructions a pattern
emits and how wide its memory accesses are, which is what the notebooks compare.
Registers and spills come from running the wheel's ptxas -v on the PTX (what triton itself runs);
SASS opcodes from the wheel's cuobjdump. No CUDA driver needed.
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile
from pathlib import Path

def _tool(name: str) -> str | None:
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
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


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
            "LDL", "STL", "SHFL")


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


def inspect_variant(op: str, variant: str, *, N: int | None = None, shape: dict | None = None, dtype: str = "bfloat16",
                    config=None, **overrides):
    """Compile a registered variant on sm_90 exactly as it would launch (its configure + codegen
    hooks) and return (CompiledKernel, census). Row ops: N (and optionally M, default None: the
    heuristic's many-rows choice); other ops: shape. overrides: knobs, as a sweep would set them;
    config: an already resolved config object (then no overrides)."""
    from .registry import get_variant
    v = get_variant(op, variant)
    if v.codegen is None:
        what = ("a baseline: a library call, torch.compile, or a kernel registered without a CPU compile spec"
                if not v.ours else "registered without a CPU compile spec")
        raise ValueError(f"variant {variant!r} of {op} has no codegen hook ({what})")
    if shape is None:
        if v.spec.shape_keys != ("M", "N"):
            raise ValueError(f"{op} shapes are {v.spec.shape_keys}: pass shape (CLI: --shape '{{...}}'), not N")
        if N is None:
            raise ValueError("pass N (row ops) or shape")
        shape = {"M": overrides.pop("M", None), "N": N}
    if config is not None and overrides:
        raise ValueError(f"pass either config or knob overrides, not both (got {sorted(overrides)})")
    cfg = config if config is not None else v.resolve(shape, dtype, overrides)  # raises for knobs it lacks
    k = compile_spec(v.codegen(shape, dtype, cfg))
    return k, census(k)


def compile_spec(spec: dict):
    """compile_sm90 of a codegen spec (fn, signature, constexprs, num_warps, aligned, and compile
    options such as maxnreg, top level or under "options")."""
    known = ("fn", "signature", "constexprs", "num_warps", "aligned", "options")
    opts = {**spec.get("options", {}), **{k: v for k, v in spec.items() if k not in known}}
    return compile_sm90(spec["fn"], spec["signature"], spec.get("constexprs"), num_warps=spec.get("num_warps", 4),
                        aligned=spec.get("aligned", ()), **opts)


def census_table(rows: dict) -> "pandas.DataFrame":  # noqa: F821
    """{label: census} -> one row per kernel with the columns the notebooks show."""
    import pandas as pd
    cols = ["tma_load", "tma_store", "ld_global", "ld_global_by_bits", "st_global", "st_global_by_bits", "ld_shared",
            "st_shared", "mbarrier_wait", "mbarrier_arrive", "bar_sync", "wgmma", "setmaxnreg", "smem_bytes",
            "registers", "spill_bytes", "num_warps"]
    return pd.DataFrame({label: {c: cen.get(c) for c in cols} for label, cen in rows.items()}).T
