"""CPU-only: compile for sm_90 and check the census reports what the code really contains."""
import pytest

from gluon_lab import codegen


@pytest.fixture(scope="module")
def gluon_tma():
    from gluon_fixtures import tma_scale_row_kernel, tma_signature
    k = codegen.compile_sm90(tma_scale_row_kernel, tma_signature(2048), {"num_warps": 4}, num_warps=4)
    return k, codegen.census(k)


@pytest.fixture(scope="module")
def triton_row():
    return codegen.inspect_variant("rms_norm", "triton", N=4096, dtype="bfloat16")


def test_gluon_tma_kernel_census(gluon_tma):
    k, c = gluon_tma
    # [1, 2048] bf16 is split into 8 boxes of [1, 256] (TMA box dims are capped at 256)
    assert c["tma_boxes"][0]["block_size"] == [1, 256]
    assert c["tma_load"] >= 1 and c["tma_store"] >= 1
    assert c["mbarrier_wait"] >= 1 and c["mbarrier_init"] == 1 and c["mbarrier_expect_tx"] >= 1
    assert c["fence_proxy_async"] >= 1
    assert c["ld_global"] == 0 and c["st_global"] == 0  # all global traffic goes through TMA
    assert c["smem_bytes"] >= 2048 * 2  # the row buffer lives in shared memory
    assert c["sass"]["UTMALDG"] >= 1 and c["sass"]["UTMASTG"] >= 1
    assert c["registers"] and c["registers"] > 0 and c["spill_bytes"] == 0


def test_triton_kernel_census(triton_row):
    k, c = triton_row
    assert c["tma_load"] == 0 and c["tma_store"] == 0 and c["mbarrier_wait"] == 0
    assert c["sass"]["UTMALDG"] == 0 and c["sass"]["LDG"] >= 1
    # aligned pointers and N % 16 == 0: x, w loads and y stores are 128-bit vectors only
    assert set(c["ld_global_by_bits"]) == {128} and set(c["st_global_by_bits"]) == {128}
    assert c["num_warps"] == 8 and c["registers"] > 0


def test_misaligned_n_loses_vector_width():
    _, c = codegen.inspect_variant("rms_norm", "triton", N=1000, dtype="bfloat16")
    assert 128 not in c["ld_global_by_bits"] and c["ld_global_by_bits"]


def test_ptx_census_counts_real_lines():
    ptx = """
    // ld.global.v4.b32 in a comment does not count
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.b16 %rs1, [%rd2];
    st.global.v2.b32 [%rd3], {%r1, %r2};
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r5], [%rd4, {%r6, %r7}], [%r8];
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd5, {%r6, %r7}], [%r9];
    setmaxnreg.inc.sync.aligned.u32 232;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {...};
    """
    c = codegen.ptx_census(ptx)
    assert c["ld_global_by_bits"] == {16: 1, 128: 1} and c["st_global_by_bits"] == {64: 1}
    assert c["tma_load"] == 1 and c["tma_store"] == 1
    assert c["setmaxnreg_values"] == [232] and c["wgmma_shapes"] == ["m64n128k16"]


def test_inspect_variant_rejects_library_calls():
    with pytest.raises(ValueError, match="library call"):
        codegen.inspect_variant("rms_norm", "torch", N=4096)


def test_compile_rejects_unknown_aligned_arg():
    from gluon_fixtures import tma_scale_row_kernel, tma_signature
    with pytest.raises(ValueError, match="not in the signature"):
        codegen.compile_sm90(tma_scale_row_kernel, tma_signature(256), {"num_warps": 4}, aligned=("w_ptr", ))


