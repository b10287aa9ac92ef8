import os

import pytest


def _has_hopper():
    """(sm_90+ GPU visible?, why not). The reason keeps the exception of a GPU check that failed, so
    a GPU run that cannot see its GPU says why instead of skipping everything."""
    try:
        from gluon_lab import device
        if not device.cuda_available():
            return False, "no CUDA device is visible to torch"
        cap = device.capability(0)
        if cap is None or cap[0] < 9:
            return False, f"the GPU is sm_{cap[0]}{cap[1]}, the Gluon kernels need sm_90+" if cap else "no capability"
        return True, ""
    except Exception as e:  # noqa: BLE001 - reported, not swallowed: see pytest_configure
        return False, f"the GPU check raised {type(e).__name__}: {e}"


HAS_GPU, WHY_NO_GPU = _has_hopper()


def pytest_configure(config):
    """A GPU run must fail loudly when it cannot see the GPU: `-m gpu` (the device batch) or
    GLUON_LAB_REQUIRE_GPU=1 without an sm_90+ GPU is an error, not a run of skipped tests."""
    wants_gpu = "gpu" in (config.option.markexpr or "").replace("not gpu", "") or \
        os.environ.get("GLUON_LAB_REQUIRE_GPU") == "1"
    if wants_gpu and not HAS_GPU:
        raise pytest.UsageError("GPU tests were asked for (-m gpu / GLUON_LAB_REQUIRE_GPU=1) but no usable NVIDIA "
                                f"sm_90+ GPU: {WHY_NO_GPU}. Refusing to report them as skipped")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA sm_90+ GPU ({WHY_NO_GPU}; run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
