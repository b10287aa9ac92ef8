"""bench --where: measure a slice of a notebook's plan (CPU: the filter and the CLI's refusals)."""
import pytest

from gluon_lab import experiments
from gluon_lab.__main__ import main
from gluon_lab.plan_common import parse_where, where_matches


def test_where_keeps_exactly_the_matching_cases_of_the_04_plan():
    cases = experiments.ws_cases(experiments.WarpSpecializedPlan(), ("gemm-shapes", "gemm"))
    where = parse_where("M=777,N=5000,K=1000;M=2500,N=1736,K=4104,variant=torch")
    kept = [c for c in cases if where_matches(c, where)]
    # every case of the 777x5000x1000 shape, and only cuBLAS's (two brackets) of 2500x1736x4104
    assert kept and all(c["op"] == "matmul" for c in kept)
    big = [c for c in kept if c["shape"] == {"M": 777, "N": 5000, "K": 1000}]
    assert len(big) == sum(c["shape"] == {"M": 777, "N": 5000, "K": 1000} for c in cases) > 10
    other = [c for c in kept if c not in big]
    assert other and all(c["variant"] == "torch" and c["shape"]["N"] == 1736 for c in other)
    assert any(c.get("config", {}).get("pad_rows") for c in big)  # the ragged study is in the slice


def test_where_matches_study_and_compares_values_as_text():
    c = {"op": "conv2d", "variant": "gluon-ws", "dtype": "bfloat16", "shape": {"Nb": 4, "C": 1280, "H": 8},
         "config": {"study": "schedule", "split_k": 1}}
    assert where_matches(c, parse_where("study=schedule,C=1280"))
    assert not where_matches(c, parse_where("study=schedule,C=640"))
    assert not where_matches(c, parse_where("split_k=1"))  # knobs are not keys: only shape, op, variant, dtype, study
    assert where_matches(c, parse_where(""))
    assert where_matches(c, parse_where("C=640;variant=gluon-ws"))


@pytest.mark.parametrize("text, rule", [("M5000", "not KEY=VALUE"), ("M=", "not KEY=VALUE"),
                                        ("M=1,M=2", "given twice")])
def test_bad_where_is_refused_naming_the_rule(text, rule):
    with pytest.raises(ValueError, match=rule):
        parse_where(text)


def test_cli_refuses_a_bad_where_before_touching_the_gpu(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "04-warp-specialization", "--where", "M5000"])
    assert e.value.code == 2
    assert "--where" in capsys.readouterr().err
