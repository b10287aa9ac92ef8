"""The math of the row norms, as @gluon.jit hooks the pattern templates call.

A template (tma_cache, chunked, pipelined, warp_specialized) decides how a row gets into shared
memory and where the output goes; the op decides the statistics. The op's declarative math
(spec.row = RowNorm(stats, centered, weight, bias, residual)) selects a hook family,
STATS_HOOKS[row.stats], which the template receives as the constexpr STATS and calls:

  STATS.row(buf, base, N, eps, CHUNK_OF, CHUNK, NUM_CHUNKS, L, MASK_TAIL) -> (shift, scale)
      statistics of rows cached in shared memory (every template but streaming);
  STATS.accumulate(acc, mean, m2, x, K, cols, N) -> (acc, mean, m2)
      streaming: fold one [1, CHUNK] fp32 chunk (columns cols) into the running statistics,
      [1, CHUNK] per-lane accumulators (no reduction per chunk);
  STATS.finalize(acc, mean, m2, K, N, eps) -> (shift, scale)
      streaming: the statistics once every chunk is folded in (the one reduction of the lanes).

such that y = (x - shift) * scale [* w] [+ b] (normalize_chunk, the same for every op; the
template passes HAS_W / HAS_B). K is the streaming template's shift: the mean of chunk 0 when the
op is centered (row.centered), 0 otherwise.

Cached rows are read chunk by chunk, CHUNK columns at a time, converted to fp32 only at the point
of use. Where chunk c of a row buffer lives is the template's business, passed as CHUNK_OF:
`columns` ([R, N] buffers: columns c*CHUNK...) or `slots` ([slots, R, CHUNK] chunk slots from
`base` on: pattern 2's chunked rows at base 0, a ring slot at base = slot * NUM_CHUNKS). There is
one implementation of each reduction (chunk_sum, chunk_sum_sq_dev) for all of them.

Tail handling for non-power-of-2 rows (chunked templates): the last chunk may run past N; TMA
zero-fills it, which is harmless for sums of x and x², but NOT for sum((x - mean)²): the padded
lanes would add mean² each. MASK_TAIL masks the last chunk's lanes at or past N out of that sum.
"""
from __future__ import annotations

from typing import NamedTuple

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


# ----------------------------------------------------------------------------------------------
# where chunk c of a cached row buffer lives (CHUNK_OF)

@gluon.jit
def columns(buf, base, c: gl.constexpr, CHUNK: gl.constexpr):
    """Chunk c of an [R, N] row buffer: columns c*CHUNK .. c*CHUNK + CHUNK - 1 (base unused)."""
    return buf.slice(c * CHUNK, CHUNK, dim=1)


@gluon.jit
def slots(bufs, base, c: gl.constexpr, CHUNK: gl.constexpr):
    """Chunk c of rows held as [slots, R, CHUNK] chunk slots, the row's first chunk in slot base."""
    return bufs.index(base + c)


@gluon.jit
def load_chunk(buf, base, c: gl.constexpr, CHUNK: gl.constexpr, L: gl.constexpr, CHUNK_OF: gl.constexpr):
    """Chunk c of every row in buf as fp32 registers (layout L)."""
    return CHUNK_OF(buf, base, c, CHUNK).load(L).to(gl.float32)


# ----------------------------------------------------------------------------------------------
# the reductions over cached rows (one implementation for every buffer shape)

@gluon.jit
def chunk_sum(buf, base, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr,
              SQUARE: gl.constexpr):
    """sum(x) or sum(x²) over each row (fp32, one value per row, SliceLayout(1, L))."""
    R: gl.constexpr = CHUNK_OF(buf, base, 0, CHUNK).shape[0]
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        x = load_chunk(buf, base, c, CHUNK, L, CHUNK_OF)
        if SQUARE:
            acc += x * x
        else:
            acc += x
    return gl.sum(acc, axis=1)


@gluon.jit
def chunk_sum_sq_dev(buf, base, mean, N, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr,
                     L: gl.constexpr, MASK_TAIL: gl.constexpr):
    """sum((x - mean)²) per row (LayerNorm's second pass). MASK_TAIL: the last chunk's lanes at or
    past column N are excluded (TMA's zero fill would otherwise add mean² each); only the last
    chunk can hold such lanes, so only it pays for the mask."""
    R: gl.constexpr = CHUNK_OF(buf, base, 0, CHUNK).shape[0]
    mean2 = gl.expand_dims(mean, 1)
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        d = load_chunk(buf, base, c, CHUNK, L, CHUNK_OF) - mean2
        if MASK_TAIL:
            if c == NUM_CHUNKS - 1:
                d = gl.where(gl.expand_dims(c * CHUNK + cols0 < N, 0), d, 0.0)
        acc += d * d
    return gl.sum(acc, axis=1)


