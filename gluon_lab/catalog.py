"""Registers every variant. Baselines live here; each pattern module registers its own
variants when imported (import order = the order variants are listed)."""
from __future__ import annotations

import functools

from . import ops
from .kernels import baselines as B
from .ops import register, rows_2d


# ----------------------------------------------------------------------------------------------
# torch eager (runs on CPU too)

@register("rms_norm", "torch", pattern="baseline", needs_cuda=False, description="F.rms_norm")
def rms_norm_torch(x, weight, eps=1e-6, out=None):
    import torch.nn.functional as F
    return F.rms_norm(x, (x.shape[-1], ), weight, eps)


@register("layer_norm", "torch", pattern="baseline", needs_cuda=False, description="F.layer_norm")
def layer_norm_torch(x, weight, bias, eps=1e-5, out=None):
    import torch.nn.functional as F
    return F.layer_norm(x, (x.shape[-1], ), weight, bias, eps)


@register("l2_norm", "torch", pattern="baseline", needs_cuda=False, description="F.normalize(p=2, dim=-1)")
def l2_norm_torch(x, eps=1e-12, out=None):
    import torch.nn.functional as F
    return F.normalize(x, p=2.0, dim=-1, eps=eps)


@register("add_rms_norm", "torch", pattern="baseline", needs_cuda=False, description="eager x + residual, F.rms_norm")
def add_rms_norm_torch(x, residual, weight, eps=1e-6, out=None):
    import torch.nn.functional as F
    s = x + residual
    return F.rms_norm(s, (x.shape[-1], ), weight, eps), s


@register("matmul", "torch", pattern="baseline", needs_cuda=False, description="torch.matmul (cuBLAS on CUDA)")
def matmul_torch(a, b, out=None):
    import torch
    return torch.matmul(a, b)


@register("group_norm", "torch", pattern="baseline", needs_cuda=False, check=ops.check_group_norm_args,
          description="F.group_norm")
def group_norm_torch(x, num_groups, weight, bias, eps=1e-5, out=None):
    import torch.nn.functional as F
    return F.group_norm(x, num_groups, weight, bias, eps)


@register("instance_norm", "torch", pattern="baseline", needs_cuda=False, check=ops.check_instance_norm_args,
          description="F.instance_norm(use_input_stats=True)")
def instance_norm_torch(x, weight, bias, eps=1e-5, out=None):
    import torch.nn.functional as F
    return F.instance_norm(x, weight=weight, bias=bias, use_input_stats=True, eps=eps)


# ----------------------------------------------------------------------------------------------
# torch.compile (default mode) of the eager fp32 formula

@functools.lru_cache(maxsize=None)
def compiled_formula(op: str):
    import torch
    import torch._dynamo
    # One specialization per shape and dtype: the default recompile limit (8) would silently
    # send later shapes of a sweep back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4096)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 65536)
    return torch.compile(B.FORMULAS[op], dynamic=False)


@register("rms_norm", "inductor", pattern="baseline", sources=(B.rms_norm_formula, ),
          description="torch.compile(default) of the eager fp32 formula")
def rms_norm_inductor(x, weight, eps=1e-6, out=None):
    return compiled_formula("rms_norm")(x, weight, eps)


@register("layer_norm", "inductor", pattern="baseline", sources=(B.layer_norm_formula, ),
          description="torch.compile(default) of the eager fp32 formula")
def layer_norm_inductor(x, weight, bias, eps=1e-5, out=None):
    return compiled_formula("layer_norm")(x, weight, bias, eps)


@register("l2_norm", "inductor", pattern="baseline", sources=(B.l2_norm_formula, ),
          description="torch.compile(default) of the eager fp32 formula")
def l2_norm_inductor(x, eps=1e-12, out=None):
    return compiled_formula("l2_norm")(x, eps)


@register("add_rms_norm", "inductor", pattern="baseline", sources=(B.add_rms_norm_formula, B.rms_norm_formula),
          description="torch.compile(default) of eager x + residual and the fp32 formula")
def add_rms_norm_inductor(x, residual, weight, eps=1e-6, out=None):
    return compiled_formula("add_rms_norm")(x, residual, weight, eps)


@register("group_norm", "inductor", pattern="baseline", sources=(B.group_norm_formula, B._float_or_none),
          check=ops.check_group_norm_args, description="torch.compile(default) of the eager fp32 formula")
