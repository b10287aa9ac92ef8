"""gluon-pipelined matmul on the CPU: compiles for sm_90 and shows what the pattern promises
(TMA loads into a NUM_STAGES ring, wgmma, a TMA-store epilogue, no spills); config and input rules."""
import dataclasses

import pytest
import torch

from gluon_lab import codegen
from gluon_lab.kernels import gemm as G


@pytest.mark.parametrize("cfg", [G.GemmConfig(), G.GemmConfig(BN=128, num_stages=4, num_warps=4),
                                 G.GemmConfig(num_stages=2), G.GemmConfig(BM=64, BN=128, num_stages=5, num_warps=4)],
                         ids=str)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_census(cfg, dtype):
    k = codegen.compile_sm90(**G.codegen_spec(cfg, dtype))
    c = codegen.census(k)
    # one A box + one B box per k-step issue site (prologue unrolled NUM_STAGES-1 times + the loop's refill);
    # boxes wider than the 128-byte swizzle (BN=256 bf16 -> 2 x 64-wide... ) split into several UTMALDG
    assert c["sass"]["UTMALDG"] >= 2 * cfg.num_stages
    assert c["tma_store"] == 1 and c["sass"].get("UTMASTG", 0) >= 1
    assert c["sass"].get("HGMMA", 0) >= cfg.BK // 16  # BK/16 wgmma k-slices per step
    assert c["mbarrier_wait"] == 1 and c["mbarrier_init"] == cfg.num_stages
    assert c["spill_bytes"] == 0
    assert c["smem_bytes"] <= cfg.smem_bytes(dtype)


def test_config_rules():
    with pytest.raises(ValueError, match="power of two"):
        G.GemmConfig(BN=96).validate()
    with pytest.raises(ValueError, match="shared memory"):
        G.GemmConfig(num_stages=5).validate()
    with pytest.raises(ValueError, match="BN must be <= 256"):
        G.GemmConfig(BN=512).validate()
    assert G.GemmConfig.heuristic(8192, 8192) == G.GemmConfig()
    assert G.GemmConfig.heuristic(1024, 1024).BN == 128
    assert G.GemmConfig.heuristic(8192, 8192, num_stages=4).num_stages == 4


def test_input_rules():
    a = torch.randn(16, 32, dtype=torch.bfloat16)
    b = torch.randn(32, 16, dtype=torch.bfloat16)
    G.check(a, b)
    with pytest.raises(TypeError, match="bfloat16 or torch.float16"):
        G.check(a.float(), b.float())
    with pytest.raises(ValueError, match=r"a.shape\[1\] \(K = 32\) must equal b.shape\[0\] \(16\)"):
        G.check(a, b[:16])
    with pytest.raises(ValueError, match="16-byte boundaries"):
        G.check(torch.randn(16, 17, dtype=torch.bfloat16), torch.randn(17, 16, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="unit last stride"):
        G.check(a, torch.randn(16, 32, dtype=torch.bfloat16).t())
    with pytest.raises(TypeError, match="b.dtype must equal a.dtype"):
        G.check(a, b.half())


def test_registered():
    from gluon_lab import registry
    assert {"triton", "gluon-pipelined"} <= set(registry.variants("matmul"))
    v = registry.get_variant("matmul", "gluon-pipelined")
    assert v.pattern == "pipelined" and v.resolve({"M": 8192, "N": 8192, "K": 8192}, "bfloat16") == G.GemmConfig()
    with pytest.raises(ValueError, match="shared memory"):  # sweeps skip configs that do not fit
        v.resolve({"M": 8192, "N": 8192, "K": 8192}, "bfloat16", {"num_stages": 5})


def test_heuristic_branches():
    """The GPU test's HEURISTIC_SHAPES reach every shape rule (one distinct gluon-ws pick each), each pick
    validates, gluon-pipelined never gets a WS-only schedule, and a tile override drops the shape's
    swap / split (an explicit tile is that tile)."""
    import dataclasses
    from test_gemm_gpu import HEURISTIC_SHAPES
    from gluon_lab.analysis.gemm import gemm_config_label
    ws = [G.GemmConfig.heuristic(M, N, K=K, ws=True).validate() for (M, N, K) in HEURISTIC_SHAPES]
    assert [gemm_config_label(dataclasses.asdict(c)) for c in ws] == [
        "16x128x64 4w s6 swap-AB split-K 2", "32x128x64 4w s6 swap-AB split-K 4", "16x128x64 4w s6 swap-AB",
        "64x256x64 4w s4 ping-pong", "64x64x64 4w s8", "64x128x64 4w s6", "128x256x64 8w s3",
        "128x128x64 4w s4 split-K 2", "128x128x64 4w s4 split-K 4 (last wave)", "128x128x64 8w s5", "128x256x64 8w s3",
        "128x256x64 8w s3 stream-K 1w"]
    for (M, N, K) in HEURISTIC_SHAPES:
        p = G.GemmConfig.heuristic(M, N, K=K).validate()
        assert not (p.swap_ab or p.pingpong or p.split_k > 1 or p.cp_async or p.stream_k), (M, N, K, p)
    over = G.GemmConfig.heuristic(16, 6144, K=4096, ws=True, BM=64, BN=128, num_warps=4, num_stages=6)
    assert not over.swap_ab and over.split_k == 1
    assert G.GemmConfig.heuristic(16, 6144, K=4096, ws=True, num_stages=4).swap_ab  # a ring-only override keeps the pick


def test_heuristic_picks_compile():
    """Every config the heuristic picks on the GPU test's shapes compiles for sm_90 without spills."""
    from test_gemm_gpu import HEURISTIC_SHAPES
    from gluon_lab.kernels import gemm_ws as W
    seen = set()
    for (M, N, K) in HEURISTIC_SHAPES:
        for ws in (True, False):
            cfg = G.GemmConfig.heuristic(M, N, K=K, ws=ws)
            if (cfg, ws) in seen:
                continue
            seen.add((cfg, ws))
            k = codegen.compile_sm90(**(W.codegen_spec(cfg) if ws else G.codegen_spec(cfg)))
            assert codegen.census(k)["spill_bytes"] == 0, (cfg, ws)


@pytest.mark.parametrize("cfg", [G.GemmConfig(cp_async=True, producer_regs=96),
                                 G.GemmConfig(BN=128, num_warps=8, num_stages=5, cp_async=True, producer_regs=152),
                                 G.GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=4, split_last_wave=True,
                                              cp_async=True, producer_regs=96),
                                 G.GemmConfig(BM=16, BN=128, num_warps=4, num_stages=6, swap_ab=True, cp_async=True,
                                              producer_regs=96)], ids=str)
