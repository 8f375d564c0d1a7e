"""One small GPT, reused by notebooks 07-12: where attention sits in a decoder (notebook 07).

GPT-2's shape (Radford et al., 2019; Raschka, *Build a Large Language Model (From Scratch)*,
ch. 4): token + learned position embeddings, n_layers pre-norm blocks
    x = x + attention(LayerNorm(x));   x = x + feed_forward(LayerNorm(x))
with a GELU feed-forward of width 4 * emb_dim, then a final LayerNorm and the output head that
gives one logit per vocabulary entry. No dropout: the course uses it for inference.

The attention class is pluggable (`GPTModel(cfg, attention=...)`, a callable cfg -> module with
forward(x, kv_cache=None)), and every layer takes its own cache: `forward(idx, caches)` with
caches a list of one cache per layer (`model.new_caches(...)`). Positions continue from the
caches' seq_len, so a decode step of one token gets the position it really has.

Shapes: idx (B, T) token ids; x (B, T, emb_dim); logits (B, T, vocab_size).
Run its tests: `.venv/bin/pytest utils/tests/test_gpt.py`.
"""
from dataclasses import dataclass

import torch
from torch import nn

from utils.kv_cache import CachedMultiHeadAttention, GroupedQueryAttention, KVCache


@dataclass
class GPTConfig:
    vocab_size: int = 50257  # GPT-2's BPE
    context_length: int = 1024
    emb_dim: int = 768
    n_heads: int = 12
    n_layers: int = 12
    qkv_bias: bool = False
    n_kv_groups: int | None = None  # None: one KV head per query head (MHA); 1: MQA
    learned_positions: bool = True  # False when the attention brings its own (RoPE, notebook 08)


def default_attention(cfg: GPTConfig) -> nn.Module:
    if cfg.n_kv_groups is None or cfg.n_kv_groups == cfg.n_heads:
        return CachedMultiHeadAttention(cfg.emb_dim, cfg.emb_dim, cfg.context_length, cfg.n_heads, cfg.qkv_bias)
    return GroupedQueryAttention(cfg.emb_dim, cfg.emb_dim, cfg.context_length, cfg.n_heads, cfg.n_kv_groups,
                                 cfg.qkv_bias)


class FeedForward(nn.Module):
    """Per-token MLP: widen 4x, GELU (GPT-2's tanh approximation), narrow back."""

    def __init__(self, emb_dim):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(emb_dim, 4 * emb_dim), nn.GELU(approximate="tanh"),
                                    nn.Linear(4 * emb_dim, emb_dim))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    """Pre-norm: attention mixes tokens, the feed-forward works on each token alone."""

    def __init__(self, cfg: GPTConfig, attention=default_attention):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.emb_dim)
        self.att = attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.emb_dim)
        self.ff = FeedForward(cfg.emb_dim)

    def forward(self, x, kv_cache=None):  # (B, T, D) -> (B, T, D)
        x = x + self.att(self.norm1(x), kv_cache=kv_cache)
        return x + self.ff(self.norm2(x))


class GPTModel(nn.Module):
    def __init__(self, cfg: GPTConfig, attention=default_attention):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.emb_dim) if cfg.learned_positions else None
        self.trf_blocks = nn.ModuleList(TransformerBlock(cfg, attention) for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.emb_dim)
        self.out_head = nn.Linear(cfg.emb_dim, cfg.vocab_size, bias=False)

    def forward(self, idx, caches=None):  # (B, T) -> (B, T, vocab_size)
        T = idx.shape[1]
        start = 0 if caches is None else caches[0].seq_len  # the new tokens come after the cached ones
        if start + T > self.cfg.context_length:
            raise ValueError(f"{start} cached + {T} new tokens exceed context_length={self.cfg.context_length}")
        x = self.tok_emb(idx)  # (B, T, D)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(start, start + T, device=idx.device))
        for i, block in enumerate(self.trf_blocks):
            x = block(x, None if caches is None else caches[i])
        return self.out_head(self.final_norm(x))

    def new_caches(self, batch_size, max_seq_len, cache_cls=KVCache):
        """One empty cache per layer, shaped for that layer's key/value heads."""
        p = next(self.parameters())
        return [cache_cls(batch_size, max_seq_len, getattr(b.att, "num_kv_heads", b.att.num_heads), b.att.head_dim,
                          dtype=p.dtype, device=p.device) for b in self.trf_blocks]


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
