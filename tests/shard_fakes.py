"""A worker factory for gluon_lab.shard.Pool that needs no GPU (tests/test_shard.py): its "session" notes the
GPU the pool gave it (CUDA_VISIBLE_DEVICES, set before anything else in the spawned worker) and its shard; its
"measurement" returns the case back as JSON with them, or ends the process (exit 3) on a case marked "die"."""
import json
import os


class FakeSession:
    def __init__(self, shard: str):
        self.gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.shard = shard
        self.ceilings = None


def _make(notebook, results_dir, run_id, shard, ceiling_kw):
    return FakeSession(shard)


def _measure(s, case):
    if case.get("die"):
        os._exit(3)
    return json.dumps({"case": case, "gpu": s.gpu, "shard": s.shard})


def factory():
    return _make, _measure
