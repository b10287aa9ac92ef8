"""Hopper (sm_90) facts and the host plumbing every Gluon kernel module shares: shared-memory and
register limits, dtype names, TMA descriptors and the rules TMA puts on operands, output
allocation, and the compile_sm90 arguments that reproduce how the runtime specializes a launch.

Each of these exists once; the pattern modules (tma_cache, chunked, pipelined, warp_specialized,
gemm) import them from here.
"""
from __future__ import annotations

from triton.experimental.gluon import language as gl

SMEM_LIMIT = 232448  # bytes of shared memory one CTA may use on sm_90 (227 KB)
SM_SMEM = 233472  # bytes of shared memory per SM (228 KB), shared by the resident CTAs
CTA_SMEM_OVERHEAD = 1024  # of SM_SMEM, reserved by the hardware per resident CTA
SMEM_RESERVE = 2048  # on top of a kernel's buffers: reduction scratch + barriers + alignment (measured <= 1 KB)
REGS_PER_SM = 65536  # 32-bit registers per SM
MAX_WARPS_PER_SM = 64
H200_SMS = 132  # the heuristics' SM count (grids use the device's own)

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}  # compile_sm90 signature types
GL_DTYPE = {"bfloat16": gl.bfloat16, "float16": gl.float16, "float32": gl.float32}


def dtype_name(t) -> str:
    """A torch tensor's dtype as the lab names it ("bfloat16", "float16", "float32")."""
    return str(t.dtype).replace("torch.", "")


def short_dtype(dtype: str) -> str:
    return SHORT_DTYPE[dtype]


def vec(dtype: str) -> int:
    """Elements per 16-byte vector (8 x bf16/fp16, 4 x fp32): the width of every 128-bit access."""
    return 16 // ITEMSIZE[dtype]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_layout(dtype: str, rank: int = 2):
    """Shared layout of a row buffer: swizzle 0, so a thread reads its 16-byte vectors of a row
    contiguously (conflict-free) and the buffer stays plain row-major (a rank-3 box can be viewed
    as [R, N])."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=ITEMSIZE[dtype] * 8, rank=rank)


def desc_type(dtype: str, block, layout) -> str:
    """The compile_sm90 signature type of a host TensorDescriptor with this block and layout."""
    return f"tensordesc<{short_dtype(dtype)}{list(block)},{layout!r}>"


def descriptor(t, block, layout, shape=None, strides=None):
    """A host TensorDescriptor over t (or over the view shape/strides of t's storage)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    if shape is None:
        return TensorDescriptor.from_tensor(t, list(block), layout)
    return TensorDescriptor(t, shape=list(shape), strides=list(strides), block_shape=list(block), layout=layout)


def num_sms(device) -> int:
    import torch
    return torch.cuda.get_device_properties(device).multi_processor_count


# ----------------------------------------------------------------------------------------------
# the rules TMA (and the row kernels without it) put on operands and out= buffers (checked before launch,
# errors name the argument and the rule)

def check_tma_rows(variant: str, N: int, dtype: str) -> None:
    """Rows of N elements can be TMA boxes and row strides: N * itemsize a multiple of 16 bytes."""
    e = ITEMSIZE[dtype]
    if (N * e) % 16:
        raise ValueError(f"variant {variant!r} needs N * itemsize to be a multiple of 16 bytes (TMA row stride "
                         f"and box rule): N={N} {dtype} is {N * e} bytes; use variant='torch' or 'triton'")


def check_row_operands(named: dict, N: int, rule: str = "TMA") -> None:
    """Every operand ({name: tensor or None}) of a row kernel: unit last stride and rows flattenable
    to (-1, N) without a copy; for TMA (rule "TMA") also a 16-byte aligned base and a 16-byte-multiple
    row stride. A kernel that reads rows without TMA passes its name as the rule (gluon-regs: any
    alignment, any row stride); the errors name it."""
    tma = rule == "TMA"
    for name, t in named.items():
        if t is None:
            continue
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (stride(-1) == 1) for {rule}; got "
                             f"strides {tuple(t.stride())}")
        if tma and t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer must be 16-byte aligned for TMA (got address % 16 = "
                             f"{t.data_ptr() % 16})")
        if t.dim() > 1:
            try:
                v = t.view(-1, N)
            except RuntimeError:
                raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy (strides "
                                 f"{tuple(t.stride())}); call .contiguous() first") from None
            if tma and v.shape[0] > 1 and (v.stride(0) * t.element_size()) % 16:
                raise ValueError(f"{name}'s row stride must be a multiple of 16 bytes for TMA; got "
                                 f"{v.stride(0)} elements = {v.stride(0) * t.element_size()} bytes")


def row_outputs(x, out, residual: bool, rule: str = "TMA"):
    """(y, s, y2, s2): y shaped like x, s (= x + residual) only when the op has a residual, else
    None; y2 / s2 their (M, N) views. out: y, or (y, s) for residual ops (pre-allocated): the
    caller's buffers, which take the operands' rules (check_row_operands under `rule`)."""
    import torch
    N = x.shape[-1]
    if out is None:
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual else None
    else:
        y, s = out if residual else (out, None)
        check_row_operands({"out (y)": y, "out (s)": s}, N, rule)
    return y, s, y.view(-1, N), (s.view(-1, N) if s is not None else None)


def out_like(x, out):
    """The output of a kernel that writes y with x's own indexing: out (the caller's buffer, which must have
    x's shape, dtype and strides) or a new torch.empty_like(x)."""
    import torch
    y = torch.empty_like(x) if out is None else out
    if y.shape != x.shape or y.stride() != x.stride() or y.dtype != x.dtype:
        raise ValueError(f"out must have x's shape, dtype and strides {tuple(x.stride())}")
    return y


# ----------------------------------------------------------------------------------------------
# codegen: compile_sm90 arguments for a launch, specialized as the runtime specializes it

def kernel_spec(fn, args: dict, constexprs: dict, *, num_warps: int, **options) -> dict:
    """compile_sm90 kwargs reproducing a launch of fn. args gives every non-constexpr parameter
    what the launcher passes, as the runtime sees it:
      None           an absent operand: a constexpr None;
      a type string  "*bf16" (a tensor: 16-byte aligned, as TMA operands and torch allocations
                     are), a desc_type(...) descriptor, or "i32"/"fp32" for a scalar the kernel
                     does not specialize on (do_not_specialize);
      an int         specialized as the runtime does: 1 becomes a constexpr, multiples of 16 are
                     marked divisible by 16.
    constexprs: the constexpr parameters' values. options: compile options (maxnreg), given both
    as keywords (compile_sm90(**spec)) and under "options" (codegen.inspect_variant)."""
    names = list(fn.arg_names)
    missing = [n for n in names if n not in args and n not in constexprs]
    if missing or set(args) & set(constexprs) or (set(args) | set(constexprs)) - set(names):
        raise ValueError(f"kernel_spec({fn.__name__}): arguments {sorted(args)} + constexprs {sorted(constexprs)} "
                         f"must cover the parameters {names} once each")
    signature, ce, aligned = {}, dict(constexprs), []
    for n in names:
        v = args.get(n, constexprs.get(n))
        if n in constexprs or v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 1):
            signature[n] = "constexpr"
            ce[n] = v
        elif isinstance(v, int):
            signature[n] = "i32"
            if v % 16 == 0:
                aligned.append(n)
        else:
            signature[n] = v
            if v.startswith("*"):
                aligned.append(n)
    spec = dict(fn=fn, signature=signature, constexprs=ce, aligned=aligned, num_warps=num_warps, **options)
    return dict(spec, options=dict(options)) if options else spec