def group_norm_inductor(x, num_groups, weight, bias, eps=1e-5, out=None):
    return compiled_formula("group_norm")(x, num_groups, weight, bias, eps)


@register("instance_norm", "inductor", pattern="baseline", sources=(B.instance_norm_formula, B._float_or_none),
          check=ops.check_instance_norm_args, description="torch.compile(default) of the eager fp32 formula")
def instance_norm_inductor(x, weight, bias, eps=1e-5, out=None):
    return compiled_formula("instance_norm")(x, weight, bias, eps)


# ----------------------------------------------------------------------------------------------
# plain Triton: one row per program, row in registers

def _check_triton_row(x, *rest):
    N = x.shape[-1]
    B._block(N)  # raises ValueError above the register cap
    rows_2d("x", x)


def _empty_like_rows(x, out):
    import torch
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {tuple(x.shape)}")
    return out


@register("rms_norm", "triton", pattern="baseline", sources=(B.rms_norm_triton, B.rms_norm_triton_kernel),
          supports_out=True, check=_check_triton_row,
          codegen=lambda N, dtype: B.triton_codegen_spec("rms_norm", N, dtype),
          description="plain Triton, one row per program, BLOCK=next_pow2(N) in registers")
def rms_norm_triton(x, weight, eps=1e-6, out=None):
    out = _empty_like_rows(x, out)
    B.rms_norm_triton(rows_2d("x", x), weight, eps, out.view(-1, x.shape[-1]))
    return out


@register("layer_norm", "triton", pattern="baseline", sources=(B.layer_norm_triton, B.layer_norm_triton_kernel),
          supports_out=True, check=_check_triton_row,
          codegen=lambda N, dtype: B.triton_codegen_spec("layer_norm", N, dtype),
          description="plain Triton, one row per program, BLOCK=next_pow2(N) in registers")
def layer_norm_triton(x, weight, bias, eps=1e-5, out=None):
    out = _empty_like_rows(x, out)
    B.layer_norm_triton(rows_2d("x", x), weight, bias, eps, out.view(-1, x.shape[-1]))
    return out


@register("l2_norm", "triton", pattern="baseline", sources=(B.l2_norm_triton, B.l2_norm_triton_kernel),
          supports_out=True, check=_check_triton_row,
          codegen=lambda N, dtype: B.triton_codegen_spec("l2_norm", N, dtype),
          description="plain Triton, one row per program, BLOCK=next_pow2(N) in registers")
def l2_norm_triton(x, eps=1e-12, out=None):
    out = _empty_like_rows(x, out)
    B.l2_norm_triton(rows_2d("x", x), eps, out.view(-1, x.shape[-1]))
    return out


@register("add_rms_norm", "triton", pattern="baseline",
          sources=(B.add_rms_norm_triton, B.add_rms_norm_triton_kernel), supports_out=True,
          check=lambda x, r, w: (_check_triton_row(x), rows_2d("residual", r)),
          codegen=lambda N, dtype: B.triton_codegen_spec("add_rms_norm", N, dtype),
          description="plain Triton, one row per program; writes y and x + residual")
def add_rms_norm_triton(x, residual, weight, eps=1e-6, out=None):
    y, s = out if out is not None else (None, None)
    y, s = _empty_like_rows(x, y), _empty_like_rows(x, s)
    N = x.shape[-1]
    B.add_rms_norm_triton(rows_2d("x", x), rows_2d("residual", residual), weight, eps, y.view(-1, N), s.view(-1, N))
    return y, s



# ----------------------------------------------------------------------------------------------
# torch.compile mode="max-autotune-no-cudagraphs" (RMSNorm table of pattern 1)

@functools.lru_cache(maxsize=None)
def compiled_formula_max_autotune(op: str):
    import torch
    compiled_formula(op)  # same recompile limits
    return torch.compile(B.FORMULAS[op], dynamic=False, mode="max-autotune-no-cudagraphs")


@register("rms_norm", "inductor-max-autotune", pattern="baseline", sources=(B.rms_norm_formula, ),
          description="torch.compile(mode='max-autotune-no-cudagraphs') of the eager fp32 formula")
