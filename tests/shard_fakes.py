"""A worker factory for gluon_lab.shard.Pool that needs no GPU (tests/test_shard.py): its "session" notes the
GPU the pool gave it (CUDA_VISIBLE_DEVICES, set before anything else in the spawned worker) and its shard; its
"measurement" returns the case back as JSON with them, or ends the process (exit 3) on a case marked "die";
notebook "die-at-start-<gpu>" ends that GPU's worker at its start (exit 4), "with-ceilings" gives it ceilings."""
import json
import os


class FakeSession:
    def __init__(self, shard: str):
        self.gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.shard = shard
        self.ceilings = None


def _make(notebook, results_dir, run_id, shard, ceiling_kw):
    if notebook == f"die-at-start-{os.environ.get('CUDA_VISIBLE_DEVICES')}":
        os._exit(4)
    s = FakeSession(shard)
    if notebook == "with-ceilings":
        s.ceilings = type("C", (), {"copy_gbps": 4000.0 + int(s.gpu), "matmul_tflops": 700.0, "copy_bytes": 1})()
    return s


def _measure(s, case):
    if case.get("die"):
        os._exit(3)
    return json.dumps({"case": case, "gpu": s.gpu, "shard": s.shard})


def factory():
    return _make, _measure