@gluon.jit
def rms_rstd(sum_sq, N, eps):
    return gl.rsqrt(sum_sq / N + eps)


@gluon.jit
def l2_inv_norm(sum_sq, N, eps):
    # x / max(||x||, eps), as F.normalize. Not gl.maximum: IEEE max drops a NaN (max(NaN, eps) =
    # eps), while torch's clamp_min propagates it (a NaN in a row must make the whole row NaN).
    n = gl.sqrt(sum_sq)
    return 1.0 / gl.where(n < eps, eps, n)


# ---- STATS.row: cached rows -------------------------------------------------------------------

@gluon.jit
def rms_row(buf, base, N, eps, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr,
            L: gl.constexpr, MASK_TAIL: gl.constexpr):
    """RMSNorm: shift 0, scale 1 / sqrt(mean(x²) + eps) (zero-filled lanes add nothing)."""
    ss = chunk_sum(buf, base, CHUNK_OF, CHUNK, NUM_CHUNKS, L, True)
    return gl.zeros_like(ss), rms_rstd(ss, N, eps)


@gluon.jit
def l2_row(buf, base, N, eps, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr,
           L: gl.constexpr, MASK_TAIL: gl.constexpr):
    """L2Norm: shift 0, scale 1 / max(||x||, eps)."""
    ss = chunk_sum(buf, base, CHUNK_OF, CHUNK, NUM_CHUNKS, L, True)
    return gl.zeros_like(ss), l2_inv_norm(ss, N, eps)


@gluon.jit
def layer_row(buf, base, N, eps, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr,
              L: gl.constexpr, MASK_TAIL: gl.constexpr):
    """LayerNorm: two passes over shared memory (mean, then centred variance): exact, and cheap
    from smem."""
    mean = chunk_sum(buf, base, CHUNK_OF, CHUNK, NUM_CHUNKS, L, False) / N
    var = chunk_sum_sq_dev(buf, base, mean, N, CHUNK_OF, CHUNK, NUM_CHUNKS, L, MASK_TAIL) / N
    return mean, gl.rsqrt(var + eps)


# ---- STATS.accumulate / STATS.finalize: streamed rows -----------------------------------------

@gluon.jit
def chunk_moments(x, cols, N):
    """(count, mean, M2) of one [1, CHUNK] chunk (fp32), lanes at or past column N excluded:
    the exact two-pass moments of the chunk."""
    valid = gl.expand_dims(cols < N, 0)
    n = gl.sum(gl.where(valid, 1.0, 0.0), axis=1)
    mean = gl.sum(gl.where(valid, x, 0.0), axis=1) / gl.maximum(n, 1.0)
    d = gl.where(valid, x - gl.expand_dims(mean, 1), 0.0)
    return n, mean, gl.sum(d * d, axis=1)


@gluon.jit
def sum_sq_accumulate(acc, mean, m2, x, K, cols, N):
    """acc += x² per lane (the zero-filled tail adds nothing); mean, m2 and K unused. The lanes
    are reduced once, in finalize: a CTA-wide sum per chunk put a cross-warp reduction (shared
    memory + barrier) on every 4 KB chunk, and the streamed rows ran at ~55% of the datasheet on
    the H200 whatever the ring depth (run 20261201T120035Z)."""
    return acc + x * x, mean, m2


@gluon.jit
def moments_accumulate(acc, mean, m2, x, K, cols, N):
    """Per-lane shifted sums of d = x - K (K = chunk 0's mean): acc += d, m2 += d² (lanes at or
    past N excluded); mean unused. d is O(std) + |mean - K|, so s2/N - (s1/N)² does not cancel the
    way raw sums of x would when |mean| >> std."""
    d = gl.where(gl.expand_dims(cols < N, 0), x - gl.expand_dims(K, 1), 0.0)
    return acc + d, mean, m2 + d * d


@gluon.jit
def rms_finalize(acc, mean, m2, K, N, eps):
    ss = gl.sum(acc, axis=1)
    return gl.zeros_like(ss), rms_rstd(ss, N, eps)


@gluon.jit
def l2_finalize(acc, mean, m2, K, N, eps):
    ss = gl.sum(acc, axis=1)
    return gl.zeros_like(ss), l2_inv_norm(ss, N, eps)