def test_cp_async_producer_census(cfg):
    """GemmConfig(cp_async=True): no TMA load at all, 16-byte cp.async copies (one per 8 elements of a
    thread's share of the A and B boxes), zero-fill by src-size (the masked edges), the noinc mbarrier
    arrive that completes FULL, a proxy fence before the wgmma reads, the TMA-store epilogue, no spills."""
    import re
    from gluon_lab.kernels import gemm_ws as W
    k = codegen.compile_sm90(**W.codegen_spec(cfg.validate()))
    c, ptx = codegen.census(k), k.asm["ptx"]
    assert c["sass"].get("UTMALDG", 0) == 0 and c["sass"].get("LDGSTS", 0) >= 1
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[[^\]]+\], \[[^\]]+\], (0x10|16), %r\d+;", ptx)
    assert len(copies) == (cfg.BM * cfg.BK + cfg.BK * cfg.BN) // (8 * 128)  # 8 elements per copy, 128 threads
    assert ptx.count("cp.async.mbarrier.arrive.noinc") == 1
    assert "fence.proxy.async" in ptx and c["sass"].get("UTMASTG", 0) >= 1
    assert c["spill_bytes"] == 0


def test_cp_async_rules():
    from gluon_lab.kernels import gemm_ws as W
    with pytest.raises(ValueError, match="producer_regs >= 96"):
        G.GemmConfig(cp_async=True).validate()
    with pytest.raises(ValueError, match="producer_regs >= 152"):  # this tile's producer spills below 152
        G.GemmConfig(BN=128, num_warps=8, num_stages=5, cp_async=True, producer_regs=128).validate()
    a = torch.randn(64, 1008, dtype=torch.bfloat16)[:, :1001]  # K = 1001 over 16-byte rows: TMA takes it, cp.async not
    with pytest.raises(ValueError, match="K to be a multiple of 8"):
        W.launch(a, torch.randn(1001, 64, dtype=torch.bfloat16),
                 config=G.GemmConfig(BN=128, num_warps=4, num_stages=4, cp_async=True, producer_regs=96))
    with pytest.raises(ValueError, match="cooperative"):
        G.GemmConfig(BN=128, num_warps=4, pingpong=True, cp_async=True, producer_regs=96).validate()


