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
