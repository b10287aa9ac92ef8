"""The row norms' backward (gluon-regs of rms_norm_backward / layer_norm_backward / add_rms_norm_backward) on the
CPU: the sm_90 code shows the pattern (x and dy read once in 16-byte vectors, dx written once, the partial rows
stored once per program, no float atomics, no spills where the heuristic keeps the partials in registers), the
config's rules, and bad input refused with a clear message."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import codegen, registry, specs
from gluon_lab.kernels import norm_backward as B

OPS = tuple(s.name for s in specs.family("row_norm_backward"))
GRID_NS = (1536, 2560, 2880, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 14336, 16384)  # 01-03's hidden sizes <= 16K


def test_the_backward_ops_exist_with_their_peers_and_kernel():
    for op in OPS:
        vs = registry.variants(op, available_only=False)
        assert {"torch", "inductor", "liger", "quack", "gluon-regs"} <= set(vs), (op, vs)
        assert registry.get_variant(op, "gluon-regs").pattern == "backward"
    assert specs.get("layer_norm_backward").outputs == ("dx", "dw", "db")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1000, 4096, 5120, 12288])
def test_census_shows_the_pattern(op, dtype, N):
    spec = specs.get(op)
    cfg = B.BwdConfig.make(N, dtype, spec.kind == "layer", ds="ds" in spec.input_names)
    _, c = codegen.inspect_variant(op, "gluon-regs", N=N, dtype=dtype)
    e = B.ITEMSIZE[dtype]
    v = cfg.elems(N) * e // 16  # 16-byte vectors per thread of one [ROWS, BLOCK] tile of an input
    # x, dy (, ds): each read once, no second global read; w: one row. With prefetch the loads of x and dy (and of
    # the statistics) are in the code twice: the first tile's before the loop, the next tile's inside it
    rows = 2 * (1 + cfg.prefetch) + ("ds" in spec.input_names)
    assert c["ld_global_by_bits"][128] == rows * v + v // cfg.rows
    stats = (2 if spec.kind == "layer" else 1) * cfg.rows * (1 + cfg.prefetch)  # the forward's fp32 mean / rstd
    assert c["ld_global_by_bits"].get(32, 0) == stats
    params = 1 + (spec.kind == "layer")  # the partial rows: dw (and db), fp32, once per program
    assert c["st_global_by_bits"] == {128: v + params * cfg.elems(N) // cfg.rows * 4 // 16}
    assert c["tma_load"] == 0 and "atom" not in "".join(c["sass"])  # no float atomics: deterministic dw
    if cfg.partials == 0:
        assert c["smem_bytes"] <= 256
        assert c["spill_bytes"] == 0 or cfg.block(N) == 16384  # the measured exception (BwdConfig.heuristic)
    else:  # long rows: the fp32 partials live in shared memory instead of registers
        assert c["smem_bytes"] >= cfg.block(N) * 4 * params


@pytest.mark.parametrize("op", OPS)
def test_heuristic_configs_of_the_grid_compile_within_the_register_file(op):
    """Every heuristic config of the 07 grid's hidden sizes (bf16): no spills up to 8192-lane tiles; the
    16384-lane tiles (16 warps at ptxas's 128-register cap, partials in registers: faster than in smem though
    they spill, BwdConfig.heuristic) spill at most 1 KB per thread: named here and on the 07 page, not hidden."""
    spec = specs.get(op)
    for N in GRID_NS:
        cfg = B.BwdConfig.make(N, "bfloat16", spec.kind == "layer", ds="ds" in spec.input_names)
        _, c = codegen.inspect_variant(op, "gluon-regs", N=N, dtype="bfloat16")
        assert c["registers"] <= 65536 // (32 * cfg.num_warps * cfg.ctas_per_sm), (N, cfg, c["registers"])
        limit = 0 if cfg.block(N) <= 8192 else 1024
        assert c["spill_bytes"] <= limit, (N, cfg, c["spill_bytes"])


@pytest.mark.parametrize("kind,N", [("rms", 4096), ("layer", 14336)])
def test_the_instrumented_build_reads_the_globaltimer_only_when_asked(kind, N):
    from gluon_lab.codegen import census, compile_sm90
    kw = dict(has_db=kind == "layer", has_stats=True, has_ds=False)
    plain = compile_sm90(**{k: v for k, v in B.codegen_spec(kind, N, "bfloat16", **kw).items() if k != "options"})
    inst = compile_sm90(**{k: v for k, v in B.codegen_spec(kind, N, "bfloat16", instrument=True, **kw).items()
                           if k != "options"})
    assert "globaltimer" not in plain.asm["ptx"]
    assert inst.asm["ptx"].count("%globaltimer") == 5  # per tile: start, statistics ready, folded; the end (2 reads)
    assert census(inst)["spill_bytes"] <= census(plain)["spill_bytes"] + 64


def test_colsum_compiles_to_a_fixed_order_reduce():
    from gluon_lab.codegen import census, compile_sm90
    c = census(compile_sm90(**{k: v for k, v in B.colsum_codegen_spec(4096, "bfloat16").items() if k != "options"}))
    assert c["spill_bytes"] == 0 and "atom" not in "".join(c["sass"])


def test_config_rules_name_the_knob():
    with pytest.raises(ValueError, match=r"next_power_of_2\(N\) must be <= 16384"):
        B.BwdConfig.make(20480, "bfloat16", False).validate(20480, "bfloat16", False)
    with pytest.raises(ValueError, match="num_warps must be a power of 2"):
        B.BwdConfig(num_warps=3).validate(4096, "bfloat16", False)
    with pytest.raises(ValueError, match="ctas_per_sm"):
        B.BwdConfig(num_warps=4, ctas_per_sm=5).validate(4096, "bfloat16", False)
    with pytest.raises(ValueError, match="partials=1 keeps"):
        B.BwdConfig(num_warps=16, partials=1, ctas_per_sm=2).validate(16384, "bfloat16", True)
    with pytest.raises(ValueError, match=">= 256 for bfloat16"):
        B.BwdConfig.make(100, "bfloat16", False).validate(100, "bfloat16", False)


def test_bad_input_is_named_before_anything_runs():
    x, dy, w = torch.randn(4, 64), torch.randn(4, 64), torch.rand(64)
    with pytest.raises(ValueError, match=r"dy must have x's shape \(4, 64\)"):
        gll.rms_norm_backward(torch.randn(4, 32), x, w)
    with pytest.raises(TypeError, match="dy.dtype must equal x.dtype"):
        gll.rms_norm_backward(dy.double().float().half(), x, w)
    with pytest.raises(ValueError, match="rstd must be the forward's fp32 statistic, one per row of x"):
        gll.rms_norm_backward(dy, x, w, torch.ones(5))
    with pytest.raises(ValueError, match="mean and rstd are the forward's statistics together"):
        gll.layer_norm_backward(dy, x, w, torch.zeros(4), None)
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        gll.rms_norm_backward(dy, x, w, variant="gluon-regs")


def test_empty_input_gives_empty_dx_and_zero_parameter_gradients():
    x, w = torch.randn(0, 64), torch.rand(64)
    dx, dw, db = gll.layer_norm_backward(x, x, w, variant="gluon-regs")
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros(64)) and torch.equal(db, torch.zeros(64))


def test_the_07_plan_sweeps_prefetch_and_times_every_backward():
    from gluon_lab.backward_plan import PARTS, BackwardPlan, backward_cases
    cases = backward_cases(BackwardPlan(), PARTS)
    sweep = [c for c in cases if c.get("config", {}).get("study") == "bwd-config"]
    assert {c["config"]["prefetch"] for c in sweep} == {False, True}
    assert {c["op"] for c in cases if c.get("variant") == "gluon-regs"} == set(OPS)
    for c in sweep:  # every swept config is one the kernel takes
        spec = specs.get(c["op"])
        B.BwdConfig.make(c["shape"]["N"], "bfloat16", spec.kind == "layer", **c["config"]).validate(
            c["shape"]["N"], "bfloat16", spec.kind == "layer")
