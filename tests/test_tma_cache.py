"""gluon-tma on the CPU: the sm_90 code shows the pattern (x arrives only by TMA, is read from
shared memory by every pass, nothing spills), and bad input is refused with a clear message."""
import pytest
import torch

from gluon_lab import codegen, specs
from gluon_lab.kernels import tma_cache as T

OPS = tuple(s.name for s in specs.family("row_norm"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("tma_store,param_tma", [(False, False), (True, False), (False, True)])
def test_census_shows_the_pattern(op, dtype, tma_store, param_tma):
    N = 8192
    knobs = dict(tma_store=tma_store, param_tma=param_tma)
    cfg = T.TmaCacheConfig.make(op, N, dtype, **knobs)
    k, c = codegen.inspect_variant(op, "gluon-tma", N=N, dtype=dtype, **knobs)  # the registered hooks
    row = specs.get(op).row
    n_inputs = 1 + row.residual
    vec = 16 // T.ITEMSIZE[dtype]
    chunks = N // (vec * 32 * cfg.num_warps)
    # x (and residual) arrive only through TMA: one [R, N] copy per input, split in [R, 256] boxes
    assert c["tma_load"] >= n_inputs and c["sass"]["UTMALDG"] >= n_inputs
    # one_box (default): the whole [R, N] block is one [R, N/256, 256] TMA box
    assert c["tma_boxes"][0]["block_size"] == [cfg.rows_per_cta, N // 256, 256]
    # the only global loads left are the weight (and bias): one 128-bit load per chunk each, or
    # none when they ride the row's barrier into shared memory
    n_param = row.weight + row.bias
    if param_tma:
        assert c["ld_global"] == 0 and c["tma_load"] == n_inputs + n_param
    else:
        assert c["ld_global"] == n_param * chunks and set(c["ld_global_by_bits"]) <= {128}
    # exactly one expect-tx (an arrive) per phase of the count-1 barrier: a second one would
    # complete the phase before the row has landed
    assert c["mbarrier_expect_tx"] == 1 and c["mbarrier_init"] == 1
    # the reduction and the normalize pass each read the cached row from shared memory (LayerNorm's
    # mean and centred-variance passes read the same addresses back to back: LLVM merges them)
    passes = 2 + row.residual
    assert c["ld_shared"] >= passes * chunks
    assert c["mbarrier_wait"] >= 1 and c["spill_bytes"] == 0
    assert cfg.smem_bytes(op, N, dtype) - T.SMEM_RESERVE <= c["smem_bytes"] <= cfg.smem_bytes(op, N, dtype)
    if tma_store:
        assert c["tma_store"] >= 1 and c["st_global"] == 0 and c["fence_proxy_async"] >= 1
    else:
        assert c["tma_store"] == 0 and set(c["st_global_by_bits"]) == {128}


def test_narrow_boxes_split_the_row():
    cfg = T.TmaCacheConfig.make("rms_norm", 8192, "bfloat16", one_box=False, param_tma=False)
    _, c = codegen.inspect_variant("rms_norm", "gluon-tma", N=8192, dtype="bfloat16", one_box=False, param_tma=False)
    # 32 boxes of [R, 1, 256], spread over the warps: each warp issues 32 / num_warps of them
    assert c["tma_boxes"][0]["block_size"] == [cfg.rows_per_cta, 1, 256]
    assert c["tma_load"] == 8192 // 256 // cfg.num_warps


def test_smem_limits_per_dtype():
    assert T.TmaCacheConfig.max_n("rms_norm", "bfloat16") == 65536
    assert T.TmaCacheConfig.max_n("rms_norm", "float32") == 32768
    assert T.TmaCacheConfig.max_n("add_rms_norm", "float16") == 32768
    assert T.TmaCacheConfig.max_n("add_rms_norm", "float32") == 16384


def test_largest_row_compiles_within_the_limit():
    N = T.TmaCacheConfig.max_n("rms_norm", "bfloat16")
    _, c = codegen.inspect_variant("rms_norm", "gluon-tma", N=N, dtype="bfloat16")
    assert N * 2 <= c["smem_bytes"] <= T.SMEM_LIMIT


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_heuristic_is_valid_for_every_supported_n(op, dtype):
    N = T.TmaCacheConfig.min_n(dtype)
    while N <= T.TmaCacheConfig.max_n(op, dtype):
        cfg = T.TmaCacheConfig.heuristic(op, N, dtype)
        assert N % (16 // T.ITEMSIZE[dtype] * 32 * cfg.num_warps) == 0
        assert cfg.smem_bytes(op, N, dtype) <= T.SMEM_LIMIT
        T.check(op, torch.empty(2, N, dtype=getattr(torch, dtype)), config=cfg)
        N *= 2
    assert T.TmaCacheConfig.make(op, 4096, dtype, tma_store=True, study="x").tma_store


def cpu(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("args,msg", [
    ((cpu(4, 5120), cpu(5120)), r"power-of-2 N in \[256, 65536\] for bfloat16 rms_norm"),
    ((cpu(4, 128), cpu(128)), r"power-of-2 N"),
    ((cpu(2, 131072), cpu(131072)), r"power-of-2 N"),
    ((cpu(4, 1024, dtype=torch.float32), cpu(1024, dtype=torch.float32)), None),
    ((cpu(64, 2052)[:, :2048], cpu(2048)), r"row stride must be a multiple of 16 bytes"),
    ((cpu(2048, 4).t(), cpu(2048)), r"contiguous in its last dimension"),
    ((cpu(8 * 2048 + 1)[1:].view(8, 2048), cpu(2048)), r"16-byte aligned"),
])
def test_check_refuses_bad_input(args, msg):
    if msg is None:
        T.check("rms_norm", *args)
        return
    with pytest.raises(ValueError, match=msg):
        T.check("rms_norm", *args)


def test_add_rms_limit_is_half():
    with pytest.raises(ValueError, match=r"\[256, 32768\] for bfloat16 add_rms_norm"):
        T.check("add_rms_norm", cpu(2, 65536), cpu(2, 65536), cpu(65536))


def test_config_rules():
    with pytest.raises(ValueError, match="rows_per_cta must be a power of two"):
        T.check("rms_norm", cpu(4, 1024), cpu(1024), config=T.TmaCacheConfig(num_warps=4, rows_per_cta=3,
                                                                              tma_store=False))
    with pytest.raises(ValueError, match="num_warps=8 needs N to be a multiple of 2048"):
        T.check("rms_norm", cpu(4, 1024), cpu(1024), config=T.TmaCacheConfig(num_warps=8, rows_per_cta=1,
                                                                              tma_store=False))


def test_gluon_variant_needs_gpu_on_cpu_machine():
    import gluon_lab as gll
    from gluon_lab import device
    if device.cuda_available():
        pytest.skip("checks the CPU-only message")
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        gll.rms_norm(cpu(4, 1024), cpu(1024), variant="gluon-tma")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("param_tma", [False, True])
def test_tma_store_sources_are_not_reused_as_scratch(op, param_tma):
    """Regression (seen on the H200): the allocator ended the residual buffer's live range at its
    last generic read, not at the store_wait covering its in-flight TMA store, and put the
    reduction scratch on top of it. No scratch offset may fall inside the cached buffers."""
    import re
    cfg = T.TmaCacheConfig(num_warps=4, rows_per_cta=1, tma_store=True, param_tma=param_tma)
    k = codegen.compile_sm90(**T.codegen_spec(op, 1024, "bfloat16", cfg))
    cached = cfg.smem_bytes(op, 1024, "bfloat16") - T.SMEM_RESERVE
    offsets = [int(m) for m in re.findall(r"global_smem\+(\d+)", k.asm["ptx"])]
    assert all(o >= cached for o in offsets), (offsets, cached)


@pytest.mark.parametrize("op", OPS)
def test_absent_operands_are_constexpr_none(op):
    """No dummy descriptors or pointers: what the op lacks reaches the kernel as a constexpr None,
    and the op's math arrives as its spec's hooks (STATS) and features (HAS_*)."""
    from gluon_lab.kernels import norm_math
    row = specs.get(op).row
    spec = T.codegen_spec(op, 4096, "bfloat16", T.TmaCacheConfig(num_warps=4, rows_per_cta=1, tma_store=False,
                                                                  param_tma=True))
    ce = spec["constexprs"]
    assert ce["STATS"] is norm_math.STATS_HOOKS[row.stats]
    assert (ce["HAS_W"], ce["HAS_B"], ce["HAS_RESIDUAL"]) == (row.weight, row.bias, row.residual)
    absent = {"y_desc", "s_desc"} | ({"r_desc", "s_ptr"} if not row.residual else set()) | \
        ({"w_desc", "w_ptr"} if not row.weight else set()) | ({"b_desc", "b_ptr"} if not row.bias else set())
    assert {n for n, t in spec["signature"].items() if t == "constexpr" and ce[n] is None} == absent


def test_registered_with_knobs_and_hooks():
    from gluon_lab import registry
    for op in OPS:
        v = registry.get_variant(op, "gluon-tma")
        assert v.pattern == "tma-caching" and v.needs_hopper and v.supports_out
        assert set(v.knobs) == {"num_warps", "rows_per_cta", "tma_store", "one_box", "param_tma"}
        cfg = v.resolve({"M": 4096, "N": 4096}, "bfloat16", {"tma_store": True, "study": "sweep"})
        assert isinstance(cfg, T.TmaCacheConfig) and cfg.tma_store
        with pytest.raises(ValueError, match="num_warps=16 needs N to be a multiple of 4096"):
            v.resolve({"M": 4096, "N": 1024}, "bfloat16", {"num_warps": 16})
