"""gluon-chunked on the CPU: the chunk plan for every N of issue #4, the sm_90 code (one TMA box
per chunk, zero-filled tail handled by masks), and the refusal messages."""
import pytest
import torch

from gluon_lab import codegen, specs
from gluon_lab.kernels import chunked as C

ISSUE_NS = (1536, 2560, 2880, 3584, 5120, 6144, 7168, 12288, 14336, 18432, 20480, 24576)
EDGE_NS = (8, 24, 1000, 4104)
OPS = tuple(s.name for s in specs.family("row_norm"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("N", ISSUE_NS + EDGE_NS)
def test_chunk_plan(N, dtype):
    p = C.ChunkPlan.for_row("rms_norm", N, dtype)
    vec = 16 // C.ITEMSIZE[dtype]
    assert p.chunk == vec * 32 * p.num_warps and p.chunk & (p.chunk - 1) == 0
    assert p.num_chunks == -(-N // p.chunk) and 0 < p.tail <= p.chunk
    assert (p.num_chunks - 1) * p.chunk + p.tail == N
    if not p.streaming:  # exactly num_chunks chunks of `rows` rows: no power-of-2 rounding of the buffer
        assert p.smem_bytes == p.num_chunks * p.rows * p.chunk * C.ITEMSIZE[dtype] + C.SMEM_RESERVE \
            <= C.CACHED_SMEM_LIMIT
        assert p.rows == (2 if N * C.ITEMSIZE[dtype] <= 8192 else 1)
    if N >= vec * 32 * 4:  # rows of a few register tiles: the padding stays small
        assert p.waste_pct <= 12.5


def test_chunk_plan_examples():
    p = C.ChunkPlan.for_row("rms_norm", 5120, "bfloat16")
    assert (p.num_warps, p.chunk, p.num_chunks, p.tail, p.waste_pct) == (4, 1024, 5, 1024, 0.0)
    p = C.ChunkPlan.for_row("rms_norm", 2880, "bfloat16")
    assert (p.chunk, p.num_chunks, p.tail) == (1024, 3, 832)
    assert C.ChunkPlan.for_row("add_rms_norm", 12288, "bfloat16").smem_bytes > \
        C.ChunkPlan.for_row("rms_norm", 12288, "bfloat16").smem_bytes


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1000, 2880, 4104, 5120, 14336])  # 1000, 4104: not multiples of 16
def test_census_one_box_per_chunk(op, N):
    p = C.ChunkPlan.for_row(op, N, "bfloat16")
    _, c = codegen.inspect_variant(op, "gluon-chunked", N=N, dtype="bfloat16")
    row = specs.get(op).row
    n_in = 1 + row.residual
    # a [1, CHUNK] logical copy per chunk, split in [1, 256] boxes over the warps
    assert c["tma_boxes"][0]["block_size"] == [p.rows, 256] and c["sass"]["UTMALDG"] >= n_in * p.num_chunks
    assert c["mbarrier_expect_tx"] == 1 and c["mbarrier_wait"] >= 1
    assert c["ld_global"] == (row.weight + row.bias) * p.num_chunks  # x only through TMA; weight/bias per chunk
    # lengths passed in 16-byte vectors: masked stores and weight loads stay 128-bit for any N
    assert set(c["ld_global_by_bits"]) <= {128} and set(c["st_global_by_bits"]) == {128}
    assert c["spill_bytes"] == 0 and c["smem_bytes"] <= p.smem_bytes


def cpu(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


def test_refuses_rows_that_are_not_16_byte_multiples():
    with pytest.raises(ValueError, match=r"N \* itemsize to be a multiple of 16 bytes.*N=1001"):
        C.check("rms_norm", cpu(4, 1001), cpu(1001))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_long_rows_stream_through_a_ring(op, dtype):
    N = 131072
    p = C.ChunkPlan.for_row(op, N, dtype)
    assert p.streaming and p.stages == C.STREAM_STAGES and p.num_chunks == N // p.chunk
    _, c = codegen.inspect_variant(op, "gluon-chunked", N=N, dtype=dtype)
    row = specs.get(op).row
    n_in = 1 + row.residual
    # S-1 prologue copies + one refill per pass, each one expect (count-1 barriers, one per slot)
    assert c["mbarrier_init"] == C.STREAM_STAGES and c["mbarrier_expect_tx"] == C.STREAM_STAGES + 1
    assert c["tma_load"] == n_in * (C.STREAM_STAGES + 1)
    # one wait per pass; centered stats wait for chunk 0 once more up front (their shift K, see the kernel)
    assert c["mbarrier_wait"] == (3 if row.centered else 2)
    assert c["smem_bytes"] <= C.STREAM_STAGES * p.chunk * C.ITEMSIZE[dtype] * n_in + C.SMEM_RESERVE
    assert c["spill_bytes"] == 0


def test_cached_until_the_smem_budget_then_streaming():
    assert not C.ChunkPlan.for_row("rms_norm", 24576, "bfloat16").streaming
    assert not C.ChunkPlan.for_row("rms_norm", 32768, "bfloat16").streaming
    assert not C.ChunkPlan.for_row("rms_norm", 40960, "bfloat16").streaming  # 80 KB: exactly 20 chunks
    assert C.ChunkPlan.for_row("rms_norm", 53248, "bfloat16").streaming  # 104 KB > CACHED_SMEM_LIMIT
    assert C.ChunkPlan.for_row("add_rms_norm", 24576, "float32").streaming


def test_refuses_misaligned_row_stride():
    with pytest.raises(ValueError, match="row stride must be a multiple of 16 bytes"):
        C.check("rms_norm", cpu(8, 5124)[:, :5120], cpu(5120))


def test_registered_for_every_row_norm_and_the_group_ops():
    from gluon_lab import registry
    for op in OPS:
        v = registry.get_variant(op, "gluon-chunked")
        assert v.pattern == "chunked" and v.needs_hopper and set(v.knobs) <= set(C.PLAN_KNOBS)
        plan = v.resolve({"M": 16384, "N": 5120}, "bfloat16", {"num_warps": 8, "study": "chunk"})
        assert isinstance(plan, C.ChunkPlan) and plan.num_warps == 8
    for op in ("group_norm", "instance_norm"):
        v = registry.get_variant(op, "gluon-chunked")
        plan = v.resolve({"B": 2, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "nchw"}, "bfloat16", {"cached": False})
        assert isinstance(plan, C.GroupPlan) and not plan.cached
        cl = v.resolve({"B": 2, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "channels_last"}, "bfloat16", {})
        # channels-last boxes start at the 16-byte vector holding the group's first channel: Cg + VEC - 1
        # columns at most (Cg = 10 bf16 -> 17 -> 32)
        assert cl.box_cols == 32


@pytest.mark.parametrize("op,shape,cached", [
    ("group_norm", {"B": 8, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "nchw"}, True),
    ("group_norm", {"B": 8, "C": 640, "H": 64, "W": 64, "G": 32, "layout": "nchw"}, False),
    ("instance_norm", {"B": 8, "C": 320, "H": 128, "W": 128, "layout": "nchw"}, True)], ids=str)
def test_group_census(op, shape, cached):
    """NCHW groups: x only through TMA ([1, CHUNK] boxes, one expect per fill), per-row weight/bias
    scalars, 128-bit stores, no spills; a cached group waits for each box once, a streamed one twice."""
    _, c = codegen.inspect_variant(op, "gluon-chunked", shape=shape, dtype="bfloat16")
    from gluon_lab import registry
    plan = registry.get_variant(op, "gluon-chunked").resolve(shape, "bfloat16")
    assert plan.cached == cached and c["tma_boxes"] == [{"block_size": [1, 256], "swizzle": 0}]  # boxes split at 256
    assert c["mbarrier_init"] == plan.slots and c["ld_global"] == 2  # the channel's weight and bias
    assert set(c["st_global_by_bits"]) == {128} and c["spill_bytes"] == 0
    assert c["smem_bytes"] <= plan.smem_bytes


# ---- gluon-split (GroupNorm / InstanceNorm split across CTAs) ------------------------------------

SPLIT_CASES = [("nchw", 1, 320, 64 * 64, 32, "bfloat16"), ("nchw", 16, 1280, 32 * 32, 32, "bfloat16"),
               ("channels_last", 1, 320, 64 * 64, 32, "bfloat16"), ("channels_last", 8, 1280, 16 * 16, 1280, "float32"),
               ("channels_last", 2, 48, 56, 8, "float16"), ("nchw", 3, 24, 72, 8, "float32")]


@pytest.mark.parametrize("layout,B,Cc,S,G,dtype", SPLIT_CASES)
def test_split_plan_covers_each_group_once(layout, B, Cc, S, G, dtype):
    p = C.SplitPlan.make(layout, B, Cc, S, G, dtype)
    v = 16 // C.ITEMSIZE[dtype]
    length, unit = (S, p.tile_rows) if layout == "channels_last" else (Cc // G * S, p.tile_rows * v)
    assert p.span % unit == 0 and (p.K - 1) * p.span < length <= p.K * p.span  # K slices, none empty
    assert p.tile_rows * p.col_block * C.ITEMSIZE[dtype] == C.SPLIT_TILE_BYTES or layout == "channels_last"
    if layout == "channels_last":
        assert p.col_blocks * p.col_block >= Cc and p.col_block % v == 0
        assert p.col_blocks * p.col_block - Cc <= 0.125 * p.col_blocks * p.col_block or p.col_block == v
    outer = B * (p.col_blocks if layout == "channels_last" else G)
    assert p.ctas == p.K * outer
    # few groups get sliced until the GPU has ~SPLIT_CTAS_PER_SM CTAs per SM (as far as the group allows)
    assert p.K == -(-length // unit) or p.ctas >= C.SPLIT_CTAS_PER_SM * C.H200_SMS // 2
    for k in (1, 3):
        q = C.SplitPlan.make(layout, B, Cc, S, G, dtype, slices=k)
        assert q.K == min(k, -(-length // unit))


@pytest.mark.parametrize("layout,B,Cc,S,G,dtype", SPLIT_CASES[:4])
def test_split_census_128_bit_tiles_no_spills(layout, B, Cc, S, G, dtype):
    """The three launches compile for sm_90: x read and y written only by 128-bit accesses (the
    stats kernel's partial stores and the apply kernel's weight gathers are the narrow ones), one
    CTA-wide reduction in stats (2 x a few bar.sync), none in apply."""
    p = C.SplitPlan.make(layout, B, Cc, S, G, dtype)
    stats, fin, apply = [codegen.census(codegen.compile_sm90(**s)) for s in C.split_codegen_specs(p, B, Cc, S, G)]
    for c in (stats, fin, apply):
        assert c["ld_local"] == c["st_local"] == 0 and c["spill_bytes"] == 0
    assert stats["ld_global_by_bits"] == {128: 4}  # the shift tile and the loop's tile (x UNROLL)
    assert stats["tma_load"] == apply["tma_load"] == 0
    assert apply["st_global_by_bits"] == {128: 2} and apply["ld_global_by_bits"][128] >= 2
    assert apply["bar_sync"] == 0 and stats["bar_sync"] > 0


def test_split_registered_and_refusals():
    import gluon_lab as gll
    from gluon_lab import registry
    for op in ("group_norm", "instance_norm"):
        v = registry.get_variant(op, "gluon-split")
        assert v.pattern == "chunked" and v.needs_hopper and v.supports_out
        p = v.resolve({"B": 2, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "channels_last"}, "bfloat16",
                      {"slices": 4})
        assert isinstance(p, C.SplitPlan) and p.K == 4 and p.layout == "channels_last"
    x = torch.randn(2, 64, 5, 5, dtype=torch.bfloat16)  # S = 25: 50 B rows
    with pytest.raises(ValueError, match=r"gluon-split.*prod\(spatial\).*multiple of 16 bytes"):
        C.check_split(x, 8, None, None)
    xc = torch.randn(2, 12, 4, 4, dtype=torch.bfloat16).to(memory_format=torch.channels_last)  # 24 B rows
    with pytest.raises(ValueError, match=r"gluon-split.*C \(channels-last rows.*multiple of 16 bytes"):
        C.check_split(xc, 4, None, None)
    with pytest.raises(ValueError, match="contiguous"):
        C.check_split(torch.randn(2, 64, 8, 8).transpose(2, 3), 8, None, None)
    w = torch.randn(128)[::2]
    with pytest.raises(ValueError, match="weight must be contiguous"):
        C.check_split(torch.randn(2, 64, 8, 8), 8, w, None)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape", [{"B": 16, "C": 1280, "H": 16, "W": 16, "layout": "nchw"},
                                   {"B": 2, "C": 320, "H": 64, "W": 64, "layout": "nchw"},
                                   {"B": 2, "C": 64, "H": 33, "W": 8, "G": 32, "layout": "nchw"}], ids=str)
def test_packed_groups_census(shape, dtype):
    """NCHW groups of <= PACK_MAX_ELEMS elements: several whole groups per CTA in one register tile, x and
    y by 128-bit accesses only, no TMA, no shared-memory buffer, no spills; InstanceNorm loads its
    weight per row (Cg = 1), GroupNorm per element (channel = g * Cg + col // S)."""
    from gluon_lab import registry
    op = "group_norm" if "G" in shape else "instance_norm"
    plan = registry.get_variant(op, "gluon-chunked").resolve(shape, dtype)
    Lg = (shape["C"] // shape.get("G", shape["C"])) * shape["H"] * shape["W"]
    assert plan.packed and plan.pack_cols == 1 << (Lg - 1).bit_length()
    assert plan.pack_rows * plan.pack_cols >= C.PACK_TILE or plan.pack_rows == 8
    _, c = codegen.inspect_variant(op, "gluon-chunked", shape=shape, dtype=dtype)
    assert c["tma_load"] == 0 and c["mbarrier_init"] == 0 and set(c["st_global_by_bits"]) == {128}
    assert c["ld_global_by_bits"][128] > 0 and c["spill_bytes"] == 0 and c["ld_local"] == 0
    assert not registry.get_variant(op, "gluon-chunked").resolve(shape, dtype, {"packed": False}).packed
