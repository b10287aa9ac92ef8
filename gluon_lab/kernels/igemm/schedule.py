"""Schedules of the implicit-GEMM template: which CTA runs which output tile and which of its k-steps.

A schedule is independent of how the operands arrive (producers.py) and of what the tile becomes
(epilogues.py): it sees a grid of num_pid_m x num_pid_n output tiles of k_tiles k-steps each, and the
persistent grid (program `start` of `nprog`). GEMM (M / BM row tiles), conv fprop and dgrad (spatial
patches of TH x TW output pixels) and wgrad all describe their problem this way, so each of them can run
every schedule:

* persistent data-parallel: program p owns tiles p, p + nprog, ... in GROUP_M-grouped order (tile_coords);
* split-K: tiles FULL_TILES .. as SPLIT_K balanced K-slices (FULL_TILES = 0: every tile);
* last-wave split: the same with FULL_TILES = the whole waves, so only the last, partial wave is split;
* stream-K: the tiles from FULL_TILES on are one list of k-steps cut into nprog balanced shares
  (sk_range), each cut again at tile boundaries into pieces (unit).

Device side: tile_coords, tile_space, units_of, unit_space, unit, sk_range, sk_owner (gluon.jit, inlined).
Host side: the same plans on ints (splitk_plan, streamk_plan, streamk_max_pieces, wave_fill), so the
launcher sizes the grid and the fp32 workspace the way the kernel walks it.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..hopper import H200_SMS, cdiv


@gluon.jit
def tile_coords(t, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """Tile t -> (pid_m, pid_n) in grouped order: GROUP_M consecutive row-tiles per column band."""
    group = GROUP_M * num_pid_n
    gid = t // group
    first_m = gid * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (t % group) % size_m
    pid_n = (t % group) // size_m
    return pid_m, pid_n


@gluon.jit
def tile_space(M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """This program's share of the persistent tile loop: (start, nprog, num_pid_m, num_pid_n,
    k_tiles, my_tiles) — program `start` owns tiles start, start + nprog, ..."""
    start = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    my_tiles = (num_pid_m * num_pid_n - start + nprog - 1) // nprog
    return start, nprog, num_pid_m, num_pid_n, gl.cdiv(K, BK), my_tiles


@gluon.jit
def sk_range(c, S, nprog):
    """Stream-K: CTA c's share [a, b) of the S stream-K k-steps, balanced (q or q + 1 each, the first S % nprog
    CTAs one more), written without the product c * S (no int32 overflow on long work lists)."""
    q = S // nprog
    r = S % nprog
    a = c * q + gl.minimum(c, r)
    b = a + q + (c < r).to(gl.int32)
    return a, b


@gluon.jit
def sk_owner(x, S, nprog):
    """Stream-K: the CTA whose share [a, b) (sk_range) holds k-step x. With fewer k-steps than CTAs (q = 0, a
    whole-wave grid over a short stream-K list) every x < r = S: the branch dividing by q is not taken."""
    q = S // nprog
    r = S % nprog
    head = r * (q + 1)
    c = x // (q + 1)
    if x >= head:
        c = r + (x - head) // q
    return c


@gluon.jit
def units_of(start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles, FULL_TILES, SPLIT_K: gl.constexpr,
             STREAM_K: gl.constexpr = False):
    """How many work units (unit) program `start` runs: its whole tiles (my_tiles, data-parallel), or under
    SPLIT_K its share of FULL_TILES whole tiles + SPLIT_K slices of each later tile, or under STREAM_K its
    FULL_TILES // nprog whole tiles + the pieces its stream-K share is cut into at tile boundaries."""
    if STREAM_K:
        a, b = sk_range(start, (num_pid_m * num_pid_n - FULL_TILES) * k_tiles, nprog)
        pieces = gl.where(b > a, (b - 1) // k_tiles - a // k_tiles + 1, 0)
        return FULL_TILES // nprog + pieces
    if SPLIT_K == 1:
        return my_tiles
    units = FULL_TILES + (num_pid_m * num_pid_n - FULL_TILES) * SPLIT_K
    return (units - start + nprog - 1) // nprog


@gluon.jit
def unit_space(M, N, K, FULL_TILES, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, SPLIT_K: gl.constexpr,
               STREAM_K: gl.constexpr = False):
    """tile_space over work units (units_of) for a GEMM-shaped problem (M x N tiles of BM x BN, K / BK
    k-steps): (start, nprog, num_pid_m, num_pid_n, k_tiles, my_units)."""
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = tile_space(M, N, K, BM, BN, BK)
    my_units = units_of(start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles, FULL_TILES, SPLIT_K, STREAM_K)
    return start, nprog, num_pid_m, num_pid_n, k_tiles, my_units


@gluon.jit
def unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
         STREAM_K: gl.constexpr = False):
    """This CTA's i-th work unit -> (pid_m, pid_n, k0, k1, sl, tile): its tile and its k-steps [k0, k1); sl 0 =
    the whole tile (stored to C). Split-K (unit u = start + i * nprog): sl >= 1 = K-slice sl - 1 of the
    balanced split (sl - 1) * k_tiles // SPLIT_K (non-empty for every slice: the host checks SPLIT_K <=
    k_tiles). Stream-K: units i < FULL_TILES // nprog are whole tiles start + i * nprog; then piece j of the
    share [a, b): tile t = a // k_tiles + j of the stream-K list, k-steps [max(a, t k), min(b, (t + 1) k)) - t k;
    a piece that is not the whole tile has sl = its workspace block + 1, block start + t (unique per piece:
    CTA and tile both advance with the k-step, so (c, t) != (c', t') with c + t = c' + t')."""
    tile = start + i * nprog
    sl = i * 0
    k0 = i * 0
    k1 = k_tiles
    if STREAM_K:
        my_dp = FULL_TILES // nprog
        if i >= my_dp:
            a, b = sk_range(start, (num_pid_m * num_pid_n - FULL_TILES) * k_tiles, nprog)
            t = a // k_tiles + (i - my_dp)
            k0 = gl.maximum(a, t * k_tiles) - t * k_tiles
            k1 = gl.minimum(b, (t + 1) * k_tiles) - t * k_tiles
            tile = FULL_TILES + t
            if (k0 > 0) | (k1 < k_tiles):
                sl = start + t + 1
    elif SPLIT_K > 1:
        u = start + i * nprog
        if u >= FULL_TILES:
            v = u - FULL_TILES
            tile = FULL_TILES + v // SPLIT_K
            sl = v % SPLIT_K + 1
            k0 = (sl - 1) * k_tiles // SPLIT_K
            k1 = sl * k_tiles // SPLIT_K
    pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    return pid_m, pid_n, k0, k1, sl, tile