# ----------------------------------------------------------------------------------------------
# The templates' census, pinned: each variant compiled through its registered configure + codegen
# hooks exactly as its launcher JITs it (M = 16384 rows for the row norms). These are the counts
# the kernel-template redesign was gated on (identical before and after it); a change to a template,
# a hook or a heuristic that moves one of them shows up here without a GPU.
# Facts: TMA loads (per issue site), ld/st.global by width, mbarrier init/wait/expect, wgmma,
# setmaxnreg budgets, shared memory. Every kernel: no local memory, no spills.
CENSUS_FACTS = [
    # gluon-tma: x is one TMA box per row block, the weight (and bias) ride its barrier (param_tma),
    # so no ld.global; 128-bit stores; one expect on one barrier
    ("rms_norm", "gluon-tma", 4096, "bfloat16", dict(tma_load=2, ld_global=0, st_global_by_bits={128: 2},
                                                     mbarrier_expect_tx=1, smem_bytes=24584)),
    ("add_rms_norm", "gluon-tma", 4096, "bfloat16", dict(tma_load=3, ld_global=0, st_global_by_bits={128: 4},
                                                         smem_bytes=40968)),  # x + residual + weight; y and s
    ("l2_norm", "gluon-tma", 4096, "bfloat16", dict(tma_load=1, ld_global=0, st_global_by_bits={128: 2},
                                                    smem_bytes=16392)),  # no weight at all
    ("layer_norm", "gluon-tma", 4096, "float32", dict(tma_load=3, ld_global=0, st_global_by_bits={128: 4},
                                                      smem_bytes=49184)),
    # gluon-chunked: one box per chunk, weight/bias by 128-bit loads per chunk (any N), masked stores
    ("rms_norm", "gluon-chunked", 5120, "bfloat16", dict(tma_load=5, ld_global_by_bits={128: 5},
                                                         st_global_by_bits={128: 5}, mbarrier_expect_tx=1,
                                                         smem_bytes=10256)),
    ("layer_norm", "gluon-chunked", 1000, "bfloat16", dict(tma_load=2, ld_global_by_bits={128: 4},
                                                           st_global_by_bits={128: 4}, smem_bytes=4112)),
    ("add_rms_norm", "gluon-chunked", 5120, "float32", dict(tma_load=10, ld_global_by_bits={128: 5},
                                                            st_global_by_bits={128: 10}, smem_bytes=40968)),
    # streaming (rows past the cache budget): a 4-slot ring, one wait per pass (+1 for the centred K)
    ("l2_norm", "gluon-chunked", 131072, "bfloat16", dict(tma_load=5, ld_global=0, st_global_by_bits={128: 1},
                                                          mbarrier_init=4, mbarrier_wait=2, mbarrier_expect_tx=5,
                                                          smem_bytes=16544)),
    ("layer_norm", "gluon-chunked", 131072, "bfloat16", dict(tma_load=5, ld_global_by_bits={128: 2},
                                                             mbarrier_init=4, mbarrier_wait=3, smem_bytes=16544)),
    # gluon-pipelined: everything by TMA (x ring + weights once per CTA), a barrier per slot + 1
    ("rms_norm", "gluon-pipelined", 5120, "bfloat16", dict(tma_load=20, ld_global=0, st_global_by_bits={128: 5},
                                                           mbarrier_init=4, mbarrier_wait=2, mbarrier_expect_tx=4,
                                                           smem_bytes=41112)),
    ("add_rms_norm", "gluon-pipelined", 4096, "bfloat16", dict(tma_load=14, ld_global=0, st_global_by_bits={128: 4},
                                                               smem_bytes=57416)),
    ("l2_norm", "gluon-pipelined", 4096, "float32", dict(tma_load=12, mbarrier_wait=1, mbarrier_expect_tx=3,
                                                         smem_bytes=49224)),
    # gluon-ws: EMPTY + FULL per slot + the weight barrier; producer/consumer register budgets
    ("layer_norm", "gluon-ws", 4096, "bfloat16", dict(tma_load=20, ld_global=0, mbarrier_init=9, mbarrier_wait=3,
                                                      mbarrier_expect_tx=2, setmaxnreg_values=[24, 40, 232, 240],
                                                      smem_bytes=82060)),
    ("add_rms_norm", "gluon-ws", 5120, "bfloat16", dict(tma_load=45, st_global_by_bits={128: 10},
                                                        setmaxnreg_values=[24, 40, 216, 232], smem_bytes=92332)),
    # group_norm (NCHW): cached group (10 boxes, one slot each) and a ring-streamed one
    ("group_norm", "gluon-chunked", {"B": 8, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "nchw"}, "bfloat16",
     dict(tma_load=10, ld_global_by_bits={16: 2}, st_global_by_bits={128: 1}, mbarrier_init=10, mbarrier_wait=2,
          smem_bytes=20624)),
    ("group_norm", "gluon-chunked", {"B": 8, "C": 640, "H": 64, "W": 64, "G": 32, "layout": "nchw"}, "bfloat16",
     dict(tma_load=9, mbarrier_init=8, mbarrier_wait=3, smem_bytes=32928)),
    # matmul: TMA ring + wgmma + one TMA-store epilogue
    ("matmul", "gluon-pipelined", {"M": 8192, "N": 8192, "K": 8192}, "bfloat16",
     dict(tma_load=6, tma_store=1, ld_global=0, st_global=0, wgmma=4, mbarrier_init=3, mbarrier_wait=1,
          smem_bytes=213016)),
    ("matmul", "gluon-ws", {"M": 8192, "N": 8192, "K": 8192}, "bfloat16",
     dict(tma_load=5, tma_store=1, ld_global=0, st_global=0, wgmma=4, mbarrier_init=6, mbarrier_wait=2,
          setmaxnreg_values=[24, 40, 232, 240], smem_bytes=213164)),
]


