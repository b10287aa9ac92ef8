import pytest


def _has_hopper():
    try:
        from gluon_lab import device
        return device.is_hopper_or_newer()
    except Exception:
        return False


HAS_GPU = _has_hopper()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA sm_90+ GPU (run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