def rms_norm_inductor_max_autotune(x, weight, eps=1e-6, out=None):
    return compiled_formula_max_autotune("rms_norm")(x, weight, eps)


# ----------------------------------------------------------------------------------------------
# Liger-Kernel (optional peer; pure Python on top of Triton). casting_mode="gemma" = fp32 math
# throughout, the same numerics as every other variant here (Liger's default "llama" multiplies
# by the weight in the input dtype).

def _liger_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("liger_kernel") is not None


def _liger_sources():
    if not _liger_available():
        return ()
    from liger_kernel.ops import fused_add_rms_norm, layer_norm, rms_norm
    return (rms_norm._rms_norm_forward_kernel, layer_norm._layer_norm_forward_kernel,
            fused_add_rms_norm._fused_add_rms_norm_forward_kernel) \
        if all(hasattr(m, n) for m, n in ((rms_norm, "_rms_norm_forward_kernel"),
                                           (layer_norm, "_layer_norm_forward_kernel"),
                                           (fused_add_rms_norm, "_fused_add_rms_norm_forward_kernel"))) else ()


@register("rms_norm", "liger", pattern="baseline", available=_liger_available, sources=_liger_sources(),
          description="Liger-Kernel LigerRMSNormFunction (casting_mode='gemma')")
def rms_norm_liger(x, weight, eps=1e-6, out=None):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma", False)


@register("layer_norm", "liger", pattern="baseline", available=_liger_available, sources=_liger_sources(),
          description="Liger-Kernel LigerLayerNormFunction")
def layer_norm_liger(x, weight, bias, eps=1e-5, out=None):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    return LigerLayerNormFunction.apply(x, weight, bias, eps)


@register("add_rms_norm", "liger", pattern="baseline", available=_liger_available, sources=_liger_sources(),
          description="Liger-Kernel LigerFusedAddRMSNormFunction (casting_mode='gemma')")
def add_rms_norm_liger(x, residual, weight, eps=1e-6, out=None):
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "gemma", False)


# ----------------------------------------------------------------------------------------------
# pattern 1: TMA caching of reused inputs

from .kernels import norm_math as _NM  # noqa: E402
from .kernels import tma_cache as _T  # noqa: E402


def _tma_variant(op: str):
    def fn(*inputs, eps, out=None, config=None):
        if op == "add_rms_norm":
            x, r, w = inputs
            return _T.launch(op, x, r, w, None, eps, out=out, config=config)
        if op == "layer_norm":
            x, w, b = inputs
            return _T.launch(op, x, None, w, b, eps, out=out, config=config)
        if op == "l2_norm":
            return _T.launch(op, inputs[0], None, None, None, eps, out=out, config=config)
        x, w = inputs
        return _T.launch(op, x, None, w, None, eps, out=out, config=config)

    fn.__name__ = fn.__qualname__ = f"{op}_gluon_tma"

    def check(*inputs):
        x = inputs[0]
        rest = inputs[1:]
        _T.check(op, x, *rest)

    register(op, "gluon-tma", pattern="tma-caching", needs_hopper=True, supports_out=True, check=check,
             sources=(_T.launch, _T.check, _T.TmaCacheConfig, _T.tma_cache_norm_kernel, _NM.row_stats,
                      _NM.normalize_chunk),
             codegen=lambda N, dtype, config=None: _T.codegen_spec(op, N, dtype, config),
             configure=lambda M, N, dtype, overrides: _T.TmaCacheConfig.make(op, N, dtype, M, **overrides),
             description="row(s) TMA-copied once into smem, both passes read smem; plain or TMA stores")(fn)


for _op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    _tma_variant(_op)

# variant="auto" without records: the pattern first, then the plain Triton kernel
for _op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    ops.AUTO_PREFERENCE[_op] = ["gluon-tma", "triton", "torch"]


# ----------------------------------------------------------------------------------------------
# pattern 2: chunked non-power-of-2 rows (measured on the H200, notebook 02)

from .kernels import chunked as _C  # noqa: E402


