"""The padded-copy producer's staging: operands whose rows are not 128-byte aligned, copied into rows that are.

A TMA box row that starts off a 128-byte line straddles two lines: on the GEMM sweep's ragged shapes the
TMA producer runs 10-54% slower than on the same data in rows padded to 64 elements
(results/h200/gemm-probe.log, notebook 04 "Why the ragged shapes lose"), and the cp.async producer is slower
still. GemmConfig(pad_rows=True) pays one copy instead: before the GEMM, `pad_rows` copies each operand
whose row stride is off a 128-byte multiple into a fresh buffer whose rows are, and the GEMM's ordinary
TMA producer reads that buffer's view (the first K / N columns: the descriptors never read the padding, so
it is left unwritten). One launch copies both operands; an operand already aligned is not copied.

The copy is worth it where the GEMM's time saved exceeds the bytes moved (read + write of A and B): large
K with few output tiles per operand byte loses, long-running GEMMs win; the 04 'gemm-shapes' sweep
measures it beside the TMA and cp.async producers on every ragged shape.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..hopper import cdiv

ROW_ALIGN = 128  # bytes: a TMA box row starting on a 128-byte line reads one line per 128 bytes
COPY_ROWS, COPY_COLS, COPY_WARPS = 32, 256, 4  # one program copies a [32, 256] block (16 KB of bf16)


@gluon.jit
def _copy_block(src, dst, rows, cols, src_stride, dst_stride, blk, VEC: gl.constexpr, BR: gl.constexpr,
                BC: gl.constexpr, layout: gl.constexpr):
    """Block blk (row-major over [rows, cols]) of src into dst. Row strides are multiples of 8 elements
    (gemm.check's 16-byte rows); VEC: cols is too, so the loads, stores and masks vectorize to 16 bytes."""
    col_blocks = gl.cdiv(cols, BC)
    r = (blk // col_blocks) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    c = (blk % col_blocks) * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, layout))
    cc = gl.expand_dims(c, 0)
    if VEC:  # (c // 8) * 8 < cols is c < cols for cols a multiple of 8, constant over each 16-byte vector
        c_ok = (c // 8) * 8 < gl.multiple_of(cols, 8)
    else:
        c_ok = c < cols
    mask = gl.expand_dims(r < rows, 1) & gl.expand_dims(c_ok, 0)
    # row starts: multiples of 8 elements (said so, so the copies vectorize to 16 bytes)
    src_rows = gl.expand_dims(gl.multiple_of(r.to(gl.int64) * gl.multiple_of(src_stride, 8).to(gl.int64), 8), 1)
    dst_rows = gl.expand_dims(gl.multiple_of(r.to(gl.int64) * gl.multiple_of(dst_stride, 8).to(gl.int64), 8), 1)
    x = gl.load(src + src_rows + cc, mask=mask)
    gl.store(dst + dst_rows + cc, x, mask=mask)


@gluon.jit
def pad_copy_kernel(a, a_dst, a_rows, a_cols, a_stride, a_dst_stride, a_blocks,
                    b, b_dst, b_rows, b_cols, b_stride, b_dst_stride, A_VEC: gl.constexpr, B_VEC: gl.constexpr,
                    BR: gl.constexpr, BC: gl.constexpr, num_warps: gl.constexpr):
    """Programs [0, a_blocks) copy A's blocks, the rest B's (a_blocks = 0: B only; a grid of a_blocks: A only)."""
    gl.static_assert(BC == 256, "a warp copies one row of 32 x 8 elements")
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [num_warps, 1], [1, 0])
    pid = gl.program_id(0)
    if pid < a_blocks:
        _copy_block(a, a_dst, a_rows, a_cols, a_stride, a_dst_stride, pid, A_VEC, BR, BC, layout)
    else:
        _copy_block(b, b_dst, b_rows, b_cols, b_stride, b_dst_stride, pid - a_blocks, B_VEC, BR, BC, layout)


def needs_pad(t) -> bool:
    """t's rows do not all start on 128-byte lines (its row stride or base off a multiple of 128 bytes)."""
    return (t.stride(0) * t.element_size()) % ROW_ALIGN != 0 or t.data_ptr() % ROW_ALIGN != 0


def padded_like(t):
    """A fresh buffer for t with rows of ROW_ALIGN-multiple bytes, viewed as t's shape."""
    import torch
    step = ROW_ALIGN // t.element_size()
    rows, cols = t.shape
    return torch.empty((rows, cdiv(cols, step) * step), dtype=t.dtype, device=t.device)[:, :cols]


def _blocks(t) -> int:
    return cdiv(t.shape[0], COPY_ROWS) * cdiv(t.shape[1], COPY_COLS)


def pad_rows(a, b):
    """(a', b'): each operand whose rows are off 128-byte lines replaced by an aligned copy (one launch for
    both), the others returned as they are. a, b: 2-D, unit last stride, 16-byte rows (gemm.check)."""
    todo = [t for t in (a, b) if needs_pad(t)]
    if not todo:
        return a, b
    out = {id(t): padded_like(t) for t in todo}
    first, second = (todo + [None])[:2]
    args, vec = [], []
    for t in (first, second):
        if t is None:  # B's arguments of an A-only launch: never read (no program has pid >= a_blocks)
            args.append((first, out[id(first)], 0, 0, 0, 0))
            vec.append(True)
        else:
            d = out[id(t)]
            args.append((t, d, t.shape[0], t.shape[1], t.stride(0), d.stride(0)))
            vec.append(t.shape[1] % 8 == 0)
    a_blocks = _blocks(first)
    grid = a_blocks + (_blocks(second) if second is not None else 0)
    pad_copy_kernel[(grid, )](*args[0], a_blocks, *args[1], A_VEC=vec[0], B_VEC=vec[1], BR=COPY_ROWS,
                              BC=COPY_COLS, num_warps=COPY_WARPS)
    return out.get(id(a), a), out.get(id(b), b)
