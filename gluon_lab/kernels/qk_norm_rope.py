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
import types

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .hopper import H200_SMS, ITEMSIZE, cdiv, dtype_name, kernel_spec, short_dtype


# ----------------------------------------------------------------------------------------------
# the Gluon kernel: register-resident halves

@gluon.jit
def _guard_positions(err_ptr, pos, t, valid, n_pos):
    """The device side of the positions rule: a token whose position does not index a cache row writes
    ((t + 1) << 32) + (position clamped to int32) + 2^31 into the error word (pinned host memory: the host
    reads it without a sync, gluon_lab.kernels.qk_norm_rope.raise_device_error); its rows become NaN."""
    bad = valid & ((pos < 0) | (pos >= n_pos))
    pc = gl.minimum(gl.maximum(pos, -2147483647), 2147483647)
    gl.store(err_ptr + t * 0, (t + 1) * 4294967296 + (pc + 2147483648), mask=bad)


@gluon.jit
def _tile_load(qkv_ptr, pos_ptr, err_ptr, n_pos, tile, n_units, HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr,
               R: gl.constexpr, NEOX: gl.constexpr, L: gl.constexpr, HEADS: gl.constexpr, TAILP: gl.constexpr):
    """Issue the loads of one tile of HEADS (token, head) units: (a, b, tail, base, m, is_q, pos). NeoX: a and
    b are the two rotary halves [HEADS, R/2] in layout L, tail the unrotated [R, D) padded to TAILP columns;
    GPT-J: a (= b) the rotary pairs as 32-bit words (each holding elements 2i, 2i+1), tail the words past
    R/2. base [HEADS, 1]: each head's first element (NeoX) / word (GPT-J). Without a tail (rotary_dim == head_dim, TAILP == 0) tail is a (never used)."""
    W: gl.constexpr = R // 2
    ROW: gl.constexpr = (HQ + 2 * HK) * D
    u = tile * HEADS + gl.arange(0, HEADS, layout=gl.SliceLayout(1, L))
    valid = u < n_units
    t = (u // (HQ + HK)).to(gl.int64)
    h = u % (HQ + HK)
    j = gl.arange(0, W, layout=gl.SliceLayout(0, L))
    m = gl.expand_dims(valid, 1)
    if NEOX:
        base = gl.expand_dims(t * ROW + h * D, 1)
        off = base + gl.expand_dims(j, 0)
        a = gl.load(qkv_ptr + off, mask=m, other=0.0)
        b = gl.load(qkv_ptr + off + W, mask=m, other=0.0)
        tail = a
        if TAILP > 0:
            jt = gl.arange(0, TAILP, layout=gl.SliceLayout(0, L))
            tail = gl.load(qkv_ptr + base + R + gl.expand_dims(jt, 0), mask=m & gl.expand_dims(jt < D - R, 0),
                           other=0.0)
    else:
        wp = qkv_ptr.to(gl.pointer_type(gl.int32))
        base = gl.expand_dims((t * ROW + h * D) // 2, 1)
        off = base + gl.expand_dims(j, 0)
        a = gl.load(wp + off, mask=m, other=0)
        b = a
        tail = a
        if TAILP > 0:
            jt = gl.arange(0, TAILP, layout=gl.SliceLayout(0, L))
            tail = gl.load(wp + base + W + gl.expand_dims(jt, 0), mask=m & gl.expand_dims(jt < (D - R) // 2, 0),
                           other=0)
    pos = gl.load(pos_ptr + t, mask=valid, other=0)
    _guard_positions(err_ptr, pos, t, valid, n_pos)
    return a, b, tail, base, m, gl.expand_dims(h < HQ, 1), pos


@gluon.jit
def _halves(a, b, dt: gl.constexpr, NEOX: gl.constexpr):
    """fp32 (x1, x2): the rotary halves (NeoX) or the even / odd elements (GPT-J words split)."""
    if NEOX:
        return a.to(gl.float32), b.to(gl.float32)
    else:
        return ((a & 0xFFFF).to(gl.int16).to(dt, bitcast=True).to(gl.float32),
                (a >> 16).to(gl.int16).to(dt, bitcast=True).to(gl.float32))


@gluon.jit
def _pack(o1, o2, dt: gl.constexpr):
    """GPT-J: two fp32 tensors (even, odd elements) -> 32-bit words of two dt values."""
    lo = o1.to(dt).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    hi = o2.to(dt).to(gl.int16, bitcast=True).to(gl.int32) << 16
    return lo | hi


@gluon.jit
def _weight_halves(qw_ptr, kw_ptr, dt: gl.constexpr, W: gl.constexpr, NEOX: gl.constexpr, LW: gl.constexpr):
    """(q1, q2, k1, k2): the q / k norm weights of the W rotary pairs as fp32 [W] in layout LW — the two
    rotary halves (NeoX) or the even / odd elements of the pairs (GPT-J, loaded as 32-bit words)."""
    j = gl.arange(0, W, layout=LW)
    if NEOX:
        qa = gl.load(qw_ptr + j)
        qb = gl.load(qw_ptr + W + j)
        ka = gl.load(kw_ptr + j)
        kb = gl.load(kw_ptr + W + j)
    else:
        qa = gl.load(qw_ptr.to(gl.pointer_type(gl.int32)) + j)
        qb = qa
        ka = gl.load(kw_ptr.to(gl.pointer_type(gl.int32)) + j)
        kb = ka
    q1, q2 = _halves(qa, qb, dt, NEOX)
    k1, k2 = _halves(ka, kb, dt, NEOX)
    return q1, q2, k1, k2


@gluon.jit
def _weights(qw_ptr, kw_ptr, dt: gl.constexpr, D: gl.constexpr, R: gl.constexpr, NEOX: gl.constexpr,
             L: gl.constexpr, TAILP: gl.constexpr):
    """(qw1, qw2, kw1, kw2, qwt, kwt): fp32 in layout L matching _tile_load's pieces — [1, R/2] for the
    rotary halves (NeoX) / the even and odd elements of the pairs (GPT-J); the tail's [1, TAILP] (NeoX:
    qwt / kwt its elements; GPT-J: words, split by _halves at use). Without a tail qwt = qw1."""
    W: gl.constexpr = R // 2
    q1, q2, k1, k2 = _weight_halves(qw_ptr, kw_ptr, dt, W, NEOX, gl.SliceLayout(0, L))
    qt = gl.expand_dims(q1, 0)
    kt = gl.expand_dims(k1, 0)
    if TAILP > 0:
        jt = gl.arange(0, TAILP, layout=gl.SliceLayout(0, L))
        if NEOX:
            qt = gl.expand_dims(gl.load(qw_ptr + R + jt, mask=jt < D - R, other=0.0), 0)
            kt = gl.expand_dims(gl.load(kw_ptr + R + jt, mask=jt < D - R, other=0.0), 0)
        else:
            qt = gl.expand_dims(gl.load(qw_ptr.to(gl.pointer_type(gl.int32)) + W + jt, mask=jt < (D - R) // 2,
                                        other=0), 0)
            kt = gl.expand_dims(gl.load(kw_ptr.to(gl.pointer_type(gl.int32)) + W + jt, mask=jt < (D - R) // 2,
                                        other=0), 0)
    return (gl.expand_dims(q1, 0), gl.expand_dims(q2, 0), gl.expand_dims(k1, 0), gl.expand_dims(k2, 0), qt, kt)


@gluon.jit
def _tile_finish(qkv_ptr, cache_ptr, a, b, tail, base, m, is_q, pos, qw1, qw2, kw1, kw2, qwt, kwt, n_pos, eps,
                 D: gl.constexpr, R: gl.constexpr, NEOX: gl.constexpr, L: gl.constexpr, TAILP: gl.constexpr):
    """Norm (warp-local reduction over every piece of the head), weights, rotation, and the store(s) of a
    tile: each piece stored once, where it was loaded from."""
    W: gl.constexpr = R // 2
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    x1, x2 = _halves(a, b, dt, NEOX)
    ss = gl.sum(x1 * x1 + x2 * x2, axis=1)
    if TAILP > 0:
        t1, t2 = _halves(tail, tail, dt, NEOX)
        if NEOX:
            ss += gl.sum(t1 * t1, axis=1)
        else:
            ss += gl.sum(t1 * t1 + t2 * t2, axis=1)
    rstd = gl.expand_dims(gl.rsqrt(ss / D + eps), 1)
    j = gl.arange(0, W, layout=gl.SliceLayout(0, L))
    off = base + gl.expand_dims(j, 0)
    okr = gl.expand_dims((pos >= 0) & (pos < n_pos), 1)
    ok = m & okr
    coff = gl.expand_dims(pos * R, 1) + gl.expand_dims(j, 0)  # cache row: cos at [0, R/2), sin at [R/2, R)
    c = gl.load(cache_ptr + coff, mask=ok, other=float("nan")).to(gl.float32)
    s = gl.load(cache_ptr + coff + W, mask=ok, other=float("nan")).to(gl.float32)
    y1 = x1 * rstd * gl.where(is_q, qw1, kw1)
    y2 = x2 * rstd * gl.where(is_q, qw2, kw2)
    o1 = y1 * c - y2 * s
    o2 = y2 * c + y1 * s
    wp = qkv_ptr.to(gl.pointer_type(gl.int32))
    if NEOX:
        gl.store(qkv_ptr + off, o1.to(dt), mask=m)
        gl.store(qkv_ptr + off + W, o2.to(dt), mask=m)
    else:
        gl.store(wp + off, _pack(o1, o2, dt), mask=m)
    if TAILP > 0:  # the unrotated tail: normalized, NaN where the token's position is out of range
        jt = gl.expand_dims(gl.arange(0, TAILP, layout=gl.SliceLayout(0, L)), 0)
        bad = gl.where(okr, 1.0, float("nan"))
        if NEOX:
            yt = t1 * rstd * gl.where(is_q, qwt, kwt) * bad
            gl.store(qkv_ptr + base + R + jt, yt.to(dt), mask=m & (jt < D - R))
        else:
            w1, w2 = _halves(qwt, qwt, dt, NEOX)
            v1, v2 = _halves(kwt, kwt, dt, NEOX)
            yt1 = t1 * rstd * gl.where(is_q, w1, v1) * bad
            yt2 = t2 * rstd * gl.where(is_q, w2, v2) * bad
            gl.store(wp + base + W + jt, _pack(yt1, yt2, dt), mask=m & (jt < (D - R) // 2))


@gluon.jit
def qk_norm_rope_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, err_ptr, n_units, n_pos, eps, HQ: gl.constexpr,
                        HK: gl.constexpr, D: gl.constexpr, R: gl.constexpr, NEOX: gl.constexpr, VEC: gl.constexpr,
                        TPW_H: gl.constexpr, TPW_D: gl.constexpr, TAILP: gl.constexpr, num_warps: gl.constexpr):
    """One tile per CTA: load, reduce, rotate, store."""
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [TPW_H, TPW_D], [num_warps, 1], [1, 0])
    HEADS: gl.constexpr = TPW_H * num_warps
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    a, b, tail, base, m, is_q, pos = _tile_load(qkv_ptr, pos_ptr, err_ptr, n_pos, gl.program_id(0), n_units, HQ, HK, D,
                                               R, NEOX, L, HEADS, TAILP)
    qw1, qw2, kw1, kw2, qwt, kwt = _weights(qw_ptr, kw_ptr, dt, D, R, NEOX, L, TAILP)
    _tile_finish(qkv_ptr, cache_ptr, a, b, tail, base, m, is_q, pos, qw1, qw2, kw1, kw2, qwt, kwt, n_pos, eps, D, R,
                 NEOX, L, TAILP)


@gluon.jit
def qk_norm_rope_persistent_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, err_ptr, n_units, n_tiles, n_pos, eps,
                                   HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr, R: gl.constexpr,
                                   NEOX: gl.constexpr, VEC: gl.constexpr, TPW_H: gl.constexpr, TPW_D: gl.constexpr,
                                   TAILP: gl.constexpr, num_warps: gl.constexpr):
    """Persistent: CTA p takes tiles p, p + grid, ...; the weights are loaded once, and the next tile's
    qkv and positions are loaded (into registers) before the current tile is reduced, rotated and
    stored, so a tile's load latency hides behind the previous tile's work."""
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [TPW_H, TPW_D], [num_warps, 1], [1, 0])
    HEADS: gl.constexpr = TPW_H * num_warps
    dt: gl.constexpr = qkv_ptr.dtype.element_ty
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    qw1, qw2, kw1, kw2, qwt, kwt = _weights(qw_ptr, kw_ptr, dt, D, R, NEOX, L, TAILP)
    a, b, tail, base, m, is_q, pos = _tile_load(qkv_ptr, pos_ptr, err_ptr, n_pos, pid, n_units, HQ, HK, D, R, NEOX, L,
                                                HEADS, TAILP)
    for tile in range(pid, n_tiles, nprog):
        na, nb, ntail, nbase, nm, nis_q, npos = _tile_load(qkv_ptr, pos_ptr, err_ptr, n_pos, tile + nprog, n_units, HQ,
                                                          HK, D, R, NEOX, L, HEADS, TAILP)
        _tile_finish(qkv_ptr, cache_ptr, a, b, tail, base, m, is_q, pos, qw1, qw2, kw1, kw2, qwt, kwt, n_pos, eps, D,
                     R, NEOX, L, TAILP)
        a, b, tail, base, m, is_q, pos = na, nb, ntail, nbase, nm, nis_q, npos


@dataclasses.dataclass(frozen=True)
class FusedConfig:
    num_warps: int

    @staticmethod
    def lanes(R: int, dtype: str, neox: bool = True) -> tuple[int, int, int]:
        """(VEC, TPW_H, TPW_D): 16-byte vectors over the R/2 columns of the register tile — elements of
        a rotary half (NeoX) or 32-bit words holding a pair (GPT-J) — spread over TPW_D lanes."""
        vec = 16 // ITEMSIZE[dtype] if neox else 4
        tpw_d = max(1, min(32, (R // 2) // vec))
        return vec, 32 // tpw_d, tpw_d

    @staticmethod
    def tail(D: int, R: int, neox: bool = True) -> int:
        """TAILP: the unrotated tail [R, D) as a power-of-2 column count (elements for NeoX, words for
        GPT-J), 0 without one; its padding is masked off."""
        n = (D - R) if neox else (D - R) // 2
        return triton.next_power_of_2(n) if n else 0

    def heads_per_cta(self, R: int, dtype: str, neox: bool = True) -> int:
        return self.lanes(R, dtype, neox)[1] * self.num_warps

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "FusedConfig":
        # 4 warps per CTA (16 heads at D = 128) while the grid still fills two waves of the SMs: fewer,
        # larger CTAs amortize the weight loads. Below that (decode: 1-16 tokens, 24-80 heads each),
        # one warp per CTA spreads the few heads over as many SMs as possible — the latency of one
        # head's load-reduce-store chain is the whole kernel there.
        units = shape["T"] * (shape["Hq"] + shape["Hk"])
        big = cls(4)
        if cdiv(units, big.heads_per_cta(shape.get("R", shape["D"]), dtype)) >= 2 * H200_SMS:
            return big
        return cls(1)


def rotary_rule(variant: str, head_dim: int, rotary_dim: int, dtype: str) -> None:
    """The Gluon kernels hold a rotary half (NeoX: R/2 elements; GPT-J: the R/2 pairs as words) as one
    power-of-2 register tile of 16-byte vectors: R/2 must be a power of 2 and at least 16 bytes of
    elements (the same rule for both styles, so eligibility does not depend on is_neox)."""
    w = rotary_dim // 2
    vec = 16 // ITEMSIZE[dtype]
    if w & (w - 1) or w < vec:
        raise ValueError(f"variant {variant!r} needs rotary_dim / 2 a power of 2 and >= {vec} ({dtype}: one 16-byte "
                         f"vector); got rotary_dim {rotary_dim} (head_dim {head_dim}). Use variant='triton' or "
                         "'torch' for it")


def fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *,
                variant="gluon-fused"):
    rotary_rule(variant, head_dim, cos_sin_cache.shape[1], dtype_name(qkv))
    for name, t in (("qkv", qkv), ("q_weight", q_weight), ("k_weight", k_weight), ("cos_sin_cache", cos_sin_cache)):
        if t.data_ptr() % 16:
            raise ValueError(f"variant {variant!r} needs {name}'s data pointer 16-byte aligned (128-bit accesses); "
                             f"got address % 16 = {t.data_ptr() % 16}")


def configure(shape: dict, dtype: str, overrides: dict) -> FusedConfig:
    cfg = FusedConfig.heuristic(shape, dtype)
    nw = overrides.get("num_warps")
    if nw is not None:
        if nw not in (1, 2, 4, 8):
            raise ValueError(f"num_warps must be 1, 2, 4 or 8; got {nw}")
        cfg = FusedConfig(nw)
    return cfg


def _lane_constexprs(D: int, R: int, dtype: str, is_neox: bool) -> dict:
    vec, tpw_h, tpw_d = FusedConfig.lanes(R, dtype, is_neox)
    return dict(D=D, R=R, NEOX=is_neox, VEC=vec, TPW_H=tpw_h, TPW_D=tpw_d, TAILP=FusedConfig.tail(D, R, is_neox))


def fused(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps, is_neox,
          config: FusedConfig | None = None):
    fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions)
    T = qkv.shape[0]
    R = cos_sin_cache.shape[1]
    dt = dtype_name(qkv)
    shape = {"T": T, "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim, "R": R}
    cfg = config or FusedConfig.heuristic(shape, dt)
    units = T * (num_heads_q + num_heads_k)
    if units:
        qk_norm_rope_kernel[(cdiv(units, cfg.heads_per_cta(R, dt, is_neox)), )](
            qkv, q_weight, k_weight, cos_sin_cache, positions, error_word(qkv.device), units, cos_sin_cache.shape[0], eps,
            HQ=num_heads_q,
            HK=num_heads_k, **_lane_constexprs(head_dim, R, dt, is_neox), num_warps=cfg.num_warps)
    return qkv


def _gluon_codegen(kernel, shape: dict, dtype: str, num_warps: int, cache_dtype: str | None, is_neox: bool,
                   ints: tuple):
    """compile_sm90 arguments of one of the two Gluon kernels (they share every parameter but `ints`)."""
    p = f"*{short_dtype(dtype)}"
    args = {"qkv_ptr": p, "qw_ptr": p, "kw_ptr": p, "cache_ptr": f"*{short_dtype(cache_dtype or dtype)}",
            "pos_ptr": "*i64", "err_ptr": "*i64", **{n: "i32" for n in ints}, "eps": "fp32"}
    ce = dict(HQ=shape["Hq"], HK=shape["Hk"], **_lane_constexprs(shape["D"], shape.get("R", shape["D"]), dtype, is_neox),
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
    fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions,
                variant="gluon-persistent")
    T = qkv.shape[0]
    R = cos_sin_cache.shape[1]
    dt = dtype_name(qkv)
    cfg = config or PersistentConfig.heuristic({"T": T, "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim, "R": R},
                                               dt)
    units = T * (num_heads_q + num_heads_k)
    if units:
        n_tiles = cdiv(units, FusedConfig(cfg.num_warps).heads_per_cta(R, dt, is_neox))
        qk_norm_rope_persistent_kernel[(cfg.grid(n_tiles, num_sms(qkv.device)), )](
            qkv, q_weight, k_weight, cos_sin_cache, positions, error_word(qkv.device), units, n_tiles,
            cos_sin_cache.shape[0], eps,
            HQ=num_heads_q, HK=num_heads_k, **_lane_constexprs(head_dim, R, dt, is_neox), num_warps=cfg.num_warps)
    return qkv


def persistent_codegen(shape: dict, dtype: str, config: PersistentConfig | None = None, cache_dtype: str | None = None,
                       is_neox: bool = True):
    cfg = config or PersistentConfig.heuristic(shape, dtype)
    return _gluon_codegen(qk_norm_rope_persistent_kernel, shape, dtype, cfg.num_warps, cache_dtype, is_neox,
                          ("n_units", "n_tiles", "n_pos"))


# ----------------------------------------------------------------------------------------------
# the TMA / shared-memory kernel: many heads per CTA, a ring of TMA boxes, persistent

@gluon.jit
def _tma_issue(desc, bufs, bars, slot, tile, pred, NHB: gl.constexpr, NCOPY: gl.constexpr):
    """Fill ring slot `slot` with tile `tile` = (token block, head block): NCOPY boxes [BT, BH, W] (NeoX:
    the two rotary halves at columns 0 and W; GPT-J: the head's words), one barrier, one expect."""
    BT: gl.constexpr = desc.block_type.shape[0]
    BH: gl.constexpr = desc.block_type.shape[1]
    W: gl.constexpr = desc.block_type.shape[2]
    bar = bars.index(slot)
    mbarrier.expect(bar, NCOPY * desc.block_type.nbytes, pred=pred)
    for c in gl.static_range(NCOPY):
        tma.async_copy_global_to_shared(desc, [(tile // NHB) * BT, (tile % NHB) * BH, c * W], bar,
                                        bufs.index(slot * NCOPY + c), pred=pred)


@gluon.jit
def _tma_positions(pos_ptr, err_ptr, n_pos, tile, T, NHB: gl.constexpr, BT: gl.constexpr, LP: gl.constexpr):
    t = ((tile // NHB) * BT + gl.arange(0, BT, layout=LP)).to(gl.int64)
    pos = gl.load(pos_ptr + t, mask=t < T, other=0)
    _guard_positions(err_ptr, pos, t, t < T, n_pos)
    return pos


@gluon.jit
def _tma_cos_sin(cache_ptr, pos, n_pos, R: gl.constexpr, W: gl.constexpr, LTW: gl.constexpr):
    """The tile's cache rows [BT, W] (cos, sin) in the cache's dtype; NaN where a position is out of range."""
    j = gl.arange(0, W, layout=gl.SliceLayout(0, LTW))
    ok = gl.expand_dims((pos >= 0) & (pos < n_pos), 1)
    coff = gl.expand_dims(pos * R, 1) + gl.expand_dims(j, 0)
    c = gl.load(cache_ptr + coff, mask=ok, other=float("nan"))
    s = gl.load(cache_ptr + coff + W, mask=ok, other=float("nan"))
    return c, s


@gluon.jit
def qk_norm_rope_tma_kernel(qkv_desc, qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, err_ptr, T, n_tiles, n_pos, eps,
                            HQ: gl.constexpr, HK: gl.constexpr, D: gl.constexpr, NEOX: gl.constexpr,
                            STAGES: gl.constexpr, TMA_STORE: gl.constexpr, VEC: gl.constexpr, TPW_H: gl.constexpr,
                            TPW_D: gl.constexpr, num_warps: gl.constexpr):
    """Persistent over tiles of BT tokens x BH heads of the Q/K head range (the descriptor's shape stops at
    HQ + HK heads, so V is never read or written and ragged token / head tails are TMA's bounds). CTA p
    takes tiles p, p + grid, ...: the TMA boxes of the next STAGES - 1 tiles are in flight while a tile is
    read from shared memory into registers (both rotary halves in the same layout, as in gluon-fused),
    reduced, rotated and stored — through two staging buffers and TMA stores (TMA_STORE) or as 128-bit
    register stores. Positions run two tiles ahead and the cos/sin rows one tile ahead (in registers), so
    the position -> cache-row chain of loads never stalls a tile."""
    BT: gl.constexpr = qkv_desc.block_type.shape[0]
    BH: gl.constexpr = qkv_desc.block_type.shape[1]
    W: gl.constexpr = qkv_desc.block_type.shape[2]
    NCOPY: gl.constexpr = 2 if NEOX else 1
    NHB: gl.constexpr = (HQ + HK + BH - 1) // BH
    R: gl.constexpr = D  # full rotary
    ROW: gl.constexpr = (HQ + 2 * HK) * D
    dt: gl.constexpr = qw_ptr.dtype.element_ty
    sdt: gl.constexpr = qkv_desc.dtype  # dt (NeoX) or int32 words (GPT-J)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, VEC], [1, TPW_H, TPW_D], [num_warps, 1, 1], [2, 1, 0])
    LTW: gl.constexpr = gl.SliceLayout(1, L3)  # [BT, W]
    LP: gl.constexpr = gl.SliceLayout(1, LTW)  # [BT], for the cache rows
    LH: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, L3))  # [BH]
    LW: gl.constexpr = gl.SliceLayout(0, LTW)  # [W]

    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_my = (n_tiles - pid + nprog - 1) // nprog

    bufs = gl.allocate_shared_memory(sdt, [STAGES * NCOPY, BT, BH, W], qkv_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(bars.index(st), count=1)
    for p in gl.static_range(STAGES - 1):
        _tma_issue(qkv_desc, bufs, bars, p, pid + p * nprog, p < n_my, NHB, NCOPY)
    if TMA_STORE:
        obufs = gl.allocate_shared_memory(sdt, [2 * NCOPY, BT, BH, W], qkv_desc.layout)

    # weights [1, 1, W] (NeoX: each half; GPT-J: even / odd elements of the pairs)
    q1, q2, k1, k2 = _weight_halves(qw_ptr, kw_ptr, dt, W, NEOX, LW)
    j = gl.arange(0, W, layout=LW)
    qw1 = gl.expand_dims(gl.expand_dims(q1, 0), 1)
    qw2 = gl.expand_dims(gl.expand_dims(q2, 0), 1)
    kw1 = gl.expand_dims(gl.expand_dims(k1, 0), 1)
    kw2 = gl.expand_dims(gl.expand_dims(k2, 0), 1)

    c, s = _tma_cos_sin(cache_ptr, _tma_positions(pos_ptr, err_ptr, n_pos, pid, T, NHB, BT, LP), n_pos, R, W, LTW)
    pos1 = _tma_positions(pos_ptr, err_ptr, n_pos, pid + nprog, T, NHB, BT, LP)
    for i in range(n_my):
        jn = i + STAGES - 1
        fence_async_shared()  # this CTA's earlier smem reads of the slot before the TMA write into it
        _tma_issue(qkv_desc, bufs, bars, jn % STAGES, pid + jn * nprog, jn < n_my, NHB, NCOPY)
        tile = pid + i * nprog
        pos2 = _tma_positions(pos_ptr, err_ptr, n_pos, tile + 2 * nprog, T, NHB, BT, LP)
        nc, ns = _tma_cos_sin(cache_ptr, pos1, n_pos, R, W, LTW)

        slot = i % STAGES
        mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
        a = bufs.index(slot * NCOPY).load(L3)
        if NEOX:
            b = bufs.index(slot * NCOPY + 1).load(L3)
        else:
            b = a
        x1, x2 = _halves(a, b, dt, NEOX)
        rstd = gl.expand_dims(gl.rsqrt(gl.sum(x1 * x1 + x2 * x2, axis=2) / D + eps), 2)
        h = (tile % NHB) * BH + gl.arange(0, BH, layout=LH)
        is_q = gl.expand_dims(gl.expand_dims(h < HQ, 0), 2)
        cc = gl.expand_dims(c.to(gl.float32), 1)
        sc = gl.expand_dims(s.to(gl.float32), 1)
        y1 = x1 * rstd * gl.where(is_q, qw1, kw1)
        y2 = x2 * rstd * gl.where(is_q, qw2, kw2)
        o1 = y1 * cc - y2 * sc
        o2 = y2 * cc + y1 * sc
        t0 = (tile // NHB) * BT
        if TMA_STORE:
            ob = i % 2
            tma.store_wait(NCOPY)  # the stores from this staging buffer (two tiles ago) have read it
            if NEOX:
                obufs.index(ob * NCOPY).store(o1.to(dt))
                obufs.index(ob * NCOPY + 1).store(o2.to(dt))
            else:
                obufs.index(ob).store(_pack(o1, o2, dt))
            fence_async_shared()
            for cp in gl.static_range(NCOPY):
                tma.async_copy_shared_to_global(qkv_desc, [t0, (tile % NHB) * BH, cp * W], obufs.index(ob * NCOPY + cp))
        else:
            tt = t0 + gl.arange(0, BT, layout=gl.SliceLayout(1, gl.SliceLayout(2, L3)))
            rows = gl.expand_dims(gl.expand_dims(tt.to(gl.int64) * ROW, 1), 2) + \
                gl.expand_dims(gl.expand_dims(h * D, 0), 2)
            m = gl.expand_dims(gl.expand_dims(tt < T, 1), 2) & gl.expand_dims(gl.expand_dims(h < HQ + HK, 0), 2)
            jj = gl.expand_dims(gl.expand_dims(j, 0), 1)
            if NEOX:
                gl.store(qkv_ptr + rows + jj, o1.to(dt), mask=m)
                gl.store(qkv_ptr + rows + W + jj, o2.to(dt), mask=m)
            else:
                gl.store(qkv_ptr.to(gl.pointer_type(gl.int32)) + rows // 2 + jj, _pack(o1, o2, dt), mask=m)
        c, s, pos1 = nc, ns, pos2

    if TMA_STORE:
        tma.store_wait(0)
    for st in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(st))


@dataclasses.dataclass(frozen=True)
class TmaConfig:
    """block_t tokens x block_h heads per tile (0: the heuristic's), num_warps, ring stages, CTAs per SM,
    TMA stores (else 128-bit register stores)."""
    block_t: int = 0
    block_h: int = 0
    num_warps: int = 4
    stages: int = 3
    ctas_per_sm: int = 2
    tma_store: bool = True

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "TmaConfig":
        # Tiles of ~16 KB (8 heads x 8 tokens at D = 128, 16 tokens at 64, 4 at 256): big enough that one
        # TMA issue and one barrier wait per tile are noise, small enough for 3 ring stages + 2 staging
        # buffers (80 KB) at 2 CTAs per SM. Two CTAs x 2 tiles in flight = 64 KB of loads per SM, above
        # the ~25 KB/SM that 4.8 TB/s x ~0.7 us needs. 4 warps: 32 elements of each half per thread.
        # Measured choices are the 05 plan's 'tma-sweep' part.
        H = shape["Hq"] + shape["Hk"]
        bh = min(8, triton.next_power_of_2(H))
        bt = max(4, 16384 // (bh * shape["D"] * ITEMSIZE[dtype]))
        return cls(block_t=bt, block_h=bh)

    def resolved(self, shape: dict, dtype: str) -> "TmaConfig":
        h = self.heuristic(shape, dtype)
        return dataclasses.replace(self, block_t=self.block_t or h.block_t, block_h=self.block_h or h.block_h)

    def smem_bytes(self, D: int, dtype: str) -> int:
        tile = self.block_t * self.block_h * D * ITEMSIZE[dtype]
        return tile * (self.stages + (2 if self.tma_store else 0))

    def grid(self, n_tiles: int, sms: int) -> int:
        return max(1, min(n_tiles, self.ctas_per_sm * sms))


def tma_configure(shape: dict, dtype: str, overrides: dict) -> TmaConfig:
    from .hopper import SM_SMEM, SMEM_LIMIT, SMEM_RESERVE
    known = {f.name for f in dataclasses.fields(TmaConfig)}
    cfg = dataclasses.replace(TmaConfig.heuristic(shape, dtype),
                              **{k: v for k, v in overrides.items() if k in known}).resolved(shape, dtype)
    for k in ("block_t", "block_h"):
        v = getattr(cfg, k)
        if v & (v - 1) or not 1 <= v <= 256:
            raise ValueError(f"{k} must be a power of 2 in [1, 256] (a TMA box dim); got {v}")
    if cfg.num_warps not in (1, 2, 4, 8) or not 2 <= cfg.stages <= 8 or not 1 <= cfg.ctas_per_sm <= 8:
        raise ValueError(f"num_warps must be 1, 2, 4 or 8, stages in [2, 8], ctas_per_sm in [1, 8]; got {cfg}")
    smem = cfg.smem_bytes(shape["D"], dtype) + SMEM_RESERVE
    if smem > SMEM_LIMIT or cfg.ctas_per_sm * smem > SM_SMEM:
        raise ValueError(f"{cfg} needs {smem} bytes of shared memory per CTA x {cfg.ctas_per_sm} CTAs per SM; an SM "
                         f"has {SM_SMEM} (a CTA at most {SMEM_LIMIT}): fewer stages, tokens or CTAs per SM")
    return cfg


def tma_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions):
    if cos_sin_cache.shape[1] != head_dim:
        raise ValueError(f"variant 'gluon-tma' rotates the whole head (rotary_dim == head_dim = {head_dim}); got "
                         f"rotary_dim {cos_sin_cache.shape[1]}. Use 'gluon-fused' (rotary_dim / 2 a power of 2), "
                         "'triton' or 'torch' for partial rotary")
    fused_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions,
                variant="gluon-tma")


def _tma_layout(dtype: str, neox: bool):
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=ITEMSIZE[dtype] * 8 if neox else 32, rank=3)


def _tma_block(cfg: TmaConfig, D: int, neox: bool) -> list:
    return [cfg.block_t, cfg.block_h, D // 2]  # NeoX: a rotary half of elements; GPT-J: the head's D/2 words


def tma_variant(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps,
                is_neox, config: TmaConfig | None = None):
    import torch
    from .hopper import descriptor, num_sms
    tma_check(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions)
    T = qkv.shape[0]
    dt = dtype_name(qkv)
    shape = {"T": T, "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim, "R": head_dim}
    cfg = (config or TmaConfig.heuristic(shape, dt)).resolved(shape, dt)
    if not T:
        return qkv
    H, C = num_heads_q + num_heads_k, qkv.shape[1]
    base, e = (qkv, 1) if is_neox else (qkv.view(torch.int32), 2)  # GPT-J: the head as 32-bit words
    desc = descriptor(base, _tma_block(cfg, head_dim, is_neox), _tma_layout(dt, is_neox),
                      shape=[T, H, head_dim // e], strides=[C // e, head_dim // e, 1])
    n_tiles = cdiv(T, cfg.block_t) * cdiv(H, cfg.block_h)
    vec, tpw_h, tpw_d = FusedConfig.lanes(head_dim, dt, is_neox)
    qk_norm_rope_tma_kernel[(cfg.grid(n_tiles, num_sms(qkv.device)), )](
        desc, qkv, q_weight, k_weight, cos_sin_cache, positions, error_word(qkv.device), T, n_tiles,
        cos_sin_cache.shape[0], eps,
        HQ=num_heads_q, HK=num_heads_k, D=head_dim, NEOX=is_neox, STAGES=cfg.stages, TMA_STORE=cfg.tma_store,
        VEC=vec, TPW_H=tpw_h, TPW_D=tpw_d, num_warps=cfg.num_warps)
    return qkv


def tma_codegen(shape: dict, dtype: str, config: TmaConfig | None = None, cache_dtype: str | None = None,
                is_neox: bool = True):
    cfg = (config or TmaConfig.heuristic(shape, dtype)).resolved(shape, dtype)
    D = shape["D"]
    vec, tpw_h, tpw_d = FusedConfig.lanes(D, dtype, is_neox)
    p = f"*{short_dtype(dtype)}"
    td = f"tensordesc<{short_dtype(dtype) if is_neox else 'i32'}{_tma_block(cfg, D, is_neox)},{_tma_layout(dtype, is_neox)!r}>"
    args = {"qkv_desc": td, "qkv_ptr": p, "qw_ptr": p, "kw_ptr": p, "cache_ptr": f"*{short_dtype(cache_dtype or dtype)}",
            "pos_ptr": "*i64", "err_ptr": "*i64", "T": "i32", "n_tiles": "i32", "n_pos": "i32", "eps": "fp32"}
    ce = dict(HQ=shape["Hq"], HK=shape["Hk"], D=D, NEOX=is_neox, STAGES=cfg.stages, TMA_STORE=cfg.tma_store, VEC=vec,
              TPW_H=tpw_h, TPW_D=tpw_d, num_warps=cfg.num_warps)
    return kernel_spec(qk_norm_rope_tma_kernel, args, ce, num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# the plain Triton baseline: one program per (token, head), any rotary_dim, NeoX or GPT-J

@triton.jit
def qk_norm_rope_triton_kernel(qkv_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr, err_ptr, n_pos, eps, HQ: tl.constexpr,
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
    if not ok:  # the error word (see _guard_positions): NaN rows and an error the host reads without a sync
        pc = tl.minimum(tl.maximum(pos, -2147483647), 2147483647)
        tl.store(err_ptr, (t + 1) * 4294967296 + (pc + 2147483648))
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
            qkv, q_weight, k_weight, cos_sin_cache, positions, error_word(qkv.device), cos_sin_cache.shape[0], eps,
            HQ=num_heads_q, HK=num_heads_k, D=head_dim, R=cos_sin_cache.shape[1], NEOX=is_neox, num_warps=4 if head_dim >= 128 else 2)
    return qkv


def triton_codegen(shape: dict, dtype: str, config=None, cache_dtype: str | None = None, is_neox: bool = True):
    p = f"*{short_dtype(dtype)}"
    args = {"qkv_ptr": p, "qw_ptr": p, "kw_ptr": p, "cache_ptr": f"*{short_dtype(cache_dtype or dtype)}",
            "pos_ptr": "*i64", "err_ptr": "*i64", "n_pos": "i32", "eps": "fp32"}
    nw = 4 if shape["D"] >= 128 else 2
    ce = dict(HQ=shape["Hq"], HK=shape["Hk"], D=shape["D"], R=shape.get("R", shape["D"]), NEOX=is_neox)
    return kernel_spec(qk_norm_rope_triton_kernel, args, ce, num_warps=nw)


# ----------------------------------------------------------------------------------------------
# the positions rule on the device: an error word in pinned host memory

# per device index: (the pinned int64[1] word, its numpy view); a stdlib namespace, which the code hash does
# not read (what ran must not change a variant's hash)
_ERR = types.SimpleNamespace(by_device={})


def error_word(device):
    """The int64 word the kernels write a bad position into (_guard_positions): pinned host memory, one per
    device, kept for the process and pinned for the fast path (a replayed plan passes the same word). A
    meta tensor while gluon_lab.launches emulates a launch on the CPU."""
    import torch
    if device.type != "cuda":
        return torch.zeros(1, dtype=torch.int64, device=device)
    e = _ERR.by_device.get(device.index)
    if e is None:
        from .. import fastpath
        w = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        e = _ERR.by_device[device.index] = (w, w.numpy())
        fastpath.pin(w, resolve=lambda w=w: w)
    return e[0]


def decode_error(word: int) -> tuple[int, int]:
    """(token index, position) from an error word (the position clamped to +-(2^31 - 1))."""
    return (int(word) >> 32) - 1, (int(word) & 0xFFFFFFFF) - 2 ** 31


def raise_device_error(qkv, *rest) -> None:
    """Raise (and clear) the positions error an earlier call's kernel wrote on qkv's device: a host read of
    pinned memory, no sync. The gluon-lab variants' data_guard; gluon_lab.check_device_errors() syncs first."""
    if getattr(qkv, "device", None) is None or qkv.device.type != "cuda":
        return
    error_word(qkv.device)
    view = _ERR.by_device[qkv.device.index][1]
    word = int(view[0])
    if word:
        view[0] = 0
        t, p = decode_error(word)
        raise ValueError(
            f"positions must be in [0, cos_sin_cache.shape[0]) (each indexes a cos/sin cache row); an earlier "
            f"qk_norm_rope call on {qkv.device} read positions[{t}] = {p}{' or beyond' if abs(p) >= 2 ** 31 - 1 else ''}. "
            "The GPU checks positions without a host sync: that call returned, and its output rows of token "
            f"{t} are NaN; this error is raised by the next call (or gluon_lab.check_device_errors())")


# ----------------------------------------------------------------------------------------------
# registration

def _register():
    from ..registry import register

    def gluon_fn(*inputs, eps, is_neox, out=None, config=None):
        return fused(*inputs, eps=eps, is_neox=is_neox, config=config)

    def gluon_check(*inputs):
        fused_check(*inputs)

    register("qk_norm_rope", "gluon-fused", pattern="fused-rope", needs_hopper=True, check=gluon_check,
             data_guard=raise_device_error,
             configure=configure, codegen=fused_codegen, knobs={"num_warps": (1, 2, 4, 8)},
             roots=(qk_norm_rope_kernel, FusedConfig, fused, fused_check, rotary_rule, _lane_constexprs),
             description="register-resident: both rotary halves of HEADS heads per CTA from two 128-bit loads, "
                         "warp-local reduction, rotation in registers, two stores")(gluon_fn)

    def persistent_fn(*inputs, eps, is_neox, out=None, config=None):
        return persistent(*inputs, eps=eps, is_neox=is_neox, config=config)

    register("qk_norm_rope", "gluon-persistent", pattern="fused-rope", needs_hopper=True, check=gluon_check,
             data_guard=raise_device_error,
             configure=persistent_configure, codegen=persistent_codegen,
             knobs={"num_warps": (2, 4, 8), "ctas_per_sm": (2, 4, 8)},
             roots=(qk_norm_rope_persistent_kernel, PersistentConfig, persistent, fused_check, rotary_rule,
                    _lane_constexprs, FusedConfig.lanes, FusedConfig.tail),
             description="persistent: CTAs stride over tiles of heads, the next tile's qkv and positions loaded into "
                         "registers before the current one is reduced, rotated and stored")(persistent_fn)

    def tma_fn(*inputs, eps, is_neox, out=None, config=None):
        return tma_variant(*inputs, eps=eps, is_neox=is_neox, config=config)

    register("qk_norm_rope", "gluon-tma", pattern="fused-rope", needs_hopper=True, check=tma_check,
             data_guard=raise_device_error,
             configure=tma_configure, codegen=tma_codegen,
             knobs={"block_t": (4, 8, 16, 32), "num_warps": (4, 8), "stages": (2, 3, 4), "ctas_per_sm": (1, 2, 3, 4),
                    "tma_store": (False, True)},
             roots=(qk_norm_rope_tma_kernel, TmaConfig, tma_configure, tma_variant, tma_check, fused_check, rotary_rule,
                    FusedConfig.lanes, _tma_layout, _tma_block),
             description="TMA ring of [tokens x 8 heads x D/2] boxes, persistent CTAs, both rotary halves read from "
                         "shared memory into the same registers, TMA (or 128-bit) stores")(tma_fn)

    def triton_fn(*inputs, eps, is_neox, out=None):
        return triton_variant(*inputs, eps=eps, is_neox=is_neox)

    register("qk_norm_rope", "triton", pattern="baseline", codegen=triton_codegen, data_guard=raise_device_error,
             roots=(qk_norm_rope_triton_kernel, triton_variant),
             description="plain Triton, one (token, head) per program, partner re-loaded")(triton_fn)


_register()
