"""gluon-regs on the CPU: the sm_90 code shows the pattern (x, and the residual, loaded once with
128-bit global loads, nothing through TMA or a shared-memory row, no spills; both passes on the same
registers), the config's register rules, and bad input refused with a clear message."""
import pytest
import torch

from gluon_lab import codegen, specs
from gluon_lab.kernels import regs_cache as R

OPS = tuple(s.name for s in specs.family("row_norm"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1000, 4096, 5120, 8192])
def test_census_shows_the_pattern(op, dtype, N):
    cfg = R.RegsConfig.make(op, N, dtype)
    _, c = codegen.inspect_variant(op, "gluon-regs", N=N, dtype=dtype)  # the registered hooks
    row = specs.get(op).row
    vec = 16 // R.ITEMSIZE[dtype]
    B = R.RegsConfig.block(N)
    per_thread = B // (vec * 32 * cfg.num_warps) * cfg.rows  # 16-byte vectors of a thread's rows
    params = B // (vec * 32 * cfg.num_warps) * (row.weight + row.bias)  # weight / bias: one row's worth
    # every input element read once, in 16-byte vectors; no TMA, no mbarrier, no smem row
    assert c["ld_global"] == per_thread * (1 + row.residual) + params
    assert set(c["ld_global_by_bits"]) == {128}
    assert c["tma_load"] == 0 and c.get("mbarrier_wait", 0) == 0
    assert c["smem_bytes"] <= 256  # the cross-warp reduction scratch only
    # y (and s) leave in 16-byte vectors, once
    assert c["st_global"] == per_thread * (1 + row.residual) and set(c["st_global_by_bits"]) == {128}
    assert c["spill_bytes"] == 0
    # LayerNorm's two reductions (mean, centred variance) each cross the warps once; the others one
    assert c["bar_sync"] >= (2 if row.centered else 1)


@pytest.mark.parametrize("op,dtype", [("rms_norm", "bfloat16"), ("add_rms_norm", "float32"), ("layer_norm", "float32")])
def test_every_accepted_long_row_config_compiles_without_spills(op, dtype):
    """validate's register rule against the compiler: every warps x rows config it accepts at
    N = 32768 (the longest row) compiles for sm_90 without spilling."""
    ok = 0
    for w in R.KNOBS["num_warps"]:
        for r in R.KNOBS["rows"]:
            cfg = R.RegsConfig(num_warps=w, rows=r)
            try:
                cfg.validate(op, 32768, dtype)
            except ValueError:
                continue
            _, c = codegen.inspect_variant(op, "gluon-regs", N=32768, dtype=dtype, config=cfg)
            assert c["spill_bytes"] == 0, (cfg, c["spill_bytes"])
            ok += 1
    assert ok >= 2  # the heuristic's 16 warps and 32 warps x 1 row at least


@pytest.mark.parametrize("N,bits", [(1000, {128}), (2880, {128}), (1001, {16})])
def test_rows_that_are_not_multiples_of_16_still_move_in_vectors(N, bits):
    """The runtime marks a stride divisible only at multiples of 16; ALIGNED (a host check) tells the
    compiler each row starts on a 16-byte boundary, so N = 1000 bf16 still loads 128-bit vectors. N = 1001
    rows are not 16-byte aligned and move element by element (correct, and what the compiler can do)."""
    _, c = codegen.inspect_variant("rms_norm", "gluon-regs", N=N, dtype="bfloat16")
    assert set(c["ld_global_by_bits"]) == bits and set(c["st_global_by_bits"]) == bits


@pytest.mark.parametrize("N,M,warps", [(8192, None, 16), (5120, None, 8), (4096, None, 8), (2880, None, 4),
                                        (1024, None, 4), (256, None, 1), (32768, None, 16), (5120, 2048, 8),
                                        (4096, 256, 16), (5120, 1024, 16), (16384, 256, 16), (1024, 256, 4)])
def test_heuristic_warps(N, M, warps):
    """The 01 'regs' study's rule: warps by the real N (5120 pads to 8192 but takes 8 warps), twice the
    warps for M <= SMALL_M, never more vectors' worth of warps than the row has."""
    cfg = R.RegsConfig.heuristic("rms_norm", N, "bfloat16", M)
    assert cfg.num_warps == warps
    assert cfg.elems_per_thread(N) * cfg.rows <= R.MAX_ELEMS_PER_THREAD


