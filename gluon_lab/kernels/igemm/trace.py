"""The template's measured timeline: per-unit %globaltimer stamps of an INSTRUMENT build.

A consumer that owns unit i of program pid stamps [tag, start, last MMA issued, store issued] into row
(pid · TRACE_ITERS + i) of an int64 trace tensor (TRACE_CTAS · TRACE_ITERS · UNIT_TRACE_FIELDS elements; only
programs pid < TRACE_CTAS and units i < TRACE_ITERS). The tag is a label, not a time (plan_common.record_stamps'
`tags`): the GEMM's consumer warpgroup + 1, a conv split-K unit's K-slice + 1. It is stored as (t0 - t0) + tag
so the store is an int64 like the stamps; a zero row means "not run". Builds without INSTRUMENT never call it
(the constexpr branch is dropped: the same compiled code as a kernel without the stamps).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..pipelined import TRACE_CTAS, TRACE_ITERS, globaltimer

UNIT_TRACE_FIELDS: gl.constexpr = gl.constexpr(4)


@gluon.jit
def unit_stamps(t_ptr, pid, i, tag, t0, t1):
    """Unit i of program pid: [tag, t0, t1, now] (now: after the epilogue was issued)."""
    if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
        t2 = globaltimer()
        base = (pid * TRACE_ITERS + i) * UNIT_TRACE_FIELDS
        gl.store(t_ptr + base, (t0 - t0) + tag)
        gl.store(t_ptr + base + 1, t0)
        gl.store(t_ptr + base + 2, t1)
        gl.store(t_ptr + base + 3, t2)
