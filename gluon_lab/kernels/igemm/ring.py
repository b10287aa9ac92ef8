"""The producer / consumer ring of the warp-specialized template: one EMPTY / FULL mbarrier pair per slot.

Barrier protocol (count = 1 each, FULL_COUNT for FULL), slot = g % S, ph = (g // S) & 1 over the global k-step g:
    producer: wait(empty[slot], ph ^ 1)  (a fresh barrier passes phase "1" at once) ; expect ; copies -> FULL
    consumer: wait(full[slot], ph) ; wgmma ; ... arrive(empty[previous slot]) once its MMA retired
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def ws_ring_barriers(NUM_STAGES: gl.constexpr, FULL_COUNT: gl.constexpr):
    """The EMPTY / FULL barrier pair of every slot of a producer / consumer ring, allocated before the fork
    and initialized (EMPTY: one consumer arrival; FULL: FULL_COUNT arrivals, 1 for a TMA producer's expect):
    (empty_bars, full_bars), each [NUM_STAGES, 1]."""
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=FULL_COUNT)
    return empty_bars, full_bars


@gluon.jit
def ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES: gl.constexpr):
    """After the partitions joined: invalidate the ring's barriers (ws_ring_barriers)."""
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(empty_bars.index(i))
        mbarrier.invalidate(full_bars.index(i))
