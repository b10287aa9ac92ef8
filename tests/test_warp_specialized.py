"""gluon-ws GEMM on the CPU: compiles for sm_90 with a 1-warp producer partition (setmaxnreg),
consumer wgmma, empty/full barrier pairs per ring slot, a TMA-store epilogue and no spills."""
import pytest

from gluon_lab import codegen
from gluon_lab.kernels import gemm as G
from gluon_lab.kernels import warp_specialized as W


@pytest.mark.parametrize("cfg", [G.GemmConfig(), G.GemmConfig(BN=128, num_stages=4, num_warps=4)], ids=str)
def test_census(cfg):
    k = codegen.compile_sm90(**W.codegen_spec(cfg))
    c = codegen.census(k)
    assert c["sass"].get("USETMAXREG", 0) >= 2  # register budgets per partition
    assert c["mbarrier_init"] == 2 * cfg.num_stages  # empty + full per slot
    assert c["mbarrier_wait"] == 2  # producer waits EMPTY, consumer waits FULL
    assert c["sass"]["UTMALDG"] >= 2 and c["tma_store"] == 1
    assert c["sass"].get("HGMMA", 0) >= cfg.BK // 16 and c["spill_bytes"] == 0
    assert c["smem_bytes"] <= cfg.smem_bytes()


def test_registered():
    from gluon_lab import ops
    assert "gluon-ws" in ops.variants("matmul") and "gluon-ws" not in ops.AUTO_PREFERENCE["matmul"]
