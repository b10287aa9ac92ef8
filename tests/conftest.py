import os

import pytest


def _has_hopper():
    try:
        from gluon_lab import device
        return device.is_hopper_or_newer()
    except Exception:
        return False


HAS_GPU = _has_hopper()


def pytest_configure(config):
    """A GPU run must fail loudly when it cannot see the GPU: `-m gpu` (the device batch) or
    GLUON_LAB_REQUIRE_GPU=1 without an sm_90+ GPU is an error, not a run of skipped tests."""
    wants_gpu = "gpu" in (config.option.markexpr or "").replace("not gpu", "") or \
        os.environ.get("GLUON_LAB_REQUIRE_GPU") == "1"
    if wants_gpu and not HAS_GPU:
        raise pytest.UsageError("GPU tests were asked for (-m gpu / GLUON_LAB_REQUIRE_GPU=1) but no NVIDIA sm_90+ "
                                "GPU is visible: refusing to report them as skipped")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA sm_90+ GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
