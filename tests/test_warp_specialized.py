"""gluon-ws GEMM on the CPU: compiles for sm_90 with a 1-warp producer partition (setmaxnreg),
consumer wgmma, empty/full barrier pairs per ring slot, a TMA-store epilogue and no spills."""
import pytest

from gluon_lab import codegen, specs
from gluon_lab.kernels import gemm as G
from gluon_lab.kernels import gemm_ws as GW, warp_specialized as W
from gluon_lab.kernels.igemm.epilogues import REDUCE_BLOCK


@pytest.mark.parametrize("cfg", [G.GemmConfig(), G.GemmConfig(BN=128, num_stages=4, num_warps=4)], ids=str)
def test_census(cfg):
    k = codegen.compile_sm90(**GW.codegen_spec(cfg))
    c = codegen.census(k)
    assert c["sass"].get("USETMAXREG", 0) >= 2  # register budgets per partition
    assert c["mbarrier_init"] == 2 * cfg.num_stages  # empty + full per slot
    assert c["mbarrier_wait"] == 2  # producer waits EMPTY, consumer waits FULL
    assert c["sass"]["UTMALDG"] >= 2 and c["tma_store"] == 1
    assert c["sass"].get("HGMMA", 0) >= cfg.BK // 16 and c["spill_bytes"] == 0
    assert c["smem_bytes"] <= cfg.smem_bytes()


PINGPONG = [G.GemmConfig(BN=128, num_stages=4, num_warps=4, pingpong=True),
            G.GemmConfig(BN=128, num_stages=5, num_warps=4, pingpong=True),
            G.GemmConfig(BM=64, BN=256, num_stages=4, num_warps=4, pingpong=True)]


