"""TMA + wgmma GEMM for Hopper (pattern 3, the compute-bound case): C = A @ B, bf16/fp16 in, fp32
accumulate, output in the input dtype.

Measured on the H200 (notebook 03): 682 vs cuBLAS 673 TFLOP/s at 8192^3 bf16 in the same run,
>= 0.96x cuBLAS on every shape of the set (tests/test_gemm_gpu.py).

The kernel ("gluon-pipelined" for matmul):
* persistent: grid = min(#tiles, #SMs); program p walks tiles p, p + grid, ... in GROUP_M-grouped
  order (GROUP_M row-tiles share a column band, so B's band stays in L2 while they run);
* a NUM_STAGES ring of [BM, BK] / [BK, BN] TMA boxes, one mbarrier per slot, with the k-step
  counter running ACROSS tiles: the next tile's first loads are issued while the current tile's
  last MMAs run (the ring never drains between tiles);
* warpgroup_mma (wgmma) asynchronous, one MMA group in flight: after warpgroup_mma_wait(1) at step
  k the MMA of step k-1 has retired, so its slot is refilled with step k + NUM_STAGES - 1 (no proxy
  fence needed: TMA writes and wgmma reads are both async-proxy, ordered by the mbarrier);
* epilogue: accumulator -> the input dtype -> shared memory -> TMA store; the store of tile t is
  waited for (store_wait(0)) only right before tile t+1 writes the same staging buffer, so it
  overlaps tile t+1's main loop;
* ragged M, N, K: TMA zero-fills out-of-bounds boxes (K tail contributes zeros) and clips stores.
"""
from __future__ import annotations

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .hopper import GL_DTYPE, H200_SMS, ITEMSIZE, SMEM_LIMIT, cdiv, descriptor, desc_type, dtype_name, kernel_spec, num_sms
from .igemm.producers import tma_k_step
from .igemm.staging import pad_copy_kernel, pad_rows
from .igemm.schedule import tile_coords, tile_space, wave_fill


@gluon.jit
def _next_k_step(kk, i, pid_m, pid_n, k_tiles, start, nprog, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """The load stream's position one k-step on: (kk, tile i of this program, its coordinates).
    Incremental, so the tile-order divisions run once per tile, not once per k-step: the loads are
    issued by the MMA warps themselves, and per-step integer divisions there cost issue slots
    (the first H200 run: 0.84x cuBLAS at 8192^3 with them)."""
    kk += 1
    if kk == k_tiles:
        kk = 0
        i += 1
        pid_m, pid_n = tile_coords(start + i * nprog, num_pid_m, num_pid_n, GROUP_M)
    return kk, i, pid_m, pid_n


@gluon.jit
def persistent_gemm_kernel(a_desc, b_desc, c_desc, M, N, K, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                           num_warps: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    gl.static_assert(NUM_STAGES >= 2, "the ring needs >= 2 slots")
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = tile_space(M, N, K, BM, BN, BK)
    total = my_tiles * k_tiles  # k-steps this program runs, across all its tiles

    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)

    # wgmma accumulator: instr_shape [16, BN, 16] (bf16/fp16), warps stacked along M
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    # the load stream runs NUM_STAGES - 1 k-steps ahead of the MMAs, across tile boundaries
    ld_kk = 0
    ld_i = 0
    ld_m, ld_n = tile_coords(start, num_pid_m, num_pid_n, GROUP_M)
    for p in gl.static_range(NUM_STAGES - 1):  # prologue: the first NUM_STAGES-1 k-steps in flight
        tma_k_step(a_desc, b_desc, a_bufs, b_bufs, bars, p, ld_kk, ld_m, ld_n, p < total)
        ld_kk, ld_i, ld_m, ld_n = _next_k_step(ld_kk, ld_i, ld_m, ld_n, k_tiles, start, nprog, num_pid_m,
                                               num_pid_n, GROUP_M)

    g = 0  # global k-step counter of the MMAs (ring position and phase)
    s = 0  # g % NUM_STAGES, kept incrementally
    ph = 0  # (g // NUM_STAGES) & 1
    for i in range(my_tiles):
        t = start + i * nprog
        pid_m, pid_n = tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for kk in range(k_tiles):
            mbarrier.wait(bars.index(s), ph)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # step g + NUM_STAGES - 1 goes into the slot of step g - 1, whose MMA has just retired
            ls = s - 1 if s > 0 else NUM_STAGES - 1
            tma_k_step(a_desc, b_desc, a_bufs, b_bufs, bars, ls, ld_kk, ld_m, ld_n, g + NUM_STAGES - 1 < total)
            ld_kk, ld_i, ld_m, ld_n = _next_k_step(ld_kk, ld_i, ld_m, ld_n, k_tiles, start, nprog, num_pid_m,
                                                   num_pid_n, GROUP_M)
            g += 1
            s += 1
            if s == NUM_STAGES:
                s = 0
                ph ^= 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        tma.store_wait(0)  # the previous tile's store has finished reading c_smem
        c_smem.store(acc.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], c_smem)
    tma.store_wait(0)
    c_smem._keep_alive()  # live until the last store has read it (see tma_cache's TMA-store note)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))


