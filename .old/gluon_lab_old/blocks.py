"""A Llama-style decoder block built from torch modules, for the compiled-model study of the
Inductor rewrite (gluon_lab_old.inductor): RMSNorm -> q/k/v projections -> causal
F.scaled_dot_product_attention -> o projection -> residual add -> RMSNorm -> SwiGLU MLP
(silu(gate) * up -> down) -> residual add. No rotary embedding or KV cache: the block is here for
its norms and their neighbours, and their shapes are Llama-2-7B's (hidden 4096, 32 heads of 128,
MLP 11008) by default. Weights are random (normal, std 0.02), never zeros."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int = 4096, heads: int = 32, mlp: int = 11008, eps: float = 1e-6,
                 dtype=torch.bfloat16, device=None):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        kw = dict(dtype=dtype, device=device)
        self.heads, self.head_dim = heads, hidden // heads
        self.attn_norm = nn.RMSNorm(hidden, eps=eps, **kw)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False, **kw)
        self.o = nn.Linear(hidden, hidden, bias=False, **kw)
        self.mlp_norm = nn.RMSNorm(hidden, eps=eps, **kw)
        self.gate_up = nn.Linear(hidden, 2 * mlp, bias=False, **kw)
        self.down = nn.Linear(mlp, hidden, bias=False, **kw)
        g = torch.Generator(device="cpu").manual_seed(0)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 1:  # norm weights around 1, not all ones (a weight that does nothing hides bugs)
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.02 * torch.randn(p.shape, generator=g))

    def forward(self, x):
        B, S, H = x.shape
        h = self.attn_norm(x)
        q, k, v = self.qkv(h).view(B, S, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, S, H))
        h = self.mlp_norm(x)
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)

    def flops(self, B: int, S: int) -> int:
        """Nominal FLOPs of one forward: the four projections (2·T·in·out) and the attention (causal half
        of 2·2·B·heads·S²·head_dim)."""
        T = B * S
        mm = sum(2 * T * m.in_features * m.out_features for m in (self.qkv, self.o, self.gate_up, self.down))
        return mm + 2 * B * self.heads * S * S * self.head_dim