@gluon.jit
def layer_finalize(acc, mean, m2, K, N, eps):
    md = gl.sum(acc, axis=1) / N
    var = gl.sum(m2, axis=1) / N - md * md
    var = gl.where(var < 0.0, 0.0, var)  # rounding; a NaN stays NaN
    return K + md, gl.rsqrt(var + eps)


# ----------------------------------------------------------------------------------------------
# normalize (every op: the affine operands are the template's HAS_W / HAS_B)

@gluon.jit
def load_param(ptr, cols, N, MASK_TAIL: gl.constexpr):
    """A weight/bias chunk (fp32, [1, CHUNK]) from global memory (L2-resident: every row reads it).
    cols: [CHUNK] in SliceLayout(0, L)."""
    if MASK_TAIL:
        v = gl.load(ptr + cols, mask=cols < N, other=0.0).to(gl.float32)
    else:
        v = gl.load(ptr + cols).to(gl.float32)
    return gl.expand_dims(v, 0)


@gluon.jit
def normalize_chunk(x, shift, scale, w, b, HAS_W: gl.constexpr, HAS_B: gl.constexpr):
    """y (fp32) for one chunk: (x - shift) * scale [* w] [+ b]. w and b are fp32 [1, CHUNK]
    tensors in x's layout, broadcast over the rows (ignored where the op has none)."""
    y = (x - gl.expand_dims(shift, 1)) * gl.expand_dims(scale, 1)
    if HAS_W:
        y = y * w
    if HAS_B:
        y = y + b
    return y


@gluon.jit
def normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, HAS_W: gl.constexpr, HAS_B: gl.constexpr,
                                  MASK_TAIL: gl.constexpr, L: gl.constexpr):
    """normalize_chunk with the weight (and bias) chunk loaded from global memory (fp32 result)."""
    CHUNK: gl.constexpr = x.shape[1]
    w = gl.zeros([1, CHUNK], gl.float32, L)
    b = gl.zeros([1, CHUNK], gl.float32, L)
    if HAS_W:
        w = load_param(w_ptr, cols, N, MASK_TAIL)
    if HAS_B:
        b = load_param(b_ptr, cols, N, MASK_TAIL)
    return normalize_chunk(x, shift, scale, w, b, HAS_W, HAS_B)


@gluon.jit
def residual_add(xbuf, rbuf, base, s_ptrs, row_ok, cols0, N, CHUNK_OF: gl.constexpr, CHUNK: gl.constexpr,
                 NUM_CHUNKS: gl.constexpr, L: gl.constexpr, MASK_TAIL: gl.constexpr, STORE: gl.constexpr):
    """add_rms_norm's first step: s = x + residual in the input dtype (as eager), over every cached
    chunk. s overwrites the residual's chunks in place (same thread, same elements): the norm reads
    it from there. STORE: s also leaves through 128-bit stores to s_ptrs ([R, 1] row pointers;
    MASK_TAIL: lanes at or past N are not stored)."""
    for c in gl.static_range(NUM_CHUNKS):
        rs = CHUNK_OF(rbuf, base, c, CHUNK)
        s = CHUNK_OF(xbuf, base, c, CHUNK).load(L) + rs.load(L)
        rs.store(s)
        if STORE:
            cols = c * CHUNK + cols0
            mask = row_ok
            if MASK_TAIL:
                mask = row_ok & gl.expand_dims(cols < N, 0)
            gl.store(s_ptrs + gl.expand_dims(cols, 0), s, mask=mask)


# ----------------------------------------------------------------------------------------------
# the hook families (spec.row.stats -> STATS)

class StatsHooks(NamedTuple):
    """The jit callables of one statistics family (see the module docstring). Passed to kernels
    as the constexpr STATS; cache_key makes the compiled-kernel cache follow the hooks' source."""
    row: object
    accumulate: object
    finalize: object

    @property
    def cache_key(self) -> str:
        return "-".join(f.cache_key for f in self)


STATS_HOOKS = {
    "rms": StatsHooks(row=rms_row, accumulate=sum_sq_accumulate, finalize=rms_finalize),
    "l2": StatsHooks(row=l2_row, accumulate=sum_sq_accumulate, finalize=l2_finalize),
    "layer": StatsHooks(row=layer_row, accumulate=moments_accumulate, finalize=layer_finalize),
}


def stats_hooks(row) -> StatsHooks:
    try:
        return STATS_HOOKS[row.stats]
    except KeyError:
        raise ValueError(f"no statistics hooks for stats={row.stats!r}; families are {sorted(STATS_HOOKS)}") from None