def _chunked_variant(op: str):
    def fn(*inputs, eps, out=None, config=None):
        if op == "add_rms_norm":
            x, r, w = inputs
            return _C.launch(op, x, r, w, None, eps, out=out, config=config)
        if op == "layer_norm":
            x, w, b = inputs
            return _C.launch(op, x, None, w, b, eps, out=out, config=config)
        if op == "l2_norm":
            return _C.launch(op, inputs[0], None, None, None, eps, out=out, config=config)
        x, w = inputs
        return _C.launch(op, x, None, w, None, eps, out=out, config=config)

    fn.__name__ = fn.__qualname__ = f"{op}_gluon_chunked"
    register(op, "gluon-chunked", pattern="chunked", needs_hopper=True, supports_out=True,
             check=lambda *inputs: _C.check(op, *inputs),
             sources=(_C.launch, _C.check, _C.ChunkPlan, _C.chunked_norm_kernel, _C.streaming_norm_kernel,
                      _C.ROWS_HEURISTIC, _C.rowio.check_tma_operands, _C.rowio.outputs),
             codegen=lambda N, dtype, config=None: _C.codegen_spec(op, N, dtype, config),
             configure=lambda M, N, dtype, overrides: _C.ChunkPlan.for_row(
                 op, N, dtype, **{k: v for k, v in overrides.items() if k in _C.PLAN_KNOBS}),
             description="any N: power-of-2 TMA chunks into smem, zero-filled tail, masked variance/stores")(fn)


for _op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    _chunked_variant(_op)


# GroupNorm / InstanceNorm through the same chunked machinery (groups = 2-D regions of boxes)
def _group_sources():
    return (_C.launch_group, _C.check_group, _C.GroupPlan, _C.group_layout_of, _C.group_norm_kernel,
            _C._region_moments, _C._issue_region_chunk)


@register("group_norm", "gluon-chunked", pattern="chunked", needs_hopper=True, supports_out=True,
          check=lambda x, G, w, b: (ops.check_group_norm_args(x, G, w, b), _C.check_group(x, G, w, b)),
          sources=_group_sources(),
          description="one CTA per (sample, group): the group's region in power-of-2 TMA boxes, cached or ring-streamed")
def group_norm_gluon_chunked(x, num_groups, weight, bias, eps=1e-5, out=None, config=None):
    return _C.launch_group(x, num_groups, weight, bias, eps, out=out, config=config)


@register("instance_norm", "gluon-chunked", pattern="chunked", needs_hopper=True, supports_out=True,
          check=lambda x, w, b: (ops.check_instance_norm_args(x, w, b), _C.check_group(x, x.shape[1], w, b)),
          sources=_group_sources(),
          description="group_norm's kernel with one channel per group")
def instance_norm_gluon_chunked(x, weight, bias, eps=1e-5, out=None, config=None):
    return _C.launch_group(x, x.shape[1], weight, bias, eps, out=out, config=config)


# ----------------------------------------------------------------------------------------------
# pattern 3 (compute-bound case): matmul, measured on the H200 (notebook 03); auto picks from records.

from .kernels import gemm as _G  # noqa: E402


def _check_matmul_2d(a, b):
    _G.check(a, b)  # same rules (2-D, bf16/fp16, row-major, 16-byte rows) for the Triton baseline


@register("matmul", "triton", pattern="baseline", supports_out=False, check=_check_matmul_2d,
          sources=(B.matmul_triton, B.matmul_persistent_kernel),
          description="persistent tl.dot kernel, 128x256x64, 3 stages, grouped tile order")
def matmul_triton(a, b, out=None):
    return B.matmul_triton(a, b)


@register("matmul", "gluon-pipelined", pattern="pipelined", needs_hopper=True, supports_out=False, check=_G.check,
          sources=(_G.launch, _G.prepare, _G.check, _G.GemmConfig, _G.persistent_gemm_kernel),
          configure=lambda M, N, dtype, overrides: _G.GemmConfig.heuristic(M, N, dtype, **overrides),
          description="persistent TMA + wgmma GEMM: NUM_STAGES ring across tiles, grouped order, TMA-store epilogue")
def matmul_gluon_pipelined(a, b, out=None, config=None):
    return _G.launch(a, b, out=out, config=config)


# pattern 3: persistent, NUM_STAGES-ring norms (measured, notebook 03; not in AUTO_PREFERENCE: one-row kernels win)
from .kernels import pipelined as _P  # noqa: E402


