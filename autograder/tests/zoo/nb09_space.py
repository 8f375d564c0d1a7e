"""Solutions of notebook 09 for its declared contracts and input spaces (issues 35, 36), merged into
nb09's WRONG and RIGHT: a constant equal to the old probes' (the softmax scale), bad input answered
on one path only, float32-only code, kv_norm's eps, and right solutions written differently (the
naive path through F.scaled_dot_product_attention, an explicit error past max_seq_len, the counts
with math.prod)."""
import math

import torch
from torch import nn

from autograder.tests.zoo.nb09 import mla_class

class NaiveOverflowClamped(mla_class()):
    """The naive path writes what fits and answers past max_seq_len; the absorbed path raises: bad input must raise on both."""

    def _write(self, name, new, start_pos):
        if name in ("k_cache", "v_cache") and start_pos + new.shape[1] > self.cfg.max_seq_len:
            keep = self.cfg.max_seq_len - start_pos
            super()._write(name, new[:, :keep], start_pos)
            return torch.cat([getattr(self, name)[: new.shape[0], :start_pos], new], 1)
        return super()._write(name, new, start_pos)


class Float32Input(mla_class()):
    """Casts x to float32 whatever the layer's dtype: a layer moved to float64 crashes."""

    def forward(self, x, start_pos=0, absorb=False):
        return super().forward(x.float(), start_pos, absorb)


class OwnNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class NormEps5(mla_class()):
    """kv_norm written out with eps 1e-5 (LayerNorm's habit) where DeepSeek-V3's RMSNorm has 1e-6."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.kv_norm = OwnNorm(cfg.kv_lora_rank, 1e-5)


class NormEps6(NormEps5):
    """Right: kv_norm written out, eps 1e-6 as the course's RMSNorm, statistics in the input's dtype."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.kv_norm = OwnNorm(cfg.kv_lora_rank, 1e-6)


class NaiveSDPA(mla_class(style="naive sdpa")):
    """Right: the naive path's attention through F.scaled_dot_product_attention (bottom-right mask, the
    scale given, float32 then back), and an explicit ValueError past max_seq_len."""

    def forward(self, x, start_pos=0, absorb=False):
        if start_pos + x.shape[1] > self.cfg.max_seq_len:
            raise ValueError("the caches hold max_seq_len positions")
        return super().forward(x, start_pos, absorb)


# the counts ------------------------------------------------------------------------------------
def mla_count_512(n_layers, kv_lora_rank, qk_rope_head_dim):
    """DeepSeek-V3's latent width written in: right for V3 only."""
    return n_layers * (512 + qk_rope_head_dim)


def kv_count_prod(n_layers, n_kv_heads, head_dim):
    """Right: a product of the sizes, math.prod (an int)."""
    return math.prod((2, n_layers, n_kv_heads, head_dim))


WRONG = {
    "MultiHeadLatentAttention": {
        "softmax scale hard-coded to 1/sqrt(10)": (mla_class("scale of ten"), "nope + rope = 12"),
        "naive path answers past max_seq_len": (NaiveOverflowClamped, "returns a result for bad input"),
        "x cast to float32 whatever the dtype": (Float32Input, "dtype of its input"),
        "kv_norm with eps 1e-5": (NormEps5, "differs from the course's"),
    },
    "mla_cache_elements_per_token": {"kv_lora_rank hard-coded to 512": (mla_count_512, "is wrong")},
}

RIGHT = {
    "MultiHeadLatentAttention": {"kv_norm written out, eps 1e-6": NormEps6,
                                 "naive path through SDPA, ValueError past max_seq_len": NaiveSDPA},
    "kv_cache_elements_per_token": {"math.prod": kv_count_prod},
}