# ---- host side -----------------------------------------------------------------------------------

def wave_fill(tiles: int, sms: int = H200_SMS) -> float:
    """Wave-quantization efficiency of a persistent grid: tiles / (whole waves x SMs)."""
    return tiles / (cdiv(tiles, sms) * sms)


def splitk_plan(tiles: int, split_k: int, last_wave: bool, sms: int) -> tuple[int, int]:
    """(FULL_TILES, units): whole tiles first, then split_k slices of each later tile. last_wave: the whole
    waves stay whole (FULL_TILES = tiles // sms * sms) and only the last, partial wave is split; otherwise
    every tile is split (FULL_TILES = 0)."""
    full = tiles // sms * sms if last_wave else 0
    return full, full + (tiles - full) * split_k


def streamk_plan(tiles: int, k_tiles: int, waves: int, sms: int) -> tuple[int, int, int]:
    """(FULL_TILES, grid, stream-K tiles) of a stream-K schedule over `waves` waves: the last `waves` waves of
    tiles (the partial one counted) form the stream-K list, the waves before it stay data-parallel
    (FULL_TILES, a multiple of the grid); the grid is every SM, or the k-steps of the list where they are
    fewer (each share >= 1)."""
    full = max(0, cdiv(tiles, sms) - waves) * sms
    grid = sms if full else min(sms, tiles * k_tiles)
    return full, grid, tiles - full


def streamk_max_pieces(k_tiles: int, S: int, grid: int) -> int:
    """The most shares (sk_range) one tile's k_tiles consecutive k-steps can meet: each share holds >= q = S //
    grid of them, so at most 1 + ceil((k_tiles - 1) / q); one k-step per share or fewer (q <= 1): k_tiles."""
    q = S // grid
    return k_tiles if q <= 1 else min(k_tiles, 1 + cdiv(k_tiles - 1, q))
