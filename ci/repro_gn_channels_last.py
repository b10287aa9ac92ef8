"""Reproduce (on the H200) the 'illegal instruction' of gluon-chunked's channels-last GroupNorm path
(group_norm_kernel with CL=True, refused since 2026-11-29): one launch per box shape, each in its own
process (a sticky CUDA error ends a process), printing the plan and the outcome. Run under
compute-sanitizer to get the faulting SASS instruction:
    compute-sanitizer --tool memcheck python3 ci/repro_gn_channels_last.py C H
"""
import sys

import torch

from gluon_lab.kernels import chunked as C
from gluon_lab.specs.group import as_layout

Cc, H = int(sys.argv[1]), int(sys.argv[2])
C.CHANNELS_LAST_ENABLED = True  # the refusal under test
x = as_layout(torch.randn(2, Cc, H, H, device="cuda", dtype=torch.bfloat16), "channels_last")
plan = C.GroupPlan.make("channels_last", Cc, H * H, 32, "bfloat16")
print("plan", plan, flush=True)
try:
    y = C.launch_group(x, 32, None, None, 1e-5)
    torch.cuda.synchronize()
    ref = torch.nn.functional.group_norm(x.float(), 32)
    print("ran: max abs err", (y.float() - ref).abs().max().item(), flush=True)
except Exception as e:  # the sticky error, as torch reports it
    print("error:", type(e).__name__, str(e).splitlines()[0], flush=True)