@pytest.mark.parametrize("cfg", [G.GemmConfig(stream_k=2), G.GemmConfig(BN=64, num_warps=4, num_stages=6, stream_k=1)],
                         ids=str)
def test_stream_k_partials_leave_shared_memory_alone(cfg):
    """Stream-K stores its partial pieces from registers (st.global) and stages only C's bf16 tile: the 128x256
    tile fits (its fp32 staging would not), and the build has C's TMA store only."""
    from gluon_lab import codegen
    from gluon_lab.kernels import gemm_ws as W
    c = codegen.census(codegen.compile_sm90(**W.codegen_spec(cfg.validate())))
    assert c["spill_bytes"] == 0 and c["tma_store"] == 1 and c["st_global"] == cfg.BM * cfg.BN // (64 * cfg.num_warps)
    assert cfg.smem_bytes() == G.GemmConfig(BM=cfg.BM, BN=cfg.BN, num_warps=cfg.num_warps,
                                            num_stages=cfg.num_stages).smem_bytes()


@pytest.mark.parametrize("vec", [True, False])
def test_pad_copy_kernel_census(vec):
    """The padded-copy producer's staging kernel: 16-byte loads and stores when the row length is a multiple of
    8 elements (strides always are: gemm.check's 16-byte rows), element-wise masks otherwise; no spills."""
    from gluon_lab.kernels.hopper import kernel_spec
    from gluon_lab.kernels.igemm import staging as S
    args = {n: "*bf16" for n in ("a", "a_dst", "b", "b_dst")}
    args.update({n: "i32" for n in ("a_rows", "a_cols", "a_stride", "a_dst_stride", "a_blocks", "b_rows", "b_cols",
                                    "b_stride", "b_dst_stride")})
    spec = kernel_spec(S.pad_copy_kernel, args, {"A_VEC": vec, "B_VEC": True, "BR": S.COPY_ROWS, "BC": S.COPY_COLS,
                                                 "num_warps": S.COPY_WARPS}, num_warps=S.COPY_WARPS)
    k = codegen.compile_sm90(**spec)
    ptx, c = k.asm["ptx"], codegen.census(k)
    assert c["spill_bytes"] == 0
    wide_ld, wide_st = ptx.count("ld.global.v4.b32"), ptx.count("st.global.v4.b32")
    per_thread = S.COPY_ROWS * S.COPY_COLS // (8 * 32 * S.COPY_WARPS)  # 16-byte vectors per thread per block
    if vec:  # both operands' blocks move as 16-byte vectors
        assert wide_ld == 2 * per_thread and wide_st == 2 * per_thread, (wide_ld, wide_st)
    else:  # only B's (A's masks are per element)
        assert wide_ld == per_thread and wide_st == per_thread, (wide_ld, wide_st)


def test_pad_rows_rules_and_the_gemm_kernel_unchanged():
    """pad_rows with cp_async is refused (two producers); the GEMM kernel a pad_rows config launches compiles
    to the same code as without it (the copy is a launch of its own); needs_pad reads the row stride and base."""
    from gluon_lab.kernels import gemm_ws as W
    from gluon_lab.kernels.igemm import staging as S
    with pytest.raises(ValueError, match="pad_rows=True.*cp_async"):
        G.GemmConfig(BN=128, num_warps=4, num_stages=4, cp_async=True, producer_regs=96, pad_rows=True).validate()
    for cfg in (G.GemmConfig(), G.GemmConfig(BN=128, num_warps=4, split_k=4, split_last_wave=True)):
        plain = codegen.compile_sm90(**W.codegen_spec(cfg))
        padded = codegen.compile_sm90(**W.codegen_spec(dataclasses.replace(cfg, pad_rows=True)))
        assert plain.asm["ptx"] == padded.asm["ptx"]
    meta = dict(dtype=torch.bfloat16, device="meta")  # data_ptr 0 (a line) plus the view's offset
    assert not S.needs_pad(torch.empty(8, 64, **meta))  # 128-byte rows
    assert S.needs_pad(torch.empty(8, 1000, **meta))  # 2000 B rows
    assert S.needs_pad(torch.empty(8, 72, **meta)[:, 8:])  # rows of 144 B, based 16 B past a line
    assert S.needs_pad(torch.empty(8, 128, **meta)[:, 8:])  # 256-byte rows, but based 16 B past a line
    v = S.padded_like(torch.empty(5, 1001, **meta))
    assert v.shape == (5, 1001) and v.stride(0) == 1024 and not S.needs_pad(v)