def cpu(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("args,msg", [
    ((cpu(4, 5120), cpu(5120)), None),
    ((cpu(4, 1000), cpu(1000)), None),
    ((cpu(2, 40000), cpu(40000)), r"next_power_of_2\(N\) must be <= 32768"),
    ((cpu(2048, 4).t(), cpu(2048)), r"contiguous in its last dimension"),
    ((torch.randn(3, 4, 8, 512).transpose(1, 2).to(torch.bfloat16), cpu(512)), r"cannot be flattened"),
    ((cpu(4, 100), cpu(100)), r"next_power_of_2\(N\) >= 256 for bfloat16"),
    ((torch.randn(4, 1024).to(torch.float64), torch.randn(1024).to(torch.float64)), r"bfloat16, float16 or float32"),
])
def test_check_refuses_bad_input(args, msg):
    if msg is None:
        R.check("rms_norm", *args)
        return
    with pytest.raises(ValueError, match=msg):
        R.check("rms_norm", *args)


def test_config_rules():
    with pytest.raises(ValueError, match="rows must be 1, 2, 4 or 8"):
        R.check("rms_norm", cpu(4, 1024), cpu(1024), config=R.RegsConfig(num_warps=4, rows=3))
    with pytest.raises(ValueError, match="needs a row tile of at least 2048 lanes"):
        R.check("rms_norm", cpu(4, 1024), cpu(1024), config=R.RegsConfig(num_warps=8))
    with pytest.raises(ValueError, match="register elements per thread"):
        R.check("rms_norm", cpu(4, 16384), cpu(16384), config=R.RegsConfig(num_warps=4))
    with pytest.raises(ValueError, match="num_warps must be a power of 2"):
        R.check("rms_norm", cpu(4, 8192), cpu(8192), config=R.RegsConfig(num_warps=6))


def test_gluon_variant_needs_gpu_on_cpu_machine():
    import gluon_lab as gll
    from gluon_lab import device
    if device.cuda_available():
        pytest.skip("checks the CPU-only message")
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        gll.rms_norm(cpu(4, 1024), cpu(1024), variant="gluon-regs")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("op", OPS)
def test_heuristic_takes_every_row_up_to_32768(op, dtype):
    """The heuristic takes every N from one vector per lane up to MAX_BLOCK (the GPU tests' case list
    asserts its own coverage at collection, so it cannot shrink silently either)."""
    for N in (257, 1000, 2880, 4097, 5120, 7168, 12288, 14336, 24576, 30000, R.MAX_BLOCK):
        if R.RegsConfig.block(N) >= 16 // R.ITEMSIZE[dtype] * 32:
            R.RegsConfig.make(op, N, dtype).validate(op, N, dtype)


def test_outputs_take_the_operand_rules():
    """The caller's out= buffers take the inputs' rules (hopper.row_outputs, which every row-norm launcher
    allocates or checks its outputs with): gluon-regs' (any alignment) or TMA's."""
    from gluon_lab.kernels.hopper import row_outputs
    x = cpu(4, 2048)
    y = torch.empty(2048, 4, dtype=torch.bfloat16).t()  # last dimension strided
    with pytest.raises(ValueError, match=r"out \(y\) must be contiguous in its last dimension .* for gluon-regs"):
        row_outputs(x, y, False, "gluon-regs")
    unaligned = cpu(4 * 2048 + 1)[1:].view(4, 2048)
    assert row_outputs(x, unaligned, False, "gluon-regs")[0] is unaligned  # gluon-regs takes any alignment
    with pytest.raises(ValueError, match=r"out \(y\)'s data pointer must be 16-byte aligned for TMA"):
        row_outputs(x, unaligned, False)
    s = cpu(64, 2052)[:4, :2048]
    with pytest.raises(ValueError, match=r"out \(s\)'s row stride must be a multiple of 16 bytes"):
        row_outputs(x, (cpu(4, 2048), s), True)
