"""Pattern 5: fused QK-norm + RoPE on packed QKV — one read, one write.

The op (gluon_lab/specs/rope.py): every Q and K head of qkv [T, (Hq + 2·Hk)·D] is RMS-normalized
over D and rotated by RoPE, in place. What the pattern is about is where a head's values live
between its load and its store: here, in registers, from a single load of each rotary half.

* "gluon-fused" (register-resident, full rotary, NeoX or GPT-J): a CTA takes HEADS (token, head) units of the
  flattened Q/K head list (V heads are never visited). Each unit's two rotary halves are loaded by
  two 128-bit-vector loads into the SAME register layout [HEADS, D/2], so element j of the first half
  and element j of the second half sit in the same thread: the sum of squares is a warp-local
  reduction over both halves (shuffles only, no shared memory), and the rotation
  (y1·c − y2·s, y2·c + y1·s) needs no data exchange at all. Each half is stored once. The PTX has
  2 qkv loads, 2 qkv stores and no bar.sync (tests/test_qk_norm_rope.py counts them). GPT-J's
  pairs (2i, 2i+1) are adjacent: the head is loaded once as 32-bit words, each word split into its
  two 16-bit halves in registers (a shift and a bitcast), rotated, re-packed and stored once.
  Lanes of a warp cover TPW_D = (D/2)/VEC vectors of one head and TPW_H = 32/TPW_D heads, so a warp
  holds 8 heads at D = 64, 4 at 128, 2 at 256; a CTA of num_warps warps holds TPW_H·num_warps.
* "triton" (baseline): one program per (token, head), the head as one [D] vector, the rotation
  partner re-loaded (a second, L1-served load of the same head at the partner index); handles
  partial rotary and GPT-J.

Positions are range-checked on the host (the spec's data check); the kernels still guard: a
position outside the cache gives NaN for that token's heads, never an out-of-bounds read.
"""
from __future__ import annotations

import dataclasses

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .hopper import H200_SMS, ITEMSIZE, cdiv, dtype_name, kernel_spec, short_dtype


# ----------------------------------------------------------------------------------------------
# the Gluon kernel: register-resident halves

@gluon.jit
def _tile_load(qkv_ptr, pos_ptr, tile, n_units, HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr,
               NEOX: gl.constexpr, L: gl.constexpr, HEADS: gl.constexpr):
    """Issue the loads of one tile of HEADS (token, head) units: (a, b, off, m, is_q, pos). NeoX: a and
    b are the two rotary halves [HEADS, D/2] in layout L; GPT-J: a (= b) the head as 32-bit words,
    each holding a pair (2i, 2i+1)."""
    HALF: gl.constexpr = D // 2
    ROW: gl.constexpr = (HQ + 2 * HK) * D
    u = tile * HEADS + gl.arange(0, HEADS, layout=gl.SliceLayout(1, L))
    valid = u < n_units
    t = (u // (HQ + HK)).to(gl.int64)
    h = u % (HQ + HK)
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, L))
    m = gl.expand_dims(valid, 1)
    if NEOX:
        off = gl.expand_dims(t * ROW + h * D, 1) + gl.expand_dims(j, 0)
        a = gl.load(qkv_ptr + off, mask=m, other=0.0)
        b = gl.load(qkv_ptr + off + HALF, mask=m, other=0.0)
    else:
        off = gl.expand_dims((t * ROW + h * D) // 2, 1) + gl.expand_dims(j, 0)
        a = gl.load(qkv_ptr.to(gl.pointer_type(gl.int32)) + off, mask=m, other=0)
        b = a
    pos = gl.load(pos_ptr + t, mask=valid, other=0)
    return a, b, off, m, gl.expand_dims(h < HQ, 1), pos


@gluon.jit
def _halves(a, b, dt: gl.constexpr, NEOX: gl.constexpr):
    """fp32 (x1, x2): the rotary halves (NeoX) or the even / odd elements (GPT-J words split)."""
    if NEOX:
        return a.to(gl.float32), b.to(gl.float32)
    else:
        return ((a & 0xFFFF).to(gl.int16).to(dt, bitcast=True).to(gl.float32),
                (a >> 16).to(gl.int16).to(dt, bitcast=True).to(gl.float32))


@gluon.jit
def _weights(qw_ptr, kw_ptr, dt: gl.constexpr, D: gl.constexpr, NEOX: gl.constexpr, L: gl.constexpr):
    """(qw1, qw2, kw1, kw2) [1, D/2] fp32 in layout L, matching _halves."""
    HALF: gl.constexpr = D // 2
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, L))
    if NEOX:
        qa = gl.load(qw_ptr + j)
        qb = gl.load(qw_ptr + HALF + j)
        ka = gl.load(kw_ptr + j)
        kb = gl.load(kw_ptr + HALF + j)
    else:
        qa = gl.load(qw_ptr.to(gl.pointer_type(gl.int32)) + j)
        qb = qa
        ka = gl.load(kw_ptr.to(gl.pointer_type(gl.int32)) + j)
        kb = ka
    q1, q2 = _halves(qa, qb, dt, NEOX)
    k1, k2 = _halves(ka, kb, dt, NEOX)
    return (gl.expand_dims(q1, 0), gl.expand_dims(q2, 0), gl.expand_dims(k1, 0), gl.expand_dims(k2, 0))