# fp32 accumulator registers per thread a consumer may hold (CUTLASS PR 3372's rule: 128x256 over one
# warpgroup = 256 spills to 43-90 TFLOP/s; 128 = 128x128 per warpgroup or 128x256 over two fits)
MAX_ACC_REGS = 128
# registers a consumer needs beyond its accumulator (addresses, barrier phases, the epilogue's
# conversion): ping-pong 128x128 spilled 3544 B at 120 registers (producer_regs = 256) and none at 176
# (producer_regs = 152), CPU compiles of the sm_90 kernel
REG_HEADROOM = 48
CP_PRODUCER_REGS = 96  # cp.async producer warpgroup: 8 + 16 sixteen-byte copies per k-step of 128x64 + 64x256 boxes
MAX_SPLIT_K = 16  # K slices of split-K (the workspace holds split_k fp32 copies of C)


@dataclass(frozen=True)
class GemmConfig:
    """Tile shape and ring depth. Defaults: 128x256x64, 3 stages, 8 warps (two warpgroups stacked
    along M, each 64 rows) — issue #5 reports a plain non-persistent TMA+wgmma tile kernel with a
    128x256 tile and 3 stages reached 0.99x cuBLAS at 8192^3 bf16 on our H200. smem: 3 x (16 + 32)
    KB ring + 64 KB epilogue staging = 208 KB (< 227 KB)."""
    BM: int = 128
    BN: int = 256
    BK: int = 64
    num_stages: int = 3
    num_warps: int = 8
    group_m: int = 8  # grouped ordering: 8 row-tiles per column band (the Triton tutorial's default)
    # gluon-ws only: the 1-warp TMA producer's setmaxnreg budget (24..256, multiple of 8); it only
    # computes coordinates, so the rest of the register file goes to the consumer warpgroups
    producer_regs: int = 40
    # gluon-ws only: the consumer schedule. False = cooperative (num_warps warps share one BM x BN tile);
    # True = ping-pong (two consumer warpgroups of num_warps = 4 warps each own alternate tiles of the
    # CTA's list, an order barrier lets one run its mainloop while the other runs its epilogue)
    pingpong: bool = False
    # gluon-ws cooperative only: split K into split_k slices, each a work unit of its own (fp32
    # partials in a workspace, summed and cast by a second kernel); for outputs with fewer tiles than
    # SMs and a long K
    split_k: int = 1
    # with split_k > 1: split only the last, partial wave's tiles (the whole waves stay data-parallel), so a
    # ragged tile count keeps every SM busy to the end (the hybrid of CUTLASS's data-parallel + split-K)
    split_last_wave: bool = False
    # gluon-ws cooperative only: compute C^T = B^T A^T so BN fills the wgmma M side and BM may be 16 / 32
    # (decode-like M <= 64 without padding M to a 64-row tile); BM, BN still tile C's M and N
    swap_ab: bool = False
    # gluon-ws cooperative only: read A and B with a warpgroup of 16-byte cp.async copies instead of TMA (built for
    # rows that are not 128-byte aligned, where TMA loses 10-54%: results/h200/gemm-probe.log; measured slower
    # than TMA there, 0.75-0.84x, run 20261202T064547Z, so no heuristic picks it); needs producer_regs >=
    # CP_PRODUCER_REGS (its copy addresses live in registers; 152 for 128x128 over 8 consumer warps, which
    # spills 120-128 B at 96-128 in the sm_90 CPU compile)
    cp_async: bool = False
    # gluon-ws cooperative only: stream-K over the last stream_k waves of tiles (the partial wave counted; all
    # tiles when they are fewer than the SMs): their k-steps are one list cut into balanced shares, one per
    # CTA, so every SM runs the same number of k-steps whatever the tile count (CUTLASS's stream-K, its
    # data-parallel + stream-K hybrid at stream_k = 2); a tile cut between CTAs is summed from fp32 partials
    # by a second kernel (deterministic). 0 = off
    stream_k: int = 0
    # the padded-copy producer: each operand whose rows are not 128-byte aligned is first copied (one extra
    # launch, igemm.staging.pad_rows) into rows that are, and the TMA producer reads the copy. Any schedule
    # and consumer; the GEMM kernel compiles as without it. Pays a read + write of A and B to avoid the
    # straddled TMA rows (results/h200/gemm-probe.log: 10-54% on the sweep's ragged shapes)
    pad_rows: bool = False

    def consumers(self) -> int:
        """Accumulator tiles in flight per CTA (one per consumer warpgroup in ping-pong)."""
        return 2 if self.pingpong else 1

    def consumer_regs(self) -> int:
        """The setmaxnreg budget a gluon-ws consumer thread gets: the launch budget of the whole CTA
        (its warps rounded up to warpgroups, <= 255 each, multiple of 8) minus the producer warpgroup's
        producer_regs, shared by the consumer warps (ping-pong: two warpgroups, each <= 232)."""
        consumer_warps = self.num_warps * self.consumers()
        total = 32 * 4 * -(-(consumer_warps + 1) // 4)
        launch = min(255, 65536 // total) // 8 * 8
        per = (launch * total - 128 * self.producer_regs) // (32 * consumer_warps) // 8 * 8
        return min(per, 232 if self.pingpong else 256)

    def cp_producer_floor(self) -> int:
        """The least producer_regs a cp.async producer compiles without spills at (sm_90 CPU compiles): 152 for
        128x128 over 8 consumer warps (120-128 B spilled at 96-128), CP_PRODUCER_REGS otherwise."""
        return 152 if (self.BM, self.BN, self.num_warps) == (128, 128, 8) else CP_PRODUCER_REGS

    def smem_bytes(self, dtype: str = "bfloat16") -> int:
        e = ITEMSIZE[dtype]
        # split-K stages its fp32 partials in smem for a TMA store; stream-K stores them from registers
        staging = self.consumers() * self.BM * self.BN * e + (self.BM * self.BN * 4 if self.split_k > 1 else 0)
        return self.num_stages * (self.BM * self.BK + self.BK * self.BN) * e + staging + 1024  # + fp32 partials

    def validate(self, dtype: str = "bfloat16"):
        for name in ("BM", "BN", "BK"):
            v = getattr(self, name)
            if v & (v - 1) or v < 16:
                raise ValueError(f"GemmConfig.{name} must be a power of two >= 16; got {v}")
        mma_m, mma_n = ("BN", "BM") if self.swap_ab else ("BM", "BN")  # swap_ab: C^T's tile feeds the wgmma
        if getattr(self, mma_m) < 16 * self.num_warps:
            raise ValueError(f"GemmConfig.{mma_m} must be >= 16 x num_warps (wgmma rows per warp"
                             f"{'; swap_ab puts BN on the wgmma M side' if self.swap_ab else ''}); got "
                             f"{mma_m}={getattr(self, mma_m)}, num_warps={self.num_warps}")
        if self.num_warps % 4:
            raise ValueError(f"GemmConfig.num_warps must be a multiple of 4 (whole warpgroups); got {self.num_warps}")
        if getattr(self, mma_n) > 256:
            raise ValueError(f"GemmConfig.{mma_n} must be <= 256 (wgmma N); got {getattr(self, mma_n)}")
        if self.swap_ab and self.pingpong:
            raise ValueError("GemmConfig(swap_ab=True) runs on the cooperative consumer: pingpong must be False")
        if not 24 <= self.producer_regs <= 256 or self.producer_regs % 8:
            raise ValueError(f"GemmConfig.producer_regs must be a multiple of 8 in 24..256 (setmaxnreg); "
                             f"got {self.producer_regs}")
        if self.num_stages < 2:
            raise ValueError(f"GemmConfig.num_stages must be >= 2 (a slot is released only after the next step's MMA "
                             f"is issued: one slot deadlocks); got {self.num_stages}")
        if not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ValueError(f"GemmConfig.split_k must be in 1..{MAX_SPLIT_K}; got {self.split_k}")
        if self.split_last_wave and self.split_k == 1:
            raise ValueError("GemmConfig(split_last_wave=True) needs split_k > 1 (the slices of the last wave's tiles)")
        if self.split_k > 1 and self.pingpong:
            raise ValueError("GemmConfig(split_k > 1) runs on the cooperative consumer: pingpong must be False")
        if self.stream_k not in (0, 1, 2):
            raise ValueError(f"GemmConfig.stream_k must be 0 (off), 1 (the last, partial wave) or 2 (it and one whole "
                             f"wave before it); got {self.stream_k}")
        if self.stream_k and (self.pingpong or self.split_k > 1):
            raise ValueError("GemmConfig(stream_k > 0) runs on the cooperative consumer without split-K: pingpong must "
                             "be False and split_k 1")
        if self.cp_async and self.pad_rows:
            raise ValueError("GemmConfig(pad_rows=True) feeds the TMA producer aligned copies; cp_async reads the "
                             "operands in place: set one of them")
        if self.cp_async and self.pingpong:
            raise ValueError("GemmConfig(cp_async=True) runs on the cooperative consumer: pingpong must be False")
        if self.cp_async and self.producer_regs < self.cp_producer_floor():
            raise ValueError(f"GemmConfig(cp_async=True) needs producer_regs >= {self.cp_producer_floor()} for "
                             f"{self.BM}x{self.BN} over {self.num_warps} warps (the copy addresses of a whole A and B "
                             f"box live in the producer's registers); got {self.producer_regs}")
        if self.pingpong and self.num_warps != 4:
            raise ValueError(f"GemmConfig(pingpong=True) runs one warpgroup per consumer: num_warps must be 4; "
                             f"got {self.num_warps}")
        if self.BM * self.BN // (32 * self.num_warps) > MAX_ACC_REGS:
            raise ValueError(f"GemmConfig {self.BM}x{self.BN} over {self.num_warps} warps holds "
                             f"{self.BM * self.BN // (32 * self.num_warps)} fp32 accumulator registers per thread "
                             f"> {MAX_ACC_REGS} (it spills): use a smaller tile or more warps")
        if self.consumer_regs() < MAX_ACC_REGS + REG_HEADROOM:
            raise ValueError(f"GemmConfig.producer_regs={self.producer_regs} leaves the consumer warps "
                             f"{self.consumer_regs()} registers < {MAX_ACC_REGS + REG_HEADROOM} (accumulator + headroom): "
                             "they spill; lower producer_regs")
        if self.smem_bytes(dtype) > SMEM_LIMIT:
            raise ValueError(f"GemmConfig {self} needs {self.smem_bytes(dtype)} B of shared memory > {SMEM_LIMIT}")
        return self

    @classmethod
    def heuristic(cls, M: int, N: int, dtype: str = "bfloat16", K: int | None = None, ws: bool = False,
                  **overrides) -> "GemmConfig":
        """The config a launch runs when none is given: shape_pick (the 04 'gemm-shapes' sweep's rules)
        for gluon-ws (ws=True, every schedule) or gluon-pipelined (tiles only). Overrides replace
        fields; an override of the tile or schedule (TILE_KNOBS) starts from the plain default
        instead of the shape's pick, so an explicit tile never inherits a swap / split / ping-pong.
        The heuristic never picks cp_async: on the sweep's misaligned shapes (run 20261202T064547Z) the
        cp.async producer ran at 0.75-0.84x the TMA one (notebook 04, "cp.async vs TMA")."""
        import dataclasses
        known = {f.name for f in dataclasses.fields(cls)}
        over = {k: v for k, v in overrides.items() if k in known}
        if TILE_KNOBS & set(over):
            return dataclasses.replace(cls(), **over)
        return dataclasses.replace(shape_pick(M, N, 4096 if K is None else K, ws), **over)


# fields whose override means "this tile / schedule", not "the shape's pick with one knob changed"
TILE_KNOBS = frozenset({"BM", "BN", "BK", "num_warps", "pingpong", "split_k", "split_last_wave", "swap_ab", "cp_async",
                        "stream_k"})


# --- the shape-bucketed rules (GemmConfig.heuristic) ------------------------------------------------
# From the 04 'gemm-shapes' sweep on the H200, run 20261202T054108Z (29 shapes x 12-21 configs beside
# cuBLAS in one run, bf16; notebook 04 "shape sweep" / "bucket proposal"). Ratios quoted are config /
# cuBLAS in that run. Every rule below names the cells it was read from.
BIG_WAVES = 4       # >= 4 waves of 128x256 tiles: the big tile wins (8192^3 1.05, 4096x6144 1.02-1.05,
                    # 1024x28672 1.05); the last wave's quantization costs < 1/4 wave there
BIG_FILL = 0.84     # ... or fewer waves but a last wave >= 84% full (1024x4096: 128 tiles, 0.96-1.01; 128x28672:
                    # 112 tiles = 0.848 of a wave, 1.68 with the big tile; at 0.85 it fell through to the last-wave
                    # split: 80.3 vs 64.1 us, run 20261202T133953Z)
SMALL_GRID = 0.5    # 128x128 tiles filling < half the SMs, long K: split K (1024x1024x32768: split 2, 0.99 vs
                    # 0.66 unsplit); K needs >= SPLIT_MIN_KSTEPS k-steps per slice
SPLIT_MIN_KSTEPS = 16
LAST_WAVE_KSTEPS = 48  # split the last wave only with >= 48 k-steps (2500x1736x4104: split 4 of the last wave
                       # 0.56 vs 0.49 whole; 1000x3000x2000, 32 k-steps: 0.64 vs 0.78 for 128x256 whole)
LAST_WAVE_FILL = 0.75  # ... where 128x128 tiles fill >= 1 wave but leave the LAST wave under 3/4 full (the sweep's rule)
SK_TAIL = 0.1       # gluon-ws: more than one wave of 128x256 tiles whose last wave holds <= 10% of the SMs: stream-K
                    # over that thin wave (GemmConfig(stream_k=1): its tiles' k-steps spread over every CTA).
                    # 2500x1736x4104 and 777x5000x1000 (140 tiles = one wave + 8): 0.720 vs 0.640 and 0.568 vs
                    # 0.553 for the rules below (three interleaved rounds each, results/h200/gemm-probe-skprobe.log);
                    # stream-K lost everywhere else it was tried (notebook 04, "Stream-K")
MID_N_FILL = 0.6    # 64 < M <= 256: 64x128 tiles unless they fill < 60% of the SMs, then 64x64 (128x4096x4096:
                    # 64x64 0.94 vs 64x128 0.82; 128x8192x8192: 64x128 0.96 vs 64x64 0.78)
SKINNY_BIG_FILL = 0.8  # ... unless 64 < M <= 256 and 128x256 tiles give >= 80% of a wave: then the large-M wave rules
                       # below decide (128x28672 reaches the big tile there: 1.68-1.70; at M = 64 half its rows are
                       # padding: 64x28672 128x256 0.95 vs 64x128 1.06, so M <= 64 always takes the skinny rules)


def shape_pick(M: int, N: int, K: int, ws: bool, sms: int = H200_SMS) -> "GemmConfig":
    """GemmConfig.heuristic's shape rules (module constants above carry each threshold's reason)."""
    big = cdiv(M, 128) * cdiv(N, 256)
    k_steps = cdiv(K, 64)
    if M <= 64 or (M <= 256 and big < SKINNY_BIG_FILL * sms):
        if not ws:  # tiles only: M <= 64 64x128 s5 (0.83 / 0.63 / 0.99 at M = 16 / 32 / 64); M <= 256 128x64 s6
            return GemmConfig(BM=64, BN=128, num_warps=4, num_stages=5) if M <= 64 else \
                GemmConfig(BM=128, BN=64, num_warps=4, num_stages=6)
        return _skinny_ws(M, N, K, sms)
    if big >= BIG_WAVES * sms or wave_fill(big, sms) >= BIG_FILL:
        return GemmConfig()
    mid = cdiv(M, 128) * cdiv(N, 128)
    if ws and big > sms and big % sms <= SK_TAIL * sms:
        return GemmConfig(stream_k=1)
    if not ws:  # gluon-pipelined: 64x128 s5 when 128x256 tiles fill under half the SMs (1024x1024x32768: 0.86)
        return GemmConfig(BM=64, BN=128, num_warps=4, num_stages=5) if big < SMALL_GRID * sms else GemmConfig()
    if mid < SMALL_GRID * sms and k_steps >= 2 * SPLIT_MIN_KSTEPS:
        split = max(2, min(sms // mid, k_steps // SPLIT_MIN_KSTEPS, MAX_SPLIT_K))
        return GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=split)
    if mid >= sms and 0 < mid % sms < LAST_WAVE_FILL * sms and k_steps >= LAST_WAVE_KSTEPS:
        return GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=4, split_last_wave=True)
    if wave_fill(mid, sms) > wave_fill(big, sms):  # 1024x6144x4096: 128x128 8w s5 0.99 vs 128x256 0.80
        return GemmConfig(BN=128, num_warps=8, num_stages=5)
    return GemmConfig()  # ties keep the big tile (1000x3000x2000: 0.78 vs 0.57-0.62 for 128x128)


def _skinny_ws(M: int, N: int, K: int, sms: int) -> "GemmConfig":
    """gluon-ws at M <= 256 (decode and small-batch projections): the B stream bounds these shapes."""
    if M <= 32:  # swap-AB: N fills the wgmma M side, M pads only to 16 / 32 (16x6144x4096: 0.91; 32x4096x14336: 0.74)
        # and split K while the tiles leave SMs idle: the B stream needs every SM (results/h200/gemm-probe.log,
        # ci/gemm_probe.py: 32x4096x14336 swap 32x128 split 4 33.5 us vs 46.4 unsplit, cuBLAS 32.9;
        # 16x6144x4096 split 2 17.6 vs 18.2, cuBLAS 16.1)
        tiles, split = cdiv(N, 128), 1
        while split < 8 and tiles * split * 2 <= sms and cdiv(K, 64) // (split * 2) >= SPLIT_MIN_KSTEPS:
            split *= 2
        return GemmConfig(BM=16 if M <= 16 else 32, BN=128, num_warps=4, num_stages=6, swap_ab=True, split_k=split)
    if M <= 64:  # 64x28672x4096: 64x256 ping-pong 1.07 / 1.02 in runs 20261202T054108Z / 061301Z (64x128 s6 1.06 /
        # 0.98, swap 64x128 1.03 / 0.87): the widest B rows per CTA, 128 accumulators per consumer thread
        return GemmConfig(BM=64, BN=256, num_warps=4, num_stages=4, pingpong=True)
    if cdiv(M, 64) * cdiv(N, 128) >= MID_N_FILL * sms:
        return GemmConfig(BM=64, BN=128, num_warps=4, num_stages=6)
    return GemmConfig(BM=64, BN=64, num_warps=4, num_stages=8)


def _layouts(cfg: GemmConfig, dtype: str):
    gdt = GL_DTYPE[dtype]
    return (gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BK], gdt),
            gl.NVMMASharedLayout.get_default_for([cfg.BK, cfg.BN], gdt),
            gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], gdt))


