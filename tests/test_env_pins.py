"""requirements.txt (what pip installs) and environment.yml (conda) carry the same pins, and the
pins match the H200 image (torch 2.11.0, triton 3.6.0)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _reqs(lines):
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip().lstrip("- ").strip()
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*((?:==|>=|<=|~=|<|>).+)?$", line)
        if m and line:
            out[m.group(1).lower().replace("_", "-")] = (m.group(2) or "").replace(" ", "")
    return out


def requirements():
    return _reqs((ROOT / "requirements.txt").read_text().splitlines())


def environment_pip():
    text = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, l in enumerate(text) if l.strip() == "- pip:")
    block = []
    for l in text[start + 1:]:
        if not l.startswith(" " * 6) or not l.strip().startswith("-"):
            break
        block.append(l)
    return _reqs(block)


def test_environment_yml_matches_requirements():
    assert environment_pip() == requirements()


def test_pins_match_h200_image():
    r = requirements()
    assert r["torch"] == "==2.11.0"
    assert r["triton"] == "==3.6.0"
    for pkg in ("papermill", "nbconvert", "nbformat", "ipykernel", "jupyterlab", "matplotlib", "pandas", "tqdm"):
        assert pkg in r, pkg


def test_installed_versions_are_the_pins():
    import torch
    import triton
    assert torch.__version__.split("+")[0] == "2.11.0"
    assert triton.__version__ == "3.6.0"


def test_parser_sees_a_disagreement(tmp_path):
    assert _reqs(["torch==2.11.0"]) != _reqs(["torch==2.12.0"])