@gluon.jit
def _tile_finish(qkv_ptr, cache_ptr, a, b, off, m, is_q, pos, qw1, qw2, kw1, kw2, n_pos, eps, D: gl.constexpr,
                 NEOX: gl.constexpr, L: gl.constexpr):
    """Norm (warp-local reduction over both halves), weights, rotation, and the store(s) of a tile."""
    HALF: gl.constexpr = D // 2
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    x1, x2 = _halves(a, b, dt, NEOX)
    rstd = gl.expand_dims(gl.rsqrt(gl.sum(x1 * x1 + x2 * x2, axis=1) / D + eps), 1)
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, L))
    ok = m & gl.expand_dims((pos >= 0) & (pos < n_pos), 1)
    coff = gl.expand_dims(pos * D, 1) + gl.expand_dims(j, 0)  # rotary_dim == D: cos at [0, D/2), sin after
    c = gl.load(cache_ptr + coff, mask=ok, other=float("nan")).to(gl.float32)
    s = gl.load(cache_ptr + coff + HALF, mask=ok, other=float("nan")).to(gl.float32)
    y1 = x1 * rstd * gl.where(is_q, qw1, kw1)
    y2 = x2 * rstd * gl.where(is_q, qw2, kw2)
    o1 = (y1 * c - y2 * s).to(dt)
    o2 = (y2 * c + y1 * s).to(dt)
    if NEOX:
        gl.store(qkv_ptr + off, o1, mask=m)
        gl.store(qkv_ptr + off + HALF, o2, mask=m)
    else:
        lo = o1.to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
        hi = o2.to(gl.int16, bitcast=True).to(gl.int32) << 16
        gl.store(qkv_ptr.to(gl.pointer_type(gl.int32)) + off, lo | hi, mask=m)


@gluon.jit
def qk_norm_rope_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, n_units, n_pos, eps, HQ: gl.constexpr,
                        HK: gl.constexpr, D: gl.constexpr, NEOX: gl.constexpr, VEC: gl.constexpr,
                        TPW_H: gl.constexpr, TPW_D: gl.constexpr, num_warps: gl.constexpr):
    """One tile per CTA: load, reduce, rotate, store."""
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [TPW_H, TPW_D], [num_warps, 1], [1, 0])
    HEADS: gl.constexpr = TPW_H * num_warps
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    a, b, off, m, is_q, pos = _tile_load(qkv_ptr, pos_ptr, gl.program_id(0), n_units, HQ, HK, D, NEOX, L, HEADS)
    qw1, qw2, kw1, kw2 = _weights(qw_ptr, kw_ptr, dt, D, NEOX, L)
    _tile_finish(qkv_ptr, cache_ptr, a, b, off, m, is_q, pos, qw1, qw2, kw1, kw2, n_pos, eps, D, NEOX, L)


@gluon.jit
def qk_norm_rope_persistent_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, n_units, n_tiles, n_pos, eps,
                                   HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr, NEOX: gl.constexpr,
                                   VEC: gl.constexpr, TPW_H: gl.constexpr, TPW_D: gl.constexpr,
                                   num_warps: gl.constexpr):
    """Persistent: CTA p takes tiles p, p + grid, ...; the weights are loaded once, and the next tile's
    qkv and positions are loaded (into registers) before the current tile is reduced, rotated and
    stored, so a tile's load latency hides behind the previous tile's work."""
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [TPW_H, TPW_D], [num_warps, 1], [1, 0])
    HEADS: gl.constexpr = TPW_H * num_warps
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    qw1, qw2, kw1, kw2 = _weights(qw_ptr, kw_ptr, dt, D, NEOX, L)
    a, b, off, m, is_q, pos = _tile_load(qkv_ptr, pos_ptr, pid, n_units, HQ, HK, D, NEOX, L, HEADS)
    for tile in range(pid, n_tiles, nprog):
        na, nb, noff, nm, nis_q, npos = _tile_load(qkv_ptr, pos_ptr, tile + nprog, n_units, HQ, HK, D, NEOX, L,
                                                   HEADS)
        _tile_finish(qkv_ptr, cache_ptr, a, b, off, m, is_q, pos, qw1, qw2, kw1, kw2, n_pos, eps, D, NEOX, L)
        a, b, off, m, is_q, pos = na, nb, noff, nm, nis_q, npos


