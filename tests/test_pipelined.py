"""gluon-pipelined norms on the CPU: every op compiles for sm_90 and shows the ring (one expect and
one wait per slot fill, TMA for x AND the weight, no ld.global, 128-bit stores, no spills); the
config heuristic keeps shared memory in bounds."""
import pytest
import torch

from gluon_lab import codegen, specs
from gluon_lab.kernels import pipelined as P

OPS = tuple(s.name for s in specs.family("row_norm"))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1000, 4096, 5120, 14336])
def test_census(op, N):
    cfg = P.PipeConfig.heuristic(op, N, "bfloat16")
    _, c = codegen.inspect_variant(op, "gluon-pipelined", N=N, dtype="bfloat16")  # the same config
    row = specs.get(op).row
    n_params = row.weight + row.bias
    assert c["ld_global"] == 0, "x, residual, weight and bias all arrive by TMA"
    assert c["mbarrier_init"] == cfg.num_stages + 1  # a barrier per ring slot + the weight barrier
    assert c["mbarrier_wait"] == (2 if n_params else 1)  # the slot's phase in the loop (+ the weight once)
    assert set(c["st_global_by_bits"]) == {128} and c["spill_bytes"] == 0
    assert c["smem_bytes"] <= cfg.smem_bytes(op, N, "bfloat16")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("N", [1536, 2880, 8192, 16384, 24576])
def test_heuristic_fits(op, dtype, N):
    try:
        cfg = P.PipeConfig.heuristic(op, N, dtype)
    except ValueError as e:
        assert "shared memory" in str(e) or "too long" in str(e)
        return
    assert cfg.num_stages >= 2 and cfg.ctas_per_sm >= 1
    assert cfg.ctas_per_sm * cfg.smem_bytes(op, N, dtype) <= P.SMEM_LIMIT


def test_rules():
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        P.check("rms_norm", torch.randn(4, 1001, dtype=torch.bfloat16), torch.randn(1001, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="too long"):
        P.PipeConfig.heuristic("rms_norm", 131072, "bfloat16")
    with pytest.raises(ValueError, match="too long"):  # two slots of x + residual do not fit: streams
        P.PipeConfig.heuristic("add_rms_norm", 14336, "float32")
    assert P.PipeConfig.heuristic("add_rms_norm", 8192, "float32").num_stages == 3
    assert P.PipeConfig.heuristic("rms_norm", 4096, "bfloat16", num_stages=2).num_stages == 2


def test_plan_03():
    from gluon_lab.experiments import PipelinedPlan, pipelined_cases
    plan = PipelinedPlan()
    norms = pipelined_cases(plan, ("norms", ))
    assert not [c for c in norms if c.get("variant") == "gluon-tma" and c["shape"]["N"] == 5120]  # pow2 only
    assert {c["variant"] for c in norms if "variant" in c} >= {"gluon-pipelined", "gluon-chunked", "inductor"}
    stages = pipelined_cases(plan, ("stages", ))
    assert sorted({c["config"]["num_stages"] for c in stages}) == [1, 2, 3, 4]
    gemm = pipelined_cases(plan, ("gemm", "gemm-sweep"))
    assert {(c["shape"]["M"], c["shape"]["N"], c["shape"]["K"]) for c in gemm} >= {(8192, 8192, 8192), (8192, 4096, 14336)}


def test_instrumented_build_reads_the_globaltimer_only_when_asked():
    plain = codegen.compile_sm90(**P.codegen_spec("rms_norm", 8192, "bfloat16"))
    inst = codegen.compile_sm90(**P.codegen_spec("rms_norm", 8192, "bfloat16", instrument=True))
    assert "globaltimer" not in plain.asm["ptx"]
    assert inst.asm["ptx"].count("%globaltimer") == 3  # before the wait, data ready, stores issued
    assert codegen.census(inst)["spill_bytes"] == 0


def test_record_stamps_keeps_the_blocks_each_program_ran():
    from gluon_lab.experiments import record_stamps
    from gluon_lab.kernels.pipelined import TRACE_CTAS, TRACE_ITERS

    def fake_launch(cfg, trace):  # 3 programs, running 5, 4 and 4 blocks; 3 stamps per block
        t = trace.view(TRACE_CTAS, TRACE_ITERS, 3)
        for p, n in enumerate((5, 4, 4)):
            for i in range(n):
                t[p, i] = torch.tensor([1000 + 100 * i + p, 1040 + 100 * i + p, 1090 + 100 * i + p])

    out = record_stamps(fake_launch, {3: P.PipeConfig(8, 1, 3, 1)}, 3, device="cpu")
    ns = out["3"]["ns"]
    assert [len(p) for p in ns] == [5, 4, 4] and ns[0][0] == [0, 40, 90] and ns[2][3] == [302, 342, 392]
    assert out["3"]["config"]["num_stages"] == 3


@pytest.mark.parametrize("variant", ["gluon-pipelined", "gluon-ws"])
@pytest.mark.parametrize("op", OPS)
def test_dynamic_schedule_census(variant, op):
    """schedule="dynamic": the row blocks come from a global atomic counter — relaxed atom.add (and the
    last CTA's atom.exch reset) issued from one thread, broadcast inside the partition (bar.warp.sync in
    the 1-warp producer, no CTA-wide barrier there); same ring otherwise, no spills. Static: no atomics."""
    import re
    from gluon_lab import registry
    v = registry.get_variant(op, variant)
    shape = {"M": 16384, "N": 4096}
    for sched in ("static", "dynamic"):
        cfg = v.resolve(shape, "bfloat16", {"schedule": sched})
        assert cfg.schedule == sched
        spec = v.codegen(shape, "bfloat16", config=cfg)
        k = codegen.compile_sm90(**{a: b for a, b in spec.items() if a != "options"})
        ptx = k.asm["ptx"]
        adds = len(re.findall(r"atom\.global\.gpu\.relaxed\.add\.u32", ptx))
        xchg = len(re.findall(r"atom\.global\.gpu\.relaxed\.exch\.b32", ptx))
        if sched == "static":
            assert adds == xchg == 0
        else:  # one grab site per prologue slot + the loop's (pipelined); the producer's loop (ws)
            want = cfg.num_stages if variant == "gluon-pipelined" else 1
            assert adds == xchg == want, (adds, xchg, want)
            assert spec["signature"]["c_ptr"] == "*i32"
        assert codegen.census(k)["spill_bytes"] == 0
    with pytest.raises(ValueError, match="schedule must be 'static' or 'dynamic'"):
        P._dynamic(P.PipeConfig(8, 1, 3, 1, schedule="greedy"))
