"""Qwen3-Next's Gated DeltaNet layer (Qwen3.5 uses the same), under transformers' parameter names so
that it loads the state_dict of `Qwen3NextGatedDeltaNet` (notebook 16).

    x -> in_proj_qkvz -> q, k, v, z        x -> in_proj_ba -> b, a      (per key head: grouped value heads)
    q, k, v -> short causal depthwise convolution (kernel 4) -> SiLU
    beta = sigmoid(b)                      g = -exp(A_log) * softplus(a + dt_bias)   (log decay, < 0)
    o = gated delta rule(q, k, v, g, beta), q and k L2-normalised
    y = out_proj(RMSNorm(o) * SiLU(z))     (per value head, the norm's weight shared by the heads)

The layer carries two states from call to call: the convolution's last (kernel - 1) inputs and the
recurrent state of every value head. `forward(x, state)` with state None starts a new text; the
returned state continues it, one token or a chunk at a time.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from utils.linear_attention import chunk_gated_delta_rule, recurrent_gated_delta_rule


@dataclass
class GatedDeltaNetConfig:
    """The fields of transformers' Qwen3NextConfig that the layer reads (a Qwen3NextConfig works too);
    the defaults are Qwen3NextConfig's, those of Qwen3-Next-80B-A3B."""
    hidden_size: int = 2048
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6


class GatedRMSNorm(nn.Module):
    """RMSNorm of each value head's output (in float32), then times SiLU of the gate z."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x, z):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x.to(dtype) * F.silu(z.float())).to(dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, config, chunk_size: int = 64):
        super().__init__()
        c = config
        self.n_k, self.n_v = c.linear_num_key_heads, c.linear_num_value_heads
        self.d_k, self.d_v = c.linear_key_head_dim, c.linear_value_head_dim
        self.key_dim, self.value_dim = self.n_k * self.d_k, self.n_v * self.d_v
        self.kernel, self.chunk_size = c.linear_conv_kernel_dim, chunk_size
        self.conv_dim = 2 * self.key_dim + self.value_dim  # q, k and v are convolved, z is not
        self.in_proj_qkvz = nn.Linear(c.hidden_size, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(c.hidden_size, 2 * self.n_v, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, bias=False,
                                padding=self.kernel - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.n_v))
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.n_v)))  # decay rates; a checkpoint sets them
        self.norm = GatedRMSNorm(self.d_v, eps=c.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, c.hidden_size, bias=False)

    def _split(self, x):
        """q, k (B, T, n_k, d_k), v, z (B, T, n_v, d_v), b, a (B, T, n_v). The projections are laid out per
        key head: [q, k, v of its value heads, z of its value heads] and [b of its value heads, a of them]."""
        B, T, _ = x.shape
        r = self.n_v // self.n_k
        qkvz = self.in_proj_qkvz(x).view(B, T, self.n_k, 2 * self.d_k + 2 * r * self.d_v)
        q, k, v, z = qkvz.split([self.d_k, self.d_k, r * self.d_v, r * self.d_v], dim=-1)
        b, a = self.in_proj_ba(x).view(B, T, self.n_k, 2 * r).split([r, r], dim=-1)
        return (q, k, v.reshape(B, T, self.n_v, self.d_v), z.reshape(B, T, self.n_v, self.d_v),
                b.reshape(B, T, self.n_v), a.reshape(B, T, self.n_v))

    def _convolve(self, qkv, conv_state):
        """Causal depthwise convolution of (B, conv_dim, T) over the previous (kernel - 1) inputs and
        these: (SiLU of the outputs, the last kernel - 1 inputs, the next call's conv_state)."""
        if conv_state is None:
            conv_state = qkv.new_zeros(qkv.shape[0], self.conv_dim, self.kernel - 1)
        full = torch.cat([conv_state.to(qkv.dtype), qkv], dim=-1)
        out = F.conv1d(full, self.conv1d.weight, groups=self.conv_dim)  # no padding: T outputs
        return F.silu(out), full[..., full.shape[-1] - (self.kernel - 1):]

    def forward(self, x, state=None):
        """x (B, T, hidden_size); state None (a new text) or (conv_state (B, conv_dim, kernel - 1),
        recurrent_state (B, n_v, d_k, d_v)). Returns (y (B, T, hidden_size), the new state)."""
        B, T, _ = x.shape
        q, k, v, z, b, a = self._split(x)
        conv_state, recurrent_state = state if state is not None else (None, None)
        qkv = torch.cat([q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], dim=-1).transpose(1, 2)
        qkv, conv_state = self._convolve(qkv, conv_state)
        q, k, v = qkv.transpose(1, 2).split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q, k = q.reshape(B, T, self.n_k, self.d_k), k.reshape(B, T, self.n_k, self.d_k)
        v = v.reshape(B, T, self.n_v, self.d_v)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        rule = recurrent_gated_delta_rule if T == 1 and recurrent_state is not None else chunk_gated_delta_rule
        extra = {} if rule is recurrent_gated_delta_rule else {"chunk_size": self.chunk_size}
        o, recurrent_state = rule(q, k, v, g, beta, initial_state=recurrent_state, output_final_state=True,
                                  use_qk_l2norm=True, **extra)
        y = self.norm(o, z).reshape(B, T, self.value_dim)
        return self.out_proj(y), (conv_state, recurrent_state)