@dataclasses.dataclass(frozen=True)
class FusedConfig:
    num_warps: int

    @staticmethod
    def lanes(D: int, dtype: str, neox: bool = True) -> tuple[int, int, int]:
        """(VEC, TPW_H, TPW_D): 16-byte vectors over the D/2 columns of the register tile — elements of
        a half (NeoX) or 32-bit words holding a pair (GPT-J) — spread over TPW_D lanes."""
        vec = 16 // ITEMSIZE[dtype] if neox else 4
        tpw_d = min(32, (D // 2) // vec)
        return vec, 32 // tpw_d, tpw_d

    def heads_per_cta(self, D: int, dtype: str, neox: bool = True) -> int:
        return self.lanes(D, dtype, neox)[1] * self.num_warps

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "FusedConfig":
        # 4 warps per CTA (16 heads at D = 128) while the grid still fills two waves of the SMs: fewer,
        # larger CTAs amortize the weight loads. Below that (decode: 1-16 tokens, 24-80 heads each),
        # one warp per CTA spreads the few heads over as many SMs as possible — the latency of one
        # head's load-reduce-store chain is the whole kernel there.
        units = shape["T"] * (shape["Hq"] + shape["Hk"])
        big = cls(4)
        if cdiv(units, big.heads_per_cta(shape["D"], dtype)) >= 2 * H200_SMS:
            return big
        return cls(1)


def fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions):
    r = cos_sin_cache.shape[1]
    if r != head_dim:
        raise ValueError(f"variant 'gluon-fused' rotates the whole head (rotary_dim == head_dim = {head_dim}); got "
                         f"rotary_dim {r}. Use variant='triton' or 'torch' for partial rotary")
    for name, t in (("qkv", qkv), ("q_weight", q_weight), ("k_weight", k_weight), ("cos_sin_cache", cos_sin_cache)):
        if t.data_ptr() % 16:
            raise ValueError(f"variant 'gluon-fused' needs {name}'s data pointer 16-byte aligned (128-bit accesses); "
                             f"got address % 16 = {t.data_ptr() % 16}")


def configure(shape: dict, dtype: str, overrides: dict) -> FusedConfig:
    cfg = FusedConfig.heuristic(shape, dtype)
    nw = overrides.get("num_warps")
    if nw is not None:
        if nw not in (1, 2, 4, 8):
            raise ValueError(f"num_warps must be 1, 2, 4 or 8; got {nw}")
        cfg = FusedConfig(nw)
    return cfg


def fused(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps, is_neox,
          config: FusedConfig | None = None):
    fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions)
    T = qkv.shape[0]
    dt = dtype_name(qkv)
    shape = {"T": T, "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim}
    cfg = config or FusedConfig.heuristic(shape, dt)
    vec, tpw_h, tpw_d = FusedConfig.lanes(head_dim, dt, is_neox)
    units = T * (num_heads_q + num_heads_k)
    if units:
        qk_norm_rope_kernel[(cdiv(units, cfg.heads_per_cta(head_dim, dt, is_neox)), )](
            qkv, q_weight, k_weight, cos_sin_cache, positions, units, cos_sin_cache.shape[0], eps, HQ=num_heads_q,
            HK=num_heads_k, D=head_dim, NEOX=is_neox, VEC=vec, TPW_H=tpw_h, TPW_D=tpw_d, num_warps=cfg.num_warps)
    return qkv


def _gluon_codegen(kernel, shape: dict, dtype: str, num_warps: int, cache_dtype: str | None, is_neox: bool,
                   ints: tuple):
    """compile_sm90 arguments of one of the two Gluon kernels (they share every parameter but `ints`)."""
    vec, tpw_h, tpw_d = FusedConfig.lanes(shape["D"], dtype, is_neox)
    p = f"*{short_dtype(dtype)}"
    args = {"qkv_ptr": p, "qw_ptr": p, "kw_ptr": p, "cache_ptr": f"*{short_dtype(cache_dtype or dtype)}",
            "pos_ptr": "*i64", **{n: "i32" for n in ints}, "eps": "fp32"}
    ce = dict(HQ=shape["Hq"], HK=shape["Hk"], D=shape["D"], NEOX=is_neox, VEC=vec, TPW_H=tpw_h, TPW_D=tpw_d,
              num_warps=num_warps)
    return kernel_spec(kernel, args, ce, num_warps=num_warps)


def fused_codegen(shape: dict, dtype: str, config: FusedConfig | None = None, cache_dtype: str | None = None,
                  is_neox: bool = True):
    cfg = config or FusedConfig.heuristic(shape, dtype)
    return _gluon_codegen(qk_norm_rope_kernel, shape, dtype, cfg.num_warps, cache_dtype, is_neox,
                          ("n_units", "n_pos"))


@dataclasses.dataclass(frozen=True)
class PersistentConfig:
    num_warps: int = 4
    ctas_per_sm: int = 4

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "PersistentConfig":
        # 4 warps (16 heads at D = 128) and 4 CTAs per SM: two tiles live per thread (~80 registers),
        # 16 warps per SM keep ~2 x 16 KB of qkv loads in flight per SM, above the ~36 KB/SM that
        # 4.8 TB/s x ~1 us of latency needs only together with the prefetch. Not swept yet: the 05 plan's
        # 'persistent-sweep' part measures num_warps x ctas_per_sm.
        return cls()

    def grid(self, n_tiles: int, sms: int) -> int:
        return max(1, min(n_tiles, self.ctas_per_sm * sms))


def persistent_configure(shape: dict, dtype: str, overrides: dict) -> PersistentConfig:
    cfg = PersistentConfig.heuristic(shape, dtype)
    known = {f.name for f in dataclasses.fields(PersistentConfig)}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in known})
    if cfg.num_warps not in (1, 2, 4, 8) or not 1 <= cfg.ctas_per_sm <= 32:
        raise ValueError(f"num_warps must be 1, 2, 4 or 8 and ctas_per_sm in [1, 32]; got {cfg}")
    return cfg


