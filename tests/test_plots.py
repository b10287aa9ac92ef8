import pandas as pd
import pytest

from gluon_lab import device, plots


def frame():
    rows = []
    for v, f in (("torch", 1.0), ("triton", 0.8)):
        for M in (1024, 2048):
            for N in (1024, 1536):
                ms = 0.01 * M * N / 2**20 * f
                nbytes = 4 * M * N
                rows.append(dict(op="rms_norm", variant=v, pattern="baseline", M=M, N=N, K=None, ms_median=ms,
                                 bytes=nbytes, flops=4 * M * N, sol_datasheet_pct=nbytes / (ms * 1e-3) / 4.8e12 * 100,
                                 sol_measured_pct=50.0))
    rows.append(dict(op="matmul", variant="torch", pattern="ceiling", M=4096, N=4096, K=4096, ms_median=0.2,
                     bytes=3 * 4096**2 * 2, flops=2 * 4096**3, sol_datasheet_pct=70.0))
    return pd.DataFrame(rows)


def test_figures_write_files(tmp_path):
    df = frame()
    norms = df[df.op == "rms_norm"]
    spec = device.DATASHEET["h200"]
    files = [plots.save(plots.roofline(df, spec, {"copy_gbps": 4200, "matmul_tflops": 660}), tmp_path / "r.png"),
             plots.save(plots.sol_heatmaps(norms, ["torch", "triton", "gluon-tma"]), tmp_path / "h.png"),
             plots.save(plots.speedup_bars(norms, "torch", ["triton"]), tmp_path / "s.svg")]
    for f in files:
        assert (tmp_path / f).stat().st_size > 1000


def test_heatmap_marks_missing_cells():
    fig = plots.sol_heatmap(frame().query("variant == 'triton' and M == 1024"), rows=[1024, 2048], cols=[1024, 1536])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("missing") == 2


def test_delta_table_cells():
    t = plots.delta_table(frame()[lambda d: d.op == "rms_norm"], "torch", "triton")
    cell = t.loc[1024, 1024]
    assert "->" in cell and cell.endswith("(+25.0%)")
    t2 = plots.delta_table(frame()[lambda d: (d.op == "rms_norm") & ~((d.variant == "triton") & (d.M == 2048))],
                           "torch", "triton")
    assert t2.loc[2048, 1536] == "missing"


def test_check_physical():
    df = frame()
    plots.check_physical(df)
    df.loc[0, "sol_datasheet_pct"] = 101.0
    with pytest.raises(plots.PhysicsError):
        plots.check_physical(df)


def test_geomean():
    assert plots.geomean([1, 4]) == pytest.approx(2.0)