@pytest.mark.parametrize("cfg", PINGPONG, ids=str)
def test_pingpong_census(cfg):
    """Two consumer warpgroups (each its own wgmma stream and TMA store), one producer warp: 12 warps
    at launch, budgets 232 / 232 / 40, EMPTY + FULL per slot + the two ORDER barriers, no spills."""
    k = codegen.compile_sm90(**GW.codegen_spec(cfg))
    c = codegen.census(k)
    assert c["num_warps"] == 12 and c["spill_bytes"] == 0
    assert {232, 40} <= set(c["setmaxnreg_values"])
    assert c["mbarrier_init"] == 2 * cfg.num_stages + 2
    assert c["mbarrier_wait"] == 3 * 2 - 1  # producer EMPTY; each consumer FULL and ORDER
    assert c["tma_store"] == 2  # each warpgroup's epilogue
    # each consumer issues its tile's MMAs: BM / 64 m64 halves x BK / 16 k-steps per ring slot
    assert c["wgmma"] == 2 * (cfg.BM // 64) * (cfg.BK // 16)
    assert c["smem_bytes"] <= cfg.smem_bytes()


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_census(split):
    """Split-K on the cooperative kernel: the same two partitions; the epilogue stores a whole tile to C
    or a K-slice's fp32 partials to the workspace (two TMA stores, two staging buffers), no spills; the
    reduce kernel moves 16-byte fp32 vectors."""
    cfg = G.GemmConfig(BN=128, num_stages=4, num_warps=4, split_k=split)
    c = codegen.census(codegen.compile_sm90(**GW.codegen_spec(cfg, shape={"M": 128, "N": 4096, "K": 14336})))
    assert c["tma_store"] == 2 and c["spill_bytes"] == 0 and c["mbarrier_init"] == 2 * cfg.num_stages
    assert c["smem_bytes"] <= cfg.smem_bytes() and cfg.smem_bytes() > G.GemmConfig(BN=128, num_stages=4,
                                                                                    num_warps=4).smem_bytes()
    from gluon_lab.kernels.hopper import kernel_spec
    r = codegen.census(codegen.compile_sm90(**kernel_spec(
        GW.splitk_reduce_kernel, {"w_ptr": "*fp32", "c_ptr": "*bf16", "M": "i32", "N": 4096,
                                 "c_stride": 4096, "FULL_TILES": "i32"},
        {"TM": 128, "TN": 128, "GROUP_M": 8, "SPLIT_K": split, **REDUCE_BLOCK}, num_warps=8)))
    assert set(r["ld_global_by_bits"]) == {128} and r["spill_bytes"] == 0


@pytest.mark.parametrize("BM,BN", [(16, 128), (32, 64), (64, 128)])
def test_swap_ab_census(BM, BN):
    """swap_ab: the wgmma is m64 x n{BM} on C's transpose (BN on the M side), no spills, one TMA store."""
    import re
    cfg = G.GemmConfig(BM=BM, BN=BN, num_warps=4, num_stages=6, swap_ab=True)
    k = codegen.compile_sm90(**GW.codegen_spec(cfg, shape={"M": 16, "N": 4096, "K": 4096}))
    c = codegen.census(k)
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", k.asm["ptx"])) == {f"m64n{BM}k16"}
    assert c["spill_bytes"] == 0 and c["tma_store"] == 1 and c["smem_bytes"] <= cfg.smem_bytes()


def test_gemm_config_rules():
    with pytest.raises(ValueError, match="num_warps must be 4"):
        G.GemmConfig(pingpong=True).validate()  # 8 warps: the cooperative split
    with pytest.raises(ValueError, match="accumulator registers"):
        G.GemmConfig(BN=256, num_warps=4).validate()  # 128 x 256 over one warpgroup spills
    assert G.GemmConfig(BN=128, num_warps=4, num_stages=4, pingpong=True).smem_bytes() == \
        G.GemmConfig(BN=128, num_warps=4, num_stages=4).smem_bytes() + 128 * 128 * 2  # a C buffer per warpgroup
    torch = pytest.importorskip("torch")
    a = torch.empty(128, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gluon-ws schedules"):
        G.launch(a, a.T.contiguous(), config=G.GemmConfig(BN=128, num_warps=4, pingpong=True))
    with pytest.raises(ValueError, match="gluon-ws schedules"):
        G.launch(a, a.T.contiguous(), config=G.GemmConfig(BN=128, num_warps=4, split_k=2))
    with pytest.raises(ValueError, match="gluon-ws schedules"):
        G.codegen_spec(G.GemmConfig(BN=128, num_warps=4, pingpong=True))
    with pytest.raises(ValueError, match=r"a.shape\[1\] \(K\) must be >= 1"):
        G.check(torch.empty(4, 8, dtype=torch.bfloat16)[:, :0], torch.empty(0, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="num_stages must be >= 2"):
        G.GemmConfig(num_stages=1).validate()  # the consumer releases a slot only after the next MMA: deadlock
    with pytest.raises(ValueError, match="leaves the consumer warps 120 registers"):
        G.GemmConfig(BN=128, num_warps=4, pingpong=True, producer_regs=256).validate()
    assert G.GemmConfig(BN=128, num_warps=4, pingpong=True, producer_regs=152).validate().consumer_regs() == 176
    with pytest.raises(ValueError, match="BN must be >= 16 x num_warps"):
        G.GemmConfig(BM=16, BN=32, num_warps=4, swap_ab=True).validate()  # swap_ab: BN is the wgmma M side
    with pytest.raises(ValueError, match="BM must be >= 16 x num_warps"):
        G.GemmConfig(BM=16, BN=128, num_warps=4).validate()  # without swap_ab BM = 16 cannot feed a warpgroup
    with pytest.raises(ValueError, match=r"swap_ab=True\) runs on the cooperative"):
        G.GemmConfig(BM=16, BN=128, num_warps=4, swap_ab=True, pingpong=True).validate()
    with pytest.raises(ValueError, match="split_k must be in 1..16"):
        G.GemmConfig(split_k=0).validate()
    with pytest.raises(ValueError, match="pingpong must be False"):
        G.GemmConfig(BN=128, num_warps=4, pingpong=True, split_k=2).validate()


def test_registered():
    from gluon_lab import registry
    v = registry.get_variant("matmul", "gluon-ws")
    assert v.pattern == "warp-specialized" and "producer_regs" in v.knobs
    assert v.resolve({"M": 8192, "N": 8192, "K": 8192}, "bfloat16", {"producer_regs": 24}).producer_regs == 24


# ---- the warp-specialized norms ----
NORM_OPS = tuple(s.name for s in specs.family("row_norm"))


@pytest.mark.parametrize("op", NORM_OPS)
@pytest.mark.parametrize("N,M", [(1000, 37), (4096, 16384), (5120, 16384), (8192, 1024)], ids=str)
def test_norm_census(op, N, M):
    cfg = W.WsNormConfig.heuristic(op, N, "bfloat16", M)
    c = codegen.census(codegen.compile_sm90(**W.norm_codegen_spec(op, N, "bfloat16", cfg)))
    assert c["num_warps"] == cfg.num_warps + 4  # consumer + the producer's (whole) warpgroup
    assert c["sass"].get("USETMAXREG", 0) >= 2  # producer gives registers, consumer takes them
    assert c["mbarrier_init"] == 2 * cfg.num_stages + 1  # EMPTY + FULL per slot, + the weight barrier
    # producer waits EMPTY, consumer waits FULL (+ the parent's weight wait when the op has weights)
    assert c["mbarrier_wait"] == (3 if specs.get(op).row.weight else 2)
    assert set(c["st_global_by_bits"]) == {128} and c["spill_bytes"] == 0
    assert c["smem_bytes"] <= cfg.smem_bytes(op, N, "bfloat16")


def test_norm_config_rules():
    with pytest.raises(ValueError, match="multiple of 4"):
        W.WsNormConfig(2, 1, 2, 1).validate("rms_norm", 4096, "bfloat16")
    with pytest.raises(ValueError, match="producer_regs"):
        W.WsNormConfig(4, 1, 2, 1, producer_regs=20).validate("rms_norm", 4096, "bfloat16")
    assert W.WsNormConfig.heuristic("rms_norm", 1000, "bfloat16", 37).num_warps == 4  # >= one warpgroup
    cfg = W.WsNormConfig(8, 1, 2, 2)
    assert cfg.maxnreg() * cfg.threads() * cfg.ctas_per_sm <= 65536


def test_norms_registered():
    from gluon_lab import registry
    for op in NORM_OPS:
        v = registry.get_variant(op, "gluon-ws")
        assert v.pattern == "warp-specialized" and v.supports_out
        assert v.resolve({"M": 16384, "N": 4096}, "bfloat16", {"num_stages": 2, "study": "norm-sweep"}).num_stages == 2


def test_norm_instrumented_build_stamps_in_both_partitions():
    plain = codegen.compile_sm90(**W.norm_codegen_spec("rms_norm", 8192, "bfloat16"))
    inst = codegen.compile_sm90(**W.norm_codegen_spec("rms_norm", 8192, "bfloat16", instrument=True))
    assert "globaltimer" not in plain.asm["ptx"]
    assert inst.asm["ptx"].count("%globaltimer") == W.TRACE_FIELDS  # 2 producer + 3 consumer reads
    assert codegen.census(inst)["spill_bytes"] == 0


def test_norm_schedule_heuristic():
    """The schedule is a knob: the heuristic keeps static (the dynamic one measured faster for RMS rows at large
    M, but its per-stream counter must exist before a graph capture); an override picks dynamic; the
    single-partition ring's rules hold (>= 2 stages); the smem model counts the 32-lane index ring."""
    from gluon_lab.kernels import pipelined as P
    h = W.WsNormConfig.heuristic
    for op in ("rms_norm", "add_rms_norm", "layer_norm", "l2_norm"):
        assert h(op, 4096, "bfloat16", 32768).schedule == "static"
    dyn = h("rms_norm", 4096, "bfloat16", 32768, schedule="dynamic")
    assert dyn.schedule == "dynamic"
    stat = h("rms_norm", 4096, "bfloat16", 32768)
    assert dyn.smem_bytes("rms_norm", 4096, "bfloat16") - stat.smem_bytes("rms_norm", 4096, "bfloat16") == \
        128 * dyn.num_stages
    assert P.PipeConfig.heuristic("rms_norm", 4096, "bfloat16", 32768).schedule == "static"
    with pytest.raises(ValueError, match="needs num_stages >= 2"):
        P.PipeConfig.heuristic("rms_norm", 4096, "bfloat16", 32768, schedule="dynamic", num_stages=1)


def test_gemm_shape_sweep_covers_the_issue_set():
    """>= 20 shapes: square, LLM projections at M = 128 / 1024 / 4096 / 16384, ragged (no dimension a
    multiple of 128), long K; every listed config runs on most of them, ping-pong included, cuBLAS on all."""
    from gluon_lab import experiments as E
    shapes = E.GEMM_SHAPE_SWEEP
    assert len(shapes) >= 20 and len(set(shapes)) == len(shapes)
    assert {M for M, N, K in shapes} >= {128, 1024, 4096, 16384}
    assert any(M % 128 and N % 128 and K % 128 for M, N, K in shapes)
    assert any(K >= 4 * max(M, N) for M, N, K in shapes) and any(M == N == K for M, N, K in shapes)
    assert all(N % 8 == 0 and K % 8 == 0 for M, N, K in shapes)  # bf16 TMA rows: 16-byte multiples
    cases = E.ws_cases(E.WarpSpecializedPlan(), ["gemm-shapes"])
    by_shape = {}
    for c in cases:
        by_shape.setdefault(tuple(c["shape"].values()), []).append(c)
    assert len(by_shape) == len(shapes)
    for cs in by_shape.values():
        torch_cases = [c for c in cs if c["variant"] == "torch"]  # cuBLAS first and again last (the bracket)
        assert [c["config"].get("bracket") for c in torch_cases] == [None, "after"]
        assert cs[0]["variant"] == "torch" and cs[-1] == torch_cases[-1]
        assert any(c["config"].get("pingpong") for c in cs)
        assert sum(bool(c["config"].get("heuristic")) for c in cs) == 2  # gluon-ws and gluon-pipelined as auto runs them
        M, N, K = tuple(cs[0]["shape"].values())
        assert any(c["config"].get("cp_async") for c in cs) == bool(K % 64 or N % 64)
    assert all(c["config"]["study"] == "gemm-shapes" for c in cases)


def test_clock_is_not_part_of_a_case():
    import json
    from gluon_lab import results
    a = json.dumps({"study": "gemm-shapes", "BN": 128, "sm_clock_mhz": 1980})
    b = json.dumps({"study": "gemm-shapes", "BN": 128, "sm_clock_mhz": 1755})
    assert results.case_key(a, "cudagraph") == results.case_key(b, "cudagraph")
    assert results.case_key(a, "cudagraph") != results.case_key(json.dumps({"study": "gemm-shapes", "BN": 256}), "cudagraph")


def test_cluster_evidence_on_the_installed_triton():
    """The 04 page's claim, checked: triton 3.6.0's Hopper TMA copy has no multicast argument and a
    2-CTA cluster compile loads a shared tile with a plain (per-CTA) TMA copy. When an upgrade adds
    multicast this fails, and the page's section must be rewritten."""
    from gluon_lab.analysis import gemm_probe as A
    t = dict(A.cluster_evidence().values.tolist())
    assert "multicast" not in t["hopper.tma.async_copy_global_to_shared parameters"]
    assert t["Gluon Python files mentioning 'multicast'"] == "none"
    assert ".reqnctapercluster 2 x1" in t["num_ctas = 2 compile, tile shared by both CTAs"]
    assert "multicast x0" in t["num_ctas = 2 compile, tile shared by both CTAs"]
    assert "multicast" not in t["its TMA load instruction"]


def test_wave_table_counts_tiles():
    from gluon_lab.analysis import gemm as A
    t = A.wave_table(shapes=[(128, 4096, 4096), (1000, 3000, 2000)], tiles=((128, 256), (64, 64)), sms=132)
    r = {(row.shape, row.tile): row for row in t.itertuples()}
    assert r[("128x4096x4096", "128x256")].tiles == 16 and r[("128x4096x4096", "64x64")].tiles == 128
    assert r[("128x4096x4096", "64x64")].efficiency == round(128 / 132, 3)
    assert r[("1000x3000x2000", "128x256")].tiles == 8 * 12  # ragged edges count whole
    assert r[("1000x3000x2000", "128x256")].useful == round(1000 * 3000 / (1024 * 3072), 3)


def test_shape_sweep_table_from_records():
    """shape_sweep_table on hand-made records of one run: ratio = cuBLAS ms / gluon ms, the best config
    named, ping-pong vs cooperative from the best of each."""
    import json
    import pandas as pd
    from gluon_lab.analysis import gemm as A

    def rec(variant, ms, **cfg):
        return {"op": "matmul", "variant": variant, "M": 128, "N": 8192, "K": 8192, "ms_median": ms, "tflops": 1.0,
                "passed": True, "gpu_name": "NVIDIA H200",
                "config_key": json.dumps({"study": "gemm-shapes", "sm_clock_mhz": 1980, **cfg})}
    # cuBLAS timed before (0.9) and after (1.1 / 0.9 = 1.222 drift) the Gluon cases: the peer is their geomean
    peer = (0.9 * 1.1) ** 0.5
    df = pd.DataFrame([rec("torch", 0.9), rec("gluon-ws", 1.25, heuristic=True), rec("gluon-pipelined", 1.1, heuristic=True),
                       rec("gluon-ws", 0.8, BM=64, BN=64, BK=64, num_warps=4, num_stages=8),
                       rec("gluon-ws", 0.9, BM=128, BN=128, BK=64, num_warps=4, num_stages=4, pingpong=True),
                       rec("torch", 1.1, bracket="after")])
    t = A.shape_sweep_table(df).iloc[0]
    assert t["best / cuBLAS"] == round(peer / 0.8, 3) and t["best gluon"] == "ws 64x64x64 4w s8"
    assert t["ws heuristic / cuBLAS"] == round(peer / 1.25, 3) and t["pipe heuristic / cuBLAS"] == round(peer / 1.1, 3)
    assert t["ping-pong / cooperative"] == round(0.8 / 0.9, 3) and t["SM MHz"] == 1980 and t["cuBLAS drift"] == 1.222
    assert t["auto"] in ("torch", "gluon-ws", "gluon-pipelined") and "auto / cuBLAS" in t
    tg = A.shape_sweep_targets(A.shape_sweep_table(df))
    assert list(tg.met) == [True, True]


def test_dispatch_repro_log_is_read():
    """The committed racecheck log of ci/racecheck_dispatch: the protocol alone is clean, a pre-fork
    partial barrier gives the two hazards, synccheck stays clean."""
    from gluon_lab.analysis import ws_sanitizer as A
    t = A.dispatch_repro().set_index("variant")
    assert t.loc[0, "racecheck hazards"] == 0 and t.loc[1, "racecheck hazards"] == 2
    assert t.loc[2, "racecheck hazards"] == 0 and t.loc[0, "synccheck errors"] == 0 == t.loc[1, "synccheck errors"]
    assert A.dispatch_repro("/nonexistent.log").empty


def test_gemm_timeline_stats_measure_the_mainloop_share():
    """Cooperative: each tile's epilogue is a gap between mainloops; ping-pong: the other warpgroup's
    mainloop covers it. Rows are [wg + 1, start, last MMA issued, store issued] (ns)."""
    from gluon_lab.analysis import gemm as A
    GT = {"timelines": {"4096x4096x4096": {"cooperative": {"ns": [[1, 0, 100, 130, 1, 130, 230, 260]]},
                                           "ping-pong": {"ns": [[1, 0, 100, 130, 2, 100, 200, 230, 1, 200, 300, 330]]}}}}
    t = A.gemm_timeline_stats(GT).set_index("schedule")
    assert t.loc["cooperative", "mainloop share"] == round(200 / 260, 3)
    assert t.loc["ping-pong", "mainloop share"] == round(300 / 330, 3)
    assert t.loc["ping-pong", "tiles / CTA"] == 3 and A.gemm_timeline_stats(None).empty
    assert A.gemm_timeline_figure(GT) is not None and A.gemm_timeline_figure(None) is None


def test_instrumented_gemm_builds_store_their_stamps():
    for cfg in (G.GemmConfig(BN=128, num_warps=8, num_stages=5), G.GemmConfig(BN=128, num_warps=4, num_stages=4, pingpong=True)):
        c = codegen.census(codegen.compile_sm90(**GW.codegen_spec(cfg, instrument=True)))
        assert c["spill_bytes"] == 0 and c["st_global"] >= 4 * cfg.consumers()  # 4 stamps per consumer
        plain = codegen.census(codegen.compile_sm90(**GW.codegen_spec(cfg)))
        assert plain["st_global"] == 0  # the timed build stores nothing but its TMA epilogue


@pytest.mark.parametrize("M,N,split,last", [(1000, 3000, 2, True), (1000, 3000, 3, False), (128, 128 * 133, 4, True),
                                            (300, 264, 2, True), (16384, 4096, 2, True)])
def test_split_k_units_cover_every_k_step_once(M, N, split, last):
    """splitk_plan + the unit mapping of igemm.schedule.unit (mirrored here in Python): whole tiles first, then each
    remaining tile's SPLIT_K balanced, non-empty K-slices; every (tile, k-step) exactly once."""
    cfg = G.GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=split, split_last_wave=last)
    sms, k_tiles = 132, 9
    full, units = GW.splitk_plan(cfg, M, N, sms)
    tiles = -(-M // 128) * -(-N // 128)
    assert full == (tiles // sms * sms if last else 0) and units == full + (tiles - full) * split
    seen, blocks = {}, set()
    for u in range(units):
        if u < full:
            tile, ks = u, range(k_tiles)
        else:
            v = u - full
            sl = v % split + 1
            tile, ks = full + v // split, range((sl - 1) * k_tiles // split, sl * k_tiles // split)
            blocks.add((sl - 1) * (tiles - full) + tile - full)  # the workspace block the consumer stores
        assert len(ks) > 0
        for k in ks:
            seen[(tile, k)] = seen.get((tile, k), 0) + 1
    assert seen == {(t, k): 1 for t in range(tiles) for k in range(k_tiles)}
    assert blocks == set(range(split * (tiles - full)))  # every (slice, split tile) its own workspace block
    with pytest.raises(ValueError, match="split_last_wave=True\\) needs split_k > 1"):
        G.GemmConfig(split_last_wave=True).validate()


def _sk_range(c, S, G):  # igemm.schedule.sk_range, mirrored
    q, r = divmod(S, G)
    a = c * q + min(c, r)
    return a, a + q + (c < r)


def _sk_owner(x, S, G):  # igemm.schedule.sk_owner, mirrored
    q, r = divmod(S, G)  # q = 0 (fewer k-steps than CTAs): x < r = S, the second branch is never taken
    return x // (q + 1) if x < r * (q + 1) else r + (x - r * (q + 1)) // q


@pytest.mark.parametrize("M,N,K,bm,bn,waves", [(1000, 3000, 2000, 128, 128, 1), (1000, 3000, 2000, 128, 128, 2),
                                               (2500, 1736, 4104, 128, 128, 2), (128, 6144, 4096, 128, 64, 1),
                                               (1, 8, 8, 128, 128, 1), (300, 264, 1032, 128, 128, 2),
                                               (128, 128 * 133, 520, 128, 128, 1), (777, 5000, 1000, 128, 128, 2),
                                               (16384, 4096, 4096, 128, 128, 1)])
def test_stream_k_pieces_cover_every_k_step_once(M, N, K, bm, bn, waves):
    """streamk_plan + the piece mapping of igemm.schedule.unit_space / unit (mirrored): the data-parallel tiles whole, then
    every CTA's balanced share of the stream-K k-steps cut at tile boundaries; every (tile, k-step) exactly
    once, every partial piece its own workspace block (< grid + stream-K tiles), a piece is the whole tile
    exactly where streamk_reduce_kernel's first and last owner CTA coincide, and the reducer sums exactly
    the blocks the pieces wrote."""
    cfg = G.GemmConfig(BM=bm, BN=bn, num_warps=4, num_stages=4, stream_k=waves).validate()
    sms, k_tiles = 132, -(-K // 64)
    tiles = -(-M // bm) * -(-N // bn)
    full, grid, sk_tiles = GW.streamk_plan(cfg, M, N, K, sms)
    assert full % grid == 0 and sk_tiles == tiles - full > 0 and full == max(0, -(-tiles // sms) - waves) * sms
    S = sk_tiles * k_tiles
    assert S >= grid or full  # without whole waves the grid is no larger than the k-steps (no empty share)
    seen, blocks, whole = {}, {}, set()
    for c in range(grid):
        a, b = _sk_range(c, S, grid)
        pieces = (b - 1) // k_tiles - a // k_tiles + 1 if b > a else 0
        units = [(c + i * grid, 0, k_tiles, 0) for i in range(full // grid)]
        for j in range(pieces):
            t = a // k_tiles + j
            k0, k1 = max(a, t * k_tiles) - t * k_tiles, min(b, (t + 1) * k_tiles) - t * k_tiles
            sl = c + t + 1 if (k0 > 0 or k1 < k_tiles) else 0
            units.append((full + t, k0, k1, sl))
        for tile, k0, k1, sl in units:
            assert 0 <= k0 < k1 <= k_tiles
            for k in range(k0, k1):
                seen[(tile, k)] = seen.get((tile, k), 0) + 1
            if sl:
                assert sl - 1 not in blocks and sl - 1 < grid + sk_tiles
                blocks[sl - 1] = tile
            elif tile >= full:
                whole.add(tile - full)
    assert seen == {(t, k): 1 for t in range(tiles) for k in range(k_tiles)}
    for t in range(sk_tiles):  # the reducer's view
        c0, c1 = _sk_owner(t * k_tiles, S, grid), _sk_owner(t * k_tiles + k_tiles - 1, S, grid)
        assert (c0 == c1) == (t in whole)
        if c1 > c0:
            assert all(blocks.get(c + t) == full + t for c in range(c0, c1 + 1))
    assert sum(1 for t in range(sk_tiles) if t not in whole) == len(set(blocks.values()))
    most = max(_sk_owner(t * k_tiles + k_tiles - 1, S, grid) - _sk_owner(t * k_tiles, S, grid) + 1 for t in range(sk_tiles))
    assert most <= GW.streamk_max_pieces(k_tiles, S, grid)  # the fixup's unrolled loop covers every tile's pieces
    with pytest.raises(ValueError, match="stream_k must be 0"):
        G.GemmConfig(stream_k=3).validate()
    with pytest.raises(ValueError, match="without split-K"):
        G.GemmConfig(BN=128, num_warps=4, stream_k=1, split_k=2).validate()


def test_bucket_proposal_picks_the_config_that_holds_most_shapes():
    import json
    import pandas as pd
    from gluon_lab.analysis import gemm as A
    assert A.shape_bucket(16, 4096, 4096) == "M<=64, <1 wave" and A.shape_bucket(8192, 8192, 8192) == "M>2048, >=4 waves"
    assert A.shape_bucket(1024, 1024, 32768).endswith("long K")

    def rec(shape, variant, ms, **cfg):
        M, N, K = shape
        return {"op": "matmul", "variant": variant, "M": M, "N": N, "K": K, "ms_median": ms, "tflops": 1.0,
                "passed": True, "config_key": json.dumps({"study": "gemm-shapes", **cfg})}
    big = dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3)
    small = dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=8)
    rows = []
    for shape in ((8192, 8192, 8192), (16384, 4096, 4096)):  # same bucket: the big tile wins both
        rows += [rec(shape, "torch", 1.0), rec(shape, "gluon-ws", 0.98, **big), rec(shape, "gluon-ws", 1.3, **small)]
    rows += [rec((128, 4096, 4096), "torch", 1.0), rec((128, 4096, 4096), "gluon-ws", 2.0, **big),
             rec((128, 4096, 4096), "gluon-ws", 0.9, **small)]
    t = A.bucket_proposal(pd.DataFrame(rows)).set_index("bucket")
    assert t.loc["M>2048, >=4 waves", "candidate"] == "ws 128x256x64 8w s3" and t.loc["M>2048, >=4 waves", "holds on"] == 2
    assert t.loc["M<=256, <1 wave", "candidate"] == "ws 64x64x64 4w s8"
    assert t.loc["M<=256, <1 wave", "candidate / cuBLAS geomean"] == round(1 / 0.9, 3)