def persistent(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps,
               is_neox, config: PersistentConfig | None = None):
    from .hopper import num_sms
    fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions)
    T = qkv.shape[0]
    dt = dtype_name(qkv)
    cfg = config or PersistentConfig.heuristic({"T": T, "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim}, dt)
    vec, tpw_h, tpw_d = FusedConfig.lanes(head_dim, dt, is_neox)
    units = T * (num_heads_q + num_heads_k)
    if units:
        n_tiles = cdiv(units, tpw_h * cfg.num_warps)
        qk_norm_rope_persistent_kernel[(cfg.grid(n_tiles, num_sms(qkv.device)), )](
            qkv, q_weight, k_weight, cos_sin_cache, positions, units, n_tiles, cos_sin_cache.shape[0], eps,
            HQ=num_heads_q, HK=num_heads_k, D=head_dim, NEOX=is_neox, VEC=vec, TPW_H=tpw_h, TPW_D=tpw_d,
            num_warps=cfg.num_warps)
    return qkv


def persistent_codegen(shape: dict, dtype: str, config: PersistentConfig | None = None, cache_dtype: str | None = None,
                       is_neox: bool = True):
    cfg = config or PersistentConfig.heuristic(shape, dtype)
    return _gluon_codegen(qk_norm_rope_persistent_kernel, shape, dtype, cfg.num_warps, cache_dtype, is_neox,
                          ("n_units", "n_tiles", "n_pos"))


# ----------------------------------------------------------------------------------------------
# the plain Triton baseline: one program per (token, head), any rotary_dim, NeoX or GPT-J

@triton.jit
def qk_norm_rope_triton_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, n_pos, eps, HQ: tl.constexpr,
                               HK: tl.constexpr, D: tl.constexpr, R: tl.constexpr, NEOX: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    ROW: tl.constexpr = (HQ + 2 * HK) * D
    HALF: tl.constexpr = R // 2
    base = qkv_ptr + t * ROW + h * D
    i = tl.arange(0, D)
    rot = i < R
    if NEOX:
        first = i < HALF
        p = tl.where(first, i + HALF, i - HALF)
        jj = tl.where(first, i, i - HALF)
    else:
        first = (i % 2) == 0
        p = i ^ 1
        jj = i // 2
    p = tl.where(rot, p, i)
    jj = tl.where(rot, jj, 0)
    is_q = h < HQ
    x = tl.load(base + i).to(tl.float32)
    xp = tl.load(base + p).to(tl.float32)  # the rotation partner: a second load of the same head
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.where(is_q, tl.load(qw_ptr + i), tl.load(kw_ptr + i)).to(tl.float32)
    wp = tl.where(is_q, tl.load(qw_ptr + p), tl.load(kw_ptr + p)).to(tl.float32)
    pos = tl.load(pos_ptr + t)
    ok = (pos >= 0) & (pos < n_pos)
    c = tl.load(cache_ptr + pos * R + jj, mask=rot & ok, other=0.0).to(tl.float32)
    s = tl.load(cache_ptr + pos * R + HALF + jj, mask=rot & ok, other=0.0).to(tl.float32)
    c = tl.where(rot, c, 1.0)
    c = tl.where(ok, c, float("nan"))
    y = x * rstd * w
    yp = xp * rstd * wp
    out = tl.where(first, y * c - yp * s, y * c + yp * s)
    tl.store(base + i, out.to(qkv_ptr.dtype.element_ty))


def triton_variant(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps,
                   is_neox):
    T = qkv.shape[0]
    if T:
        qk_norm_rope_triton_kernel[(T, num_heads_q + num_heads_k)](
            qkv, q_weight, k_weight, cos_sin_cache, positions, cos_sin_cache.shape[0], eps, HQ=num_heads_q,
            HK=num_heads_k, D=head_dim, R=cos_sin_cache.shape[1], NEOX=is_neox, num_warps=4 if head_dim >= 128 else 2)
    return qkv


def triton_codegen(shape: dict, dtype: str, config=None, cache_dtype: str | None = None, is_neox: bool = True):
    p = f"*{short_dtype(dtype)}"
    args = {"qkv_ptr": p, "qw_ptr": p, "kw_ptr": p, "cache_ptr": f"*{short_dtype(cache_dtype or dtype)}",
            "pos_ptr": "*i64", "n_pos": "i32", "eps": "fp32"}
    nw = 4 if shape["D"] >= 128 else 2
    ce = dict(HQ=shape["Hq"], HK=shape["Hk"], D=shape["D"], R=shape.get("R", shape["D"]), NEOX=is_neox)
    return kernel_spec(qk_norm_rope_triton_kernel, args, ce, num_warps=nw)


# ----------------------------------------------------------------------------------------------
# registration

def _register():
    from ..registry import register

    def gluon_fn(*inputs, eps, is_neox, out=None, config=None):
        return fused(*inputs, eps=eps, is_neox=is_neox, config=config)

    def gluon_check(*inputs):
        fused_check(*inputs)

    register("qk_norm_rope", "gluon-fused", pattern="fused-rope", needs_hopper=True, check=gluon_check,
             configure=configure, codegen=fused_codegen, knobs={"num_warps": (1, 2, 4, 8)},
             roots=(qk_norm_rope_kernel, FusedConfig, fused, fused_check),
             description="register-resident: both rotary halves of HEADS heads per CTA from two 128-bit loads, "
                         "warp-local reduction, rotation in registers, two stores")(gluon_fn)

    def persistent_fn(*inputs, eps, is_neox, out=None, config=None):
        return persistent(*inputs, eps=eps, is_neox=is_neox, config=config)

    register("qk_norm_rope", "gluon-persistent", pattern="fused-rope", needs_hopper=True, check=gluon_check,
             configure=persistent_configure, codegen=persistent_codegen,
             knobs={"num_warps": (2, 4, 8), "ctas_per_sm": (2, 4, 8)},
             roots=(qk_norm_rope_persistent_kernel, PersistentConfig, persistent, fused_check, FusedConfig.lanes),
             description="persistent: CTAs stride over tiles of heads, the next tile's qkv and positions loaded into "
                         "registers before the current one is reduced, rotated and stored")(persistent_fn)

    def triton_fn(*inputs, eps, is_neox, out=None):
        return triton_variant(*inputs, eps=eps, is_neox=is_neox)

    register("qk_norm_rope", "triton", pattern="baseline", codegen=triton_codegen,
             roots=(qk_norm_rope_triton_kernel, triton_variant),
             description="plain Triton, one (token, head) per program, partner re-loaded")(triton_fn)


_register()
