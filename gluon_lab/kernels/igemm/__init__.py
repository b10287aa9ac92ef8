"""The implicit-GEMM template: one warp-specialized / pipelined mainloop, built from swappable pieces.

A kernel of the lab's GEMM family is   ring  x  producer  x  schedule  x  consumer  x  epilogue:

* ring (ring.py): the empty/full mbarrier ring of NUM_STAGES shared-memory slots and its protocol;
* producers (producers.py): how the A and B operands of one k-step arrive in a slot — tiled TMA boxes
  (GEMM), one shifted TMA box per filter tap (conv at stride 1 and the parity-split views of stride 2
  and dgrad), the wgrad boxes (dy^T and the tap-shifted x), the 16-byte cp.async copies for rows that are
  not 128-byte aligned (GEMM) and the cp.async im2col gather (conv of any shape);
* schedules (schedule.py): which CTA owns which tile and which k-steps — persistent data-parallel,
  split-K, last-wave split, stream-K — as device functions and the host plans that size grid and workspace;
* consumers: wgmma over the ring, cooperative (two warpgroups on one tile) or ping-pong (one warpgroup
  per tile, alternating epilogues) — in the instances;
* epilogues (epilogues.py): the TMA-stored tile, the fp32 partial and the deterministic fixups.

Instances: gemm.py (single-stream persistent GEMM: tma_k_step + tile_space), gemm_ws.py (warp-specialized
GEMM: TMA or cp.async producer x every schedule x cooperative / ping-pong consumer x tile / partial
epilogue), conv.py (fprop / dgrad sub-problems: tap-box producer, data-parallel or split-K / stream-K
schedules; wgrad: wgrad producer, K split over pixels; gather: the cp.async producer for any shape).
"""
