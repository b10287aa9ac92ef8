"""The per-op math of the four norms, as @gluon.jit helpers shared by every pattern.

Each helper walks a row buffer that already sits in shared memory ([R, N_PAD] of the input dtype,
R rows) in CHUNK-wide slices, converting to fp32 only at the point of use. Patterns differ in how
the row gets into shared memory (one TMA copy, power-of-2 chunks, a ring slot...) and where the
output goes; the arithmetic below is the same for all of them, so a numerics fix lands once.

Tail handling for non-power-of-2 rows (pattern 2): the buffer may be wider than N; TMA zero-fills
past the end, which is harmless for sums of x and x², but NOT for sum((x - mean)²): the padded
lanes would add mean² each. `MASK_TAIL` masks them out of that pass.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# op codes, passed to the kernels as the constexpr OP
OP_CODES = {"rms_norm": 0, "layer_norm": 1, "l2_norm": 2, "add_rms_norm": 3}


@gluon.jit
def load_chunk(buf, c: gl.constexpr, CHUNK: gl.constexpr, L: gl.constexpr):
    """Chunk c of every row in buf as fp32 registers (layout L)."""
    return buf.slice(c * CHUNK, CHUNK, dim=1).load(L).to(gl.float32)


@gluon.jit
def row_sum(buf, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr, SQUARE: gl.constexpr):
    """sum(x) or sum(x²) over each row of buf (fp32, one value per row, SliceLayout(1, L))."""
    R: gl.constexpr = buf.shape[0]
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        x = load_chunk(buf, c, CHUNK, L)
        if SQUARE:
            acc += x * x
        else:
            acc += x
    return gl.sum(acc, axis=1)


@gluon.jit
def row_sum_sq_dev(buf, mean, N, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr,
                   MASK_TAIL: gl.constexpr):
    """sum((x - mean)²) per row (LayerNorm's second pass). Lanes at or past column N are excluded
    when MASK_TAIL (zero-filled padding would otherwise add mean² each)."""
    R: gl.constexpr = buf.shape[0]
    mean2 = gl.expand_dims(mean, 1)
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        d = load_chunk(buf, c, CHUNK, L) - mean2
        if MASK_TAIL:
            d = gl.where(gl.expand_dims(c * CHUNK + cols0 < N, 0), d, 0.0)
        acc += d * d
    return gl.sum(acc, axis=1)


@gluon.jit
def rms_rstd(sum_sq, N, eps):
    return gl.rsqrt(sum_sq / N + eps)


@gluon.jit
def l2_inv_norm(sum_sq, eps):
    # x / max(||x||, eps), as F.normalize. Not gl.maximum: IEEE max drops a NaN (max(NaN, eps) =
    # eps), while torch's clamp_min propagates it (a NaN in a row must make the whole row NaN).
    n = gl.sqrt(sum_sq)
    return 1.0 / gl.where(n < eps, eps, n)


@gluon.jit
def row_stats(buf, N, eps, OP: gl.constexpr, CHUNK: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr,
              MASK_TAIL: gl.constexpr):
    """(shift, scale) per row such that y = (x - shift) * scale [* w (+ b)] for every op."""
    if OP == 1:  # LayerNorm: two passes over smem (mean, then centred variance): exact, and cheap from smem
        mean = row_sum(buf, CHUNK, NUM_CHUNKS, L, False) / N
        var = row_sum_sq_dev(buf, mean, N, CHUNK, NUM_CHUNKS, L, MASK_TAIL) / N
        return mean, gl.rsqrt(var + eps)
    else:
        ss = row_sum(buf, CHUNK, NUM_CHUNKS, L, True)
        if OP == 2:
            scale = l2_inv_norm(ss, eps)
        else:
            scale = rms_rstd(ss, N, eps)
        return gl.zeros_like(scale), scale


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
def normalize_chunk(x, shift, scale, w, b, OP: gl.constexpr):
    """y (fp32) for one chunk: (x - shift) * scale, times w (plus b for LayerNorm); L2 has no weight.
    w and b are fp32 [1, CHUNK] tensors in x's layout, broadcast over the rows (ignored where the
    op has none)."""
    y = (x - gl.expand_dims(shift, 1)) * gl.expand_dims(scale, 1)
    if OP != 2:
        y = y * w
        if OP == 1:
            y = y + b
    return y


@gluon.jit
def chunk_moments(x, cols, N):
    """(count, mean, M2) of one [1, CHUNK] chunk (fp32), lanes at or past column N excluded:
    the exact two-pass moments of the chunk, for streaming LayerNorm."""
    valid = gl.expand_dims(cols < N, 0)
    n = gl.sum(gl.where(valid, 1.0, 0.0), axis=1)
    mean = gl.sum(gl.where(valid, x, 0.0), axis=1) / gl.maximum(n, 1.0)
    d = gl.where(valid, x - gl.expand_dims(mean, 1), 0.0)
    return n, mean, gl.sum(d * d, axis=1)


@gluon.jit
def chan_merge(n_a, mean_a, m2_a, n_b, delta, m2_b):
    """Merge two (count, mean, M2) summaries (Chan et al.), given delta = mean_b - mean_a.
    Pass the chunk's moments computed on x - mean_a (chunk_moments(x - mean_a, ...): its mean IS
    delta): the data stay O(std) even when |mean| >> std, where forming mean_b - mean_a from two
    large fp32 means would cancel (seen on the H200: LayerNorm fp32, x = 100 + N(0, 1),
    N = 131080, 2e-4 max error from unshifted chunk means)."""
    n = n_a + n_b
    frac = n_b / gl.maximum(n, 1.0)
    return n, mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac


@gluon.jit
def normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, OP: gl.constexpr, MASK_TAIL: gl.constexpr,
                                  L: gl.constexpr):
    """normalize_chunk with the weight (and bias) chunk loaded from global memory (fp32 result)."""
    CHUNK: gl.constexpr = x.shape[1]
    w = gl.zeros([1, CHUNK], gl.float32, L)
    b = gl.zeros([1, CHUNK], gl.float32, L)
    if OP != 2:
        w = load_param(w_ptr, cols, N, MASK_TAIL)
    if OP == 1:
        b = load_param(b_ptr, cols, N, MASK_TAIL)
    return normalize_chunk(x, shift, scale, w, b, OP)


# ----------------------------------------------------------------------------------------------
# The same statistics over a CHUNKED buffer: bufs is [NUM_CHUNKS, R, CHUNK] (chunk c = bufs.index(c)),
# so the allocation is exactly NUM_CHUNKS chunks (a [R, ROW] buffer must be a power of two wide).

@gluon.jit
def chunks_sum(bufs, NUM_CHUNKS: gl.constexpr, L: gl.constexpr, SQUARE: gl.constexpr):
    """sum(x) or sum(x²) per row over every chunk (fp32, SliceLayout(1, L))."""
    R: gl.constexpr = bufs.shape[1]
    CHUNK: gl.constexpr = bufs.shape[2]
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        x = bufs.index(c).load(L).to(gl.float32)
        if SQUARE:
            acc += x * x
        else:
            acc += x
    return gl.sum(acc, axis=1)


@gluon.jit
def chunks_sum_sq_dev(bufs, mean, N, NUM_CHUNKS: gl.constexpr, L: gl.constexpr):
    """sum((x - mean)²) per row; lanes at or past column N (TMA's zero fill) are excluded. Only the
    last chunk can hold such lanes, so only it pays for the mask."""
    R: gl.constexpr = bufs.shape[1]
    CHUNK: gl.constexpr = bufs.shape[2]
    mean2 = gl.expand_dims(mean, 1)
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        d = bufs.index(c).load(L).to(gl.float32) - mean2
        if c == NUM_CHUNKS - 1:
            d = gl.where(gl.expand_dims(c * CHUNK + cols0 < N, 0), d, 0.0)
        acc += d * d
    return gl.sum(acc, axis=1)


@gluon.jit
def chunks_row_stats(bufs, N, eps, OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr):
    """(shift, scale) per row, as row_stats, over a chunked buffer."""
    if OP == 1:  # LayerNorm: exact two passes over shared memory
        mean = chunks_sum(bufs, NUM_CHUNKS, L, False) / N
        var = chunks_sum_sq_dev(bufs, mean, N, NUM_CHUNKS, L) / N
        return mean, gl.rsqrt(var + eps)
    else:
        ss = chunks_sum(bufs, NUM_CHUNKS, L, True)
        if OP == 2:
            scale = l2_inv_norm(ss, eps)
        else:
            scale = rms_rstd(ss, N, eps)
        return gl.zeros_like(scale), scale


# ----------------------------------------------------------------------------------------------
# The same over chunks base .. base + NUM_CHUNKS - 1 of a ring buffer [slots * NUM_CHUNKS, R, CHUNK]
# (base = slot * NUM_CHUNKS, a runtime value: a smem allocation is at most rank 3 with the rank-2
# NVMMA layout TMA needs, so a ring of chunked rows is flattened). chunks_row_stats above is the
# base = 0 case; it stays separate only so that pattern 2's recorded kernel hash stays current —
# fold it into this one at pattern 2's next re-measurement.

@gluon.jit
def ring_sum(bufs, base, NUM_CHUNKS: gl.constexpr, L: gl.constexpr, SQUARE: gl.constexpr):
    R: gl.constexpr = bufs.shape[1]
    CHUNK: gl.constexpr = bufs.shape[2]
    acc = gl.zeros([R, CHUNK], gl.float32, L)
    for c in gl.static_range(NUM_CHUNKS):
        x = bufs.index(base + c).load(L).to(gl.float32)
        if SQUARE:
            acc += x * x
        else:
            acc += x
    return gl.sum(acc, axis=1)


@gluon.jit
def ring_row_stats(bufs, base, N, eps, OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, L: gl.constexpr):
    """(shift, scale) per row over chunks base.. of a ring buffer (LayerNorm: exact two passes,
    the zero-filled lanes of the last chunk masked out of the centred sum)."""
    if OP == 1:
        R: gl.constexpr = bufs.shape[1]
        CHUNK: gl.constexpr = bufs.shape[2]
        mean = ring_sum(bufs, base, NUM_CHUNKS, L, False) / N
        mean2 = gl.expand_dims(mean, 1)
        cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
        acc = gl.zeros([R, CHUNK], gl.float32, L)
        for c in gl.static_range(NUM_CHUNKS):
            d = bufs.index(base + c).load(L).to(gl.float32) - mean2
            if c == NUM_CHUNKS - 1:
                d = gl.where(gl.expand_dims(c * CHUNK + cols0 < N, 0), d, 0.0)
            acc += d * d
        return mean, gl.rsqrt(gl.sum(acc, axis=1) / N + eps)
    else:
        ss = ring_sum(bufs, base, NUM_CHUNKS, L, True)
        if OP == 2:
            scale = l2_inv_norm(ss, eps)
        else:
            scale = rms_rstd(ss, N, eps)
        return gl.zeros_like(scale), scale
