import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from gluon_lab import device, plots  # noqa: E402


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
    assert t2.loc[2048, 1536] == "triton not measured"  # a reason, not 'missing' / NaN
    t3 = plots.delta_table(frame()[lambda d: (d.op == "rms_norm") & ~((d.variant == "triton") & (d.M == 2048))],
                           "torch", "triton", missing=lambda M, N, absent: f"{absent} refused {M}x{N}")
    assert t3.loc[2048, 1536] == "triton refused 2048x1536"


def test_ratio_heatmap_is_centred_on_one():
    """A speed ratio map diverges around 1.0: a 0.85 cell is on the red (slower) side, 1.15 on the green side,
    1.0 in the pale middle; every cell carries its value; the colour bar says which side is faster."""
    from matplotlib.colors import TwoSlopeNorm
    df = pd.DataFrame({"M": [1, 1, 2, 2], "N": [4096, 8192, 4096, 8192], "ratio": [0.85, 1.0, 1.15, None]})
    fig = plots.ratio_heatmap(df, faster="gluon faster", slower="baseline faster", target=0.98)
    ax = fig.axes[0]
    im = ax.images[0]
    assert isinstance(im.norm, TwoSlopeNorm) and im.norm.vcenter == 1.0
    assert im.norm.vmin == pytest.approx(1 / im.norm.vmax)  # symmetric in log: 1/x and x at the two ends
    red, mid, green = (im.cmap(im.norm(v)) for v in (0.85, 1.0, 1.15))
    assert red[0] > red[1] and green[1] > green[0]  # RdYlGn: slower is red, faster is green
    assert im.norm(0.85) < 0.5 < im.norm(1.15) and im.norm(1.0) == pytest.approx(0.5)
    assert [t.get_text() for t in ax.texts] == ["0.850 ✗", "1.000", "1.150", "missing"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4K", "8K"]
    cbar = fig.axes[1]
    assert "baseline faster" in cbar.get_ylabel() and "gluon faster" in cbar.get_ylabel()
    assert plots.ratio_span([0.85, 1.1]) == pytest.approx(1.2) and plots.ratio_span([0.99]) == pytest.approx(1.15)
    plt.close(fig)


def test_short_size_labels_and_readable_ticks():
    assert [plots.fmt_size(n) for n in (16384, 5120, 1536, 2880, 256, 131072)] == ["16K", "5K", "1.5K", "2880", "256", "128K"]
    rows = [dict(variant="v", M=1024, N=n, sol_datasheet_pct=50.0) for n in (1536, 2560, 2880, 3584, 5120, 6144, 7168,
                                                                             12288, 14336, 18432, 20480, 24576)]
    fig = plots.sol_heatmap(pd.DataFrame(rows))
    labels = fig.axes[0].get_xticklabels()
    assert labels[0].get_text() == "1.5K" and labels[-1].get_text() == "24K"
    assert all(lb.get_rotation() == 45 for lb in labels)  # 12 columns: turned, so they cannot overlap
    plt.close(fig)


def test_roofline_one_panel_per_op_few_points_legend_outside():
    df = frame()
    fig = plots.roofline(df, device.DATASHEET["h200"], {"copy_gbps": 4200, "matmul_tflops": 660})
    assert [a.get_title() for a in fig.axes] == ["rms_norm"]  # a ceiling alone gets no panel (the dashed roof is it)
    plt.close(fig)
    gemm = dict(op="matmul", variant="gluon-ws", pattern="warp-specialized", M=4096, N=4096, K=4096, ms_median=0.21,
                bytes=3 * 4096**2 * 2, flops=2 * 4096**3, sol_datasheet_pct=60.0)
    df = pd.concat([df, pd.DataFrame([gemm])], ignore_index=True)
    fig = plots.roofline(df, device.DATASHEET["h200"], {"copy_gbps": 4200, "matmul_tflops": 660})
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["rms_norm", "matmul"]  # the matmul panel holds the ceiling record too
    # one marker per variant and intensity (best shape), not one per record: 2 variants x 1 AI + the ceiling
    assert sum(len(c.get_offsets()) for c in axes[0].collections if hasattr(c, "get_offsets")
               and c.__class__.__name__ == "PathCollection") == 2
    leg = fig.legends[0]
    texts = [t.get_text() for t in leg.get_texts()]
    assert "torch" in texts and "triton" in texts and "cuBLAS ceiling" in texts
    fig.canvas.draw()
    lb = leg.get_window_extent()
    assert all(not lb.overlaps(a.get_window_extent()) for a in axes)  # outside the data area (below the panels)
    plt.close(fig)
    three = pd.concat([df, df[df.op == "rms_norm"].assign(op="layer_norm")], ignore_index=True)
    fig = plots.roofline(three, device.DATASHEET["h200"])
    panels = [a for a in fig.axes if a.get_title()]
    assert [a.get_title() for a in panels] == ["rms_norm", "layer_norm", "matmul"]
    slot = [a for a in fig.axes if not a.get_title()]  # 3 panels on a 2x2 grid: the legend takes the free slot
    assert len(slot) == 1 and slot[0].get_legend() is not None and not slot[0].axison
    assert plots.roofline(df.iloc[0:0], None) is None
    plt.close(fig)


def test_speedup_bars_legend_outside_the_bars():
    norms = frame()[lambda d: d.op == "rms_norm"]
    fig = plots.speedup_bars(norms, "torch", ["triton"])
    ax = fig.axes[0]
    fig.canvas.draw()
    leg = ax.get_legend().get_window_extent()
    assert leg.y0 >= ax.get_window_extent().y1 - 1  # above the axes, never over a bar
    assert [t.get_text() for t in ax.texts][:1] == ["1.25"]  # each bar labelled with its value
    plt.close(fig)


def test_check_physical():
    df = frame()
    plots.check_physical(df)
    df.loc[0, "sol_datasheet_pct"] = 101.0
    with pytest.raises(plots.PhysicsError):
        plots.check_physical(df)


def test_geomean():
    assert plots.geomean([1, 4]) == pytest.approx(2.0)