def _pipelined_variant(op: str):
    def fn(*inputs, eps, out=None, config=None):
        if op == "add_rms_norm":
            x, r, w = inputs
            return _P.launch(op, x, r, w, None, eps, out=out, config=config)
        if op == "layer_norm":
            x, w, b = inputs
            return _P.launch(op, x, None, w, b, eps, out=out, config=config)
        if op == "l2_norm":
            return _P.launch(op, inputs[0], None, None, None, eps, out=out, config=config)
        x, w = inputs
        return _P.launch(op, x, None, w, None, eps, out=out, config=config)

    fn.__name__ = fn.__qualname__ = f"{op}_gluon_pipelined"
    register(op, "gluon-pipelined", pattern="pipelined", needs_hopper=True, supports_out=True,
             check=lambda *inputs: _P.check(op, *inputs),
             sources=(_P.launch, _P.check, _P.PipeConfig, _P.pipelined_norm_kernel, _P._load_block,
                      _NM.ring_row_stats, _NM.normalize_chunk, _C.rowio.check_tma_operands, _C.rowio.outputs),
             codegen=lambda N, dtype, config=None: _P.codegen_spec(op, N, dtype, config),
             configure=lambda M, N, dtype, overrides: _P.PipeConfig.heuristic(op, N, dtype, M, **overrides),
             description="persistent CTAs walk row blocks through a NUM_STAGES TMA ring; weights loaded once per CTA")(fn)


for _op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    _pipelined_variant(_op)


# variant="auto" without a record near the shape: gluon-chunked for NCHW GroupNorm/InstanceNorm
# (measured on the H200, notebook 02: 1.01-2.41x / 2.8-8.2x torch eager on every SD shape);
# channels-last input is refused by it, so auto falls through to torch.
for _op in ("group_norm", "instance_norm"):
    ops.AUTO_PREFERENCE[_op] = ["gluon-chunked", "torch"]


# pattern 4: warp-specialized persistent GEMM (measured, notebooks 03/04)
from .kernels import warp_specialized as _W  # noqa: E402


@register("matmul", "gluon-ws", pattern="warp-specialized", needs_hopper=True, supports_out=False, check=_G.check,
          sources=(_W.launch, _W.ws_gemm_kernel, _G.prepare, _G.GemmConfig, _G.check),
          configure=lambda M, N, dtype, overrides: _G.GemmConfig.heuristic(M, N, dtype, **overrides),
          description="persistent GEMM: 1 producer warp (TMA, setmaxnreg) + consumer warpgroups (wgmma), empty/full ring")
def matmul_gluon_ws(a, b, out=None, config=None):
    return _W.launch(a, b, out=out, config=config)


# pattern 4: warp-specialized persistent norms (1-warp TMA producer + consumer partition)
def _ws_norm_variant(op: str):
    def fn(*inputs, eps, out=None, config=None):
        if op == "add_rms_norm":
            x, r, w = inputs
            return _W.launch_norm(op, x, r, w, None, eps, out=out, config=config)
        if op == "layer_norm":
            x, w, b = inputs
            return _W.launch_norm(op, x, None, w, b, eps, out=out, config=config)
        if op == "l2_norm":
            return _W.launch_norm(op, inputs[0], None, None, None, eps, out=out, config=config)
        x, w = inputs
        return _W.launch_norm(op, x, None, w, None, eps, out=out, config=config)

    fn.__name__ = fn.__qualname__ = f"{op}_gluon_ws"
    register(op, "gluon-ws", pattern="warp-specialized", needs_hopper=True, supports_out=True,
             check=lambda *inputs: _W.check_norm(op, *inputs),
             sources=(_W.launch_norm, _W.check_norm, _W.WsNormConfig, _W.ws_norm_kernel, _W._wsn_producer,
                      _W._wsn_consumer, _W._block_range, _P._load_block, _P.PipeConfig, _NM.ring_row_stats,
                      _NM.normalize_chunk, _C.rowio.check_tma_operands, _C.rowio.outputs),
             codegen=lambda N, dtype, config=None: _W.norm_codegen_spec(op, N, dtype, config),
             configure=lambda M, N, dtype, overrides: _W.WsNormConfig.heuristic(op, N, dtype, M, **overrides),
             description="persistent ring split into a 1-warp TMA producer (EMPTY waits) and a consumer partition "
                         "(FULL waits, reduce, normalize, store)")(fn)


for _op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    _ws_norm_variant(_op)