def check(a, b) -> None:
    """ValueError / TypeError naming the argument and the rule."""
    import torch
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D for variant 'gluon-pipelined'; got shape {tuple(t.shape)}")
        if t.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"{name}.dtype must be torch.bfloat16 or torch.float16 for variant 'gluon-pipelined'; "
                            f"got {t.dtype}")
        if t.stride(1) != 1:
            raise ValueError(f"{name} must be row-major with unit last stride for TMA; got strides {tuple(t.stride())}")
        if (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            raise ValueError(f"{name}'s rows must start on 16-byte boundaries for TMA (row stride {t.stride(0)} "
                             f"elements x {t.element_size()} B, address % 16 = {t.data_ptr() % 16}); "
                             f"pad the row length to a multiple of {16 // t.element_size()}")
    if a.dtype != b.dtype:
        raise TypeError(f"b.dtype must equal a.dtype ({a.dtype}); got {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a.shape[1] (K = {a.shape[1]}) must equal b.shape[0] ({b.shape[0]})")
    if a.shape[1] == 0:
        raise ValueError("a.shape[1] (K) must be >= 1 for the Gluon GEMMs (K = 0 is an empty sum: use torch.matmul)")
    if a.device != b.device:
        raise ValueError(f"a and b must be on the same device; got {a.device} and {b.device}")


def prepare(a, b, out=None, config: GemmConfig | None = None, ws: bool = False):
    """Checks, config, output and TMA descriptors shared by every persistent GEMM launcher:
    returns (c, (a_desc, b_desc, c_desc), M, N, K, cfg, grid)."""
    import torch
    check(a, b)
    M, K = a.shape
    N = b.shape[1]
    dtype = dtype_name(a)
    # the heuristic's SM count is H200_SMS (hopper.py: the grids use the device's own), the same number
    # registry.resolve uses for a record's config: a launch runs the config its records and votes name
    cfg = (config or GemmConfig.heuristic(M, N, dtype, K=K, ws=ws)).validate(dtype)
    c = torch.empty((M, N), dtype=a.dtype, device=a.device) if out is None else out
    if (N * a.element_size()) % 16:
        raise ValueError(f"N * itemsize must be a multiple of 16 bytes (C's rows are TMA-stored); got N={N}")
    if cfg.pad_rows:  # the padded-copy producer: A and B rows copied onto 128-byte lines first (one launch)
        a, b = pad_rows(a, b)
    la, lb, lc = _layouts(cfg, dtype)
    descs = (descriptor(a, [cfg.BM, cfg.BK], la), descriptor(b, [cfg.BK, cfg.BN], lb), descriptor(c, [cfg.BM, cfg.BN], lc))
    n_tiles = cdiv(M, cfg.BM) * cdiv(N, cfg.BN)
    return c, descs, M, N, K, cfg, (max(1, min(n_tiles, num_sms(a.device))), )


def _pipelined_only(cfg: GemmConfig | None) -> None:
    if cfg is not None and (cfg.pingpong or cfg.split_k > 1 or cfg.swap_ab or cfg.cp_async or cfg.stream_k):
        raise ValueError("GemmConfig(pingpong=True), GemmConfig(split_k > 1), GemmConfig(swap_ab=True), "
                         "GemmConfig(cp_async=True) and GemmConfig(stream_k > 0) are gluon-ws schedules; gluon-pipelined "
                         "runs none of them (use variant='gluon-ws')")


def launch(a, b, out=None, config: GemmConfig | None = None):
    _pipelined_only(config)
    c, descs, M, N, K, cfg, grid = prepare(a, b, out, config)
    persistent_gemm_kernel[grid](*descs, M, N, K, NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
                                 num_warps=cfg.num_warps)
    return c


def codegen_args(cfg: GemmConfig, dtype: str, shape: dict | None = None) -> tuple:
    """(args, constexprs) of kernel_spec for a persistent GEMM launch: M, N, K as the runtime
    specializes them when the shape is given, plain i32 otherwise."""
    la, lb, lc = _layouts(cfg, dtype)
    args = {"a_desc": desc_type(dtype, [cfg.BM, cfg.BK], la), "b_desc": desc_type(dtype, [cfg.BK, cfg.BN], lb),
            "c_desc": desc_type(dtype, [cfg.BM, cfg.BN], lc),
            **{d: (shape[d] if shape else "i32") for d in ("M", "N", "K")}}
    return args, {"NUM_STAGES": cfg.num_stages, "GROUP_M": cfg.group_m, "num_warps": cfg.num_warps}


def codegen_spec(cfg: GemmConfig | None = None, dtype: str = "bfloat16", shape: dict | None = None):
    """compile_sm90 arguments reproducing what launch() JITs (shape: {"M", "N", "K"}, optional)."""
    cfg = (cfg or GemmConfig()).validate(dtype)
    _pipelined_only(cfg)
    args, ce = codegen_args(cfg, dtype, shape)
    return kernel_spec(persistent_gemm_kernel, args, ce, num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# registration: matmul gluon-pipelined (the norms' gluon-pipelined is in pipelined.py)

KNOBS = {"BM": (128, ), "BN": (128, 256), "BK": (32, 64), "num_warps": (4, 8), "num_stages": (2, 3, 4, 5),
         "group_m": (8, )}  # the 03 gemm-sweep's tiles x ring depths (experiments.PipelinedPlan)


def _configure(shape: dict, dtype: str, overrides: dict, ws: bool = False) -> GemmConfig:
    cfg = GemmConfig.heuristic(shape["M"], shape["N"], dtype, K=shape.get("K"), ws=ws, **overrides).validate(dtype)
    if not ws:
        _pipelined_only(cfg)
    return cfg


def register_matmul(variant: str, *, pattern: str, launch, codegen_spec, knobs: dict, roots, description: str,
                    ws: bool = False):
    """Register a persistent GEMM for matmul (shared by gluon-pipelined and gluon-ws; ws: the
    heuristic may pick the warp-specialized schedules)."""
    import functools

    from ..registry import register
    configure = functools.partial(_configure, ws=ws)

    def codegen(shape: dict, dtype: str, config: GemmConfig | None = None):
        return codegen_spec(config or configure(shape, dtype, {}), dtype, shape)

    def fn(a, b, out=None, config=None):
        return launch(a, b, out=out, config=config)

    fn.__name__ = fn.__qualname__ = f"matmul_{variant.replace('-', '_')}"
    register("matmul", variant, pattern=pattern, needs_hopper=True, check=check, configure=configure, codegen=codegen,
             knobs=knobs, roots=(launch, prepare, GemmConfig, shape_pick, _skinny_ws, *roots),
             description=description)(fn)


register_matmul("gluon-pipelined", pattern="pipelined", launch=launch, codegen_spec=codegen_spec, knobs=KNOBS,
                roots=(persistent_gemm_kernel, pad_copy_kernel, pad_rows),
                description="persistent TMA + wgmma GEMM: NUM_STAGES ring across tiles, grouped order, TMA-store "
                            "epilogue")