@pytest.mark.parametrize("op,variant,shape,dtype,facts", CENSUS_FACTS,
                         ids=[f"{o}-{v}-{s if isinstance(s, int) else '-'.join(map(str, s.values()))}-{d}"
                              for o, v, s, d, _ in CENSUS_FACTS])
def test_template_census(op, variant, shape, dtype, facts):
    shape = {"M": 16384, "N": shape} if isinstance(shape, int) else shape
    _, c = codegen.inspect_variant(op, variant, shape=shape, dtype=dtype)
    got = {k: c[k] for k in facts}
    assert got == facts
    assert c["ld_local"] == c["st_local"] == 0 and c["spill_bytes"] == 0


# ----------------------------------------------------------------------------------------------
# inspect_kernel: what the CLI prints (kernel, config, notes) and what it refuses

def test_inspect_kernel_reports_kernel_and_config():
    from gluon_lab.kernels.tma_cache import TmaCacheConfig
    ins = codegen.inspect_kernel("rms_norm", "gluon-tma", N=4096, dtype="bf16")  # aliases work here too
    assert ins.kernel_name == "tma_cache_norm_kernel" and ins.dtype == "bfloat16" and not ins.notes
    assert ins.config == TmaCacheConfig.heuristic("rms_norm", 4096, "bfloat16")
    assert codegen.format_inspection(ins).splitlines()[2] == f"config: {ins.config!r}"


def test_inspect_refuses_what_launch_or_the_runtime_refuses():
    from gluon_lab.kernels.tma_cache import TmaCacheConfig
    big = TmaCacheConfig(num_warps=16, rows_per_cta=1, tma_store=False)
    with pytest.raises(codegen.Refused, match=r"power-of-2 N in \[256, 65536\]"):  # the launcher's check
        codegen.inspect_variant("rms_norm", "gluon-tma", N=131072, config=big)
    # strict=False compiles whatever the hooks give: the 262,208 B the runtime would refuse
    _, c = codegen.inspect_variant("rms_norm", "gluon-tma", N=131072, config=big, strict=False)
    assert c["smem_bytes"] == 262208
    assert codegen.runtime_refusal(c).startswith("needs 262,208 B of shared memory per CTA, sm_90 allows 232,448 B")
