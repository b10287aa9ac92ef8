"""gluon_lab.analysis.gemm (notebook 04's GEMM studies) on the fixture records (04's file and 03's, which
holds the GEMM comparison) and on small probe logs written here: values recomputed by hand from the raw
lines, table shapes, the consumer schedules read from the source, the no-records paths. CPU-only."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gluon_lab import plots
from gluon_lab.analysis import common as cm, gemm as G, gemm_probe as GP, pipelined as P

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "records"
GEMM_RUN = "20261129T182504Z-97594533"  # in 03's file: the newest run with all four GEMMs


def raw(name="04-warp-specialization.jsonl"):
    return [json.loads(ln) for ln in (FIX / "h200" / name).read_text().splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def ctx():
    return cm.setup(G.NB, mode="replay", results_dir=FIX)


@pytest.fixture(scope="module")
def recs(ctx):
    return cm.load(ctx), cm.load(dataclasses.replace(ctx, notebook=G.NB3))  # 04's records and 03's


@pytest.fixture(scope="module")
def gm(recs):
    return G.gemm_records(G.gemm_candidates(*recs))


def test_gemm_from_pattern_3s_file(recs, gm):
    use, use03 = recs
    mm = G.gemm_candidates(use, use03)
    assert set(mm.run_id) == {GEMM_RUN, "20261129T181340Z-1a9f4e29"} and set(gm.run_id) == {GEMM_RUN}
    assert G.older_runs_line(gm, mm) == "other GEMM runs not used here: 20261129T181340Z-1a9f4e29"
    t = G.gemm_table(gm)
    assert t.shape == (3, 8) and t.columns[-1] == "gluon-ws / gluon-pipelined"
    sq = {d["variant"]: d["tflops"] for d in raw("03-multibuffer-pipelining.jsonl") if d["run_id"] == GEMM_RUN
          and d["op"] == "matmul" and d["pattern"] != "ceiling" and d["shape"] == {"M": 8192, "N": 8192, "K": 8192}}
    assert t.loc[(8192, 8192, 8192), "gluon-ws / gluon-pipelined"] == round(sq["gluon-ws"] / sq["gluon-pipelined"], 3)
    gt = G.gemm_targets(t)
    assert list(gt.met) == [sq["gluon-ws"] / sq["torch"] >= 1.0, sq["gluon-ws"] / sq["torch"] >= 1.05,
                            plots.geomean(t["gluon-ws / cuBLAS"]) >= 0.98, bool((t["gluon-ws / gluon-pipelined"] >= 1).all())]
    lines = G.gemm_ceiling_lines(gm, use, use03)
    assert lines[0].startswith(f"run {GEMM_RUN}: its own cuBLAS ceiling") and "note: gluon-pipelined 4096x4096x4096" in lines[1]
    cfgs = G.gemm_configs(gm)  # labels (tile, stages, warps, group_m), not raw JSON
    assert cfgs.shape == (3, 3) and not cfgs.iloc[:, 0].str.startswith("{").any()


def test_ws_sweep_and_the_earlier_one(ctx, recs, gm):
    use, use03 = recs
    wsw = G.ws_sweep_records(use)
    tab, ok, bad = G.sweep_table(wsw)
    assert tab.shape == (8, 4) and len(ok) == 32 and not len(bad)
    skipped, line = G.sweep_skipped(wsw)
    assert len(skipped) == 16 and set(skipped.shape) == {16, 4} and set(skipped["shape"]) == {"4096x4096x4096"}
    assert line == "48 configs in the current plan; 32 recorded; 0 recorded as errors; 16 without a record"
    best = G.sweep_best(ok)
    sq = [d for d in raw() if (d["config"] or {}).get("study") == "ws-sweep" and d["shape"] == {"M": 8192, "N": 8192, "K": 8192}]
    assert best.loc["8192x8192x8192", "tflops"] == max(d["tflops"] for d in sq)
    rr = G.run_to_run(gm, ok)
    assert list(rr.index) == ["8192x8192x8192", "8192x14336x4096"] and (rr["sweep / grid"] > 0).all()
    old = G.old_ws_sweep_views(use03)
    old_tab = [o for o in old if isinstance(o, pd.DataFrame)][0]
    cells = old_tab.to_numpy().ravel().tolist()
    assert sum(isinstance(c, str) and c.startswith("does not fit (needs") for c in cells) == 8  # the 8 failed records
    views, ws_ok = G.ws_sweep_views(ctx, wsw, gm)
    assert len(ws_ok) == 32 and "**Run to run**: the same gluon-ws config and shape, timed in two runs:" in views[-2:]


def test_consumer_schedule_read_from_the_source():
    lines = G.consumer_schedule()
    assert lines[0].startswith("ws_gemm_kernel: partitions _ws_consumer, cp_producer (") and \
        "warps_per_cta=[num_warps, 1]" in lines[0] and "worker warps [CP_WARPS]" in lines[0]
    assert lines[1].startswith("ws_gemm_kernel: partitions _ws_consumer, tma_producer (") and "worker warps [1]" in lines[1]
    assert lines[2].startswith("ws_pingpong_gemm_kernel: partitions _pp_consumer, _pp_consumer, tma_producer")
    assert "worker warps [4, 1]" in lines[2]


def test_probe_log_parse(tmp_path):
    """gemm_probe.py's log: timing lines parsed with TFLOP/s recomputed, FAILED lines skipped, a line that is
    neither named by file:line; the alignment and decode tables from it, a decode shape without split-K rows
    included (NaN there)."""
    log = tmp_path / "p.log"
    lines = ["NVIDIA H200 torch 2.11.0+cu130",
             "align     2500x1736  x4104   contig cuBLAS                                        58.9 us    605 TF/s 1605 MHz",
             "align     2500x1736  x4104   contig ws 128x128 8w s5                             108.8 us    328 TF/s 1980 MHz",
             "align     2500x1736  x4104   pad    ws 128x128 8w s5                              72.0 us    494 TF/s 1785 MHz",
             "decode      16x6144  x4096   contig cuBLAS                                        16.1 us     50 TF/s 1965 MHz",
             "decode      16x6144  x4096   contig ws swap 16x64 s6 split-K 1                    17.9 us     45 TF/s 1980 MHz",
             "decode      16x6144  x4096   contig ws swap 16x64 s6 split-K 2                    FAILED ValueError: x"]
    log.write_text("\n".join(lines) + "\n")
    pr = GP.probe_records(log)
    assert len(pr) == 5 and pr.loc[1, "TFLOP/s"] == round(2 * 2500 * 1736 * 4104 / 108.8 / 1e6)  # recomputed: 327
    at = GP.alignment_table(pr)
    assert at.loc[0, "contig / padded"] == round(108.8 / 72.0, 2)
    dt = GP.decode_probe_table(pr)
    assert dt.loc[0, "unsplit / cuBLAS"] == round(16.1 / 17.9, 3) and dt["split / cuBLAS"].isna().all()
    log.write_text(lines[0] + "\n" + lines[1].replace("605 TF/s", "700 TF/s") + "\n")
    with pytest.raises(ValueError, match=r"p\.log:2: 700 TF/s does not match"):
        GP.probe_records(log)


def test_probe_split_promotion_kernels_and_phases(tmp_path):
    """The probe's split part (one operand padded at a time, '== promotion X' sections), its kernels part and its
    phases part: parsed, tabled, and a bad line named by file:line; the committed logs parse."""
    log = tmp_path / "s.log"
    lines = ["kernel     777x5000  x1000   contig cuBLAS: nvjet_sm90_tst_128x272_64x4_4x1_v_bz_coopA_NNT",
             "split      777x5000  x1000   contig ws 128x128 8w s5                              30.5 us    255 TF/s 1965 MHz",
             "split      777x5000  x1000   pad-ab ws 128x128 8w s5                              21.5 us    361 TF/s 1965 MHz",
             "== promotion NONE",
             "split      777x5000  x1000   contig ws 128x128 8w s5                              30.4 us    256 TF/s 1965 MHz",
             "split      777x5000  x1000   pad-ab ws 128x128 8w s5                              20.0 us    389 TF/s 1965 MHz"]
    log.write_text("\n".join(lines) + "\n")
    pr = GP.probe_records(log)
    assert list(pr.promotion) == ["L2_128B", "L2_128B", "NONE", "NONE"]
    t = GP.operand_split_table(pr).set_index("promotion")
    assert t.loc["L2_128B", "contig / pad-ab"] == round(30.5 / 21.5, 2) and t.loc["NONE", "contig / pad-ab"] == 1.52
    assert GP.cublas_kernels(log).loc[0, "cuBLAS kernel"].startswith("nvjet_sm90_tst_128x272")
    log.write_text(lines[0].replace("cuBLAS:", "cuBLAS") + "\n")
    with pytest.raises(ValueError, match=r"s\.log:1: not a gemm_probe.py kernel line"):
        GP.cublas_kernels(log)
    ph = tmp_path / "ph.log"
    ph.write_text("phases    2048x2048  x2048   128x128 4w s4 stream-K 1     total    36.9 us : ws_gemm_kernel 29.7 us | "
                  "streamk_reduce_kernel 7.1 us\n")
    r = GP.phase_records(ph)
    assert r.loc[0, "GEMM kernel us"] == 29.7 and r.loc[0, "reduce / fixup us"] == 7.1
    ph.write_text("phases    2048x2048  x2048   128x128 4w s4 stream-K 1     total    40.0 us : ws_gemm_kernel 29.7 us | "
                  "streamk_reduce_kernel 7.1 us\n")
    with pytest.raises(ValueError, match=r"ph\.log:1: total 40.0 us is not the sum"):
        GP.phase_records(ph)
    committed = GP.probe_records(GP.probe_path(None, "gemm-probe-split.log"))  # the committed logs parse
    assert set(committed.promotion) == {"L2_128B", "L2_256B", "NONE"} and len(GP.phase_records()) >= 10


def test_order_rounds_and_same_config_spread(tmp_path):
    """order_table: per-round cuBLAS / config ratios recomputed from the timing lines (a line without its round
    is refused); same_config_spread pairs a heuristic case with the explicit case of the same config only."""
    log = tmp_path / "o.log"
    lines = ["order     4096x4096  x4096   contig cuBLAS round 0                               200.0 us    687 TF/s 1500 MHz",
             "order     4096x4096  x4096   contig ws 128x256 8w s3 group_m 8 round 0          190.0 us    723 TF/s 1500 MHz",
             "order     4096x4096  x4096   contig cuBLAS round 1                               210.0 us    654 TF/s 1500 MHz",
             "order     4096x4096  x4096   contig ws 128x256 8w s3 group_m 8 round 1          200.0 us    687 TF/s 1500 MHz"]
    log.write_text("\n".join(lines) + "\n")
    t = GP.order_table(GP.probe_records(log))
    assert len(t) == 1 and t.loc[0, "rounds"] == 2 and t.loc[0, "min"] == 1.05 and t.loc[0, "max"] == round(200 / 190, 3)
    log.write_text(lines[0].replace(" round 0", "") + "\n")
    with pytest.raises(ValueError, match="must name their round"):
        GP.order_table(GP.probe_records(log))
    base = {"op": "matmul", "M": 64, "N": 64, "K": 64, "passed": True, "rel_err": 0.0}
    cfg = {"BM": 128, "BN": 256, "num_warps": 8, "study": "gemm-shapes"}
    st = pd.DataFrame([
        {**base, "variant": "gluon-ws", "ms_median": 1.1, "config_key": json.dumps({**cfg, "heuristic": True, "sm_clock_mhz": 1})},
        {**base, "variant": "gluon-ws", "ms_median": 1.0, "config_key": json.dumps({**cfg, "sm_clock_mhz": 2})},
        {**base, "variant": "gluon-ws", "ms_median": 0.5, "config_key": json.dumps({**cfg, "BN": 128})},
        {**base, "variant": "torch", "ms_median": 1.0, "config_key": json.dumps({"study": "gemm-shapes"})}])
    sp = G.same_config_spread(st)
    assert len(sp) == 1 and sp.loc[0, "heuristic / explicit"] == 1.1


def test_sktrace_log_parse(tmp_path):
    """ci/gemm_probe.py sktrace lines: '-' is NaN (no unit of that kind), a malformed line is named by file:line;
    the committed log parses (a data-parallel and a stream-K row per shape)."""
    log = tmp_path / "t.log"
    ok = ("sktrace    128x6144  x4096   stream-K 1     128x64 4w CTAs  132 | ns per k-step: whole tiles        - pieces"
          "      365 | epilogue ns: whole        - partial      512 | unit gap       96 | span    19.3 us")
    log.write_text(ok + "\n")
    r = GP.sktrace_records(log)
    assert np.isnan(r.loc[0, "ns / k-step, whole tiles"]) and r.loc[0, "ns / k-step, pieces"] == 365
    assert r.loc[0, "tile"] == "128x64 4w" and r.loc[0, "kernel span us"] == 19.3
    log.write_text(ok.replace("| span", "span") + "\n")
    with pytest.raises(ValueError, match=r"t\.log:1: not a gemm_probe.py sktrace line"):
        GP.sktrace_records(log)
    committed = GP.sktrace_records()
    assert len(committed) >= 6 and set(committed.schedule.str.split().str[0]) == {"data-parallel", "stream-K"}


def test_gemm_takeaways(gm):
    t = G.gemm_table(gm)
    lines = G.gemm_takeaways(gm=gm, gemm_tab=t, gt=G.gemm_targets(t))
    rp = plots.geomean(t["gluon-ws / gluon-pipelined"])
    assert lines[0].startswith(f"**GEMM: {G.verdict(rp)} (vs gluon-pipelined)**") and f"geomean {rp:.3f}x" in lines[0]
    assert lines[1].startswith("  GEMM targets: >= 1.00x cuBLAS at 8192^3 (target)") and len(lines) == 2
    assert G.verdict(1.01) == "WS pays" and G.verdict(0.99) == "on par (geomean within 2%)" and G.verdict(0.9) == "WS does not pay here"
    assert G.gemm_takeaways() == [] and G.shape_takeaways(G.EMPTY) == [G.pingpong_takeaway(G.EMPTY), G.shape_sweep_takeaway(G.EMPTY)]


def test_no_records_give_notes_not_errors(ctx, tmp_path):
    c = cm.setup(G.NB, mode="replay", results_dir=tmp_path)
    empty = cm.load(c)
    assert len(G.gemm_records(G.gemm_candidates(empty, empty))) == 0 and G.gemm_table(P.EMPTY).empty
    assert G.gemm_targets(P.EMPTY).empty and G.gemm_ceiling_lines(P.EMPTY, empty, empty) == []
    views, ok = G.ws_sweep_views(c, G.ws_sweep_records(empty), P.EMPTY)
    assert views == [f"**No records for the gluon-ws GEMM ws-sweep** in `{tmp_path / 'h200'}/`."] and not len(ok)
    assert G.old_ws_sweep_views(empty) == []
