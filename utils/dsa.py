"""DeepSeek Sparse Attention (DeepSeek-V3.2-Exp): a lightning indexer picks the keys MLA reads (13).

The indexer scores every cached position s for the query token t with a few cheap heads over ONE
key per token shared by all index heads,
    I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]),   w = weights_proj(x) * n_heads**-0.5 * head_dim**-0.5,
then each query keeps its `index_topk` best positions and MLA (notebook 09) attends to those only:
the same selection for every MLA head of that query.

Layouts are DeepSeek-V3.2-Exp's `inference/model.py` (`Indexer`, `MLA`), so its state_dict loads:
`indexer.wq_b` reads MLA's query latent qr = q_norm(wq_a(x)); `indexer.wk` then `indexer.k_norm`
(a LayerNorm with a bias) make the shared key; the rope part comes FIRST in the indexer's heads,
[pe | nope], and its RoPE pairs (i, i + d/2) (half-split, "non-interleaved"), while MLA keeps
[nope | pe] and interleaved pairs. The first release rotated the indexer interleaved; DeepSeek
corrected it on 2025-11-17 (`interleaved_rope=True` reproduces the first release).
Left out: FP8 (act_quant, the FP8 key cache and its scales) and the Hadamard rotation that spreads
outliers before it (q . k is unchanged by it), and YaRN beyond 4096 positions, as in utils.mla.

`python -m utils.bench_sparse` times one decode step, dense against sparse.
Tests: `.venv/bin/pytest utils/tests/test_dsa.py`.
"""
from dataclasses import dataclass

import torch
from torch import nn

from utils.causal import causal_mask
from utils.mla import MLAConfig, MultiHeadLatentAttention
from utils.rope import apply_rope


@dataclass(kw_only=True)
class DSAConfig(MLAConfig):
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048


def write_cache(module: nn.Module, name: str, new: torch.Tensor, start_pos: int, max_seq_len: int) -> torch.Tensor:
    """Store new (B, T, ...) in buffer `name` at start_pos (a prefill sizes it); return positions 0 .. start_pos + T - 1."""
    B, T = new.shape[:2]
    cache = getattr(module, name)
    if start_pos == 0 and (cache.shape[0] != B or cache.dtype != new.dtype or cache.device != new.device):
        cache = new.new_zeros(B, max_seq_len, *new.shape[2:])
        setattr(module, name, cache)
    elif start_pos > 0 and cache.shape[0] < B:
        raise ValueError(f"{name} holds a batch of {cache.shape[0]} from its prefill, got {B}: prefill (start_pos=0) first")
    cache[:B, start_pos:start_pos + T] = new.detach()
    if not new.requires_grad:  # inference: a view of the cache, never a copy of the whole prefix per step
        return cache[:B, :start_pos + T]
    return torch.cat([cache[:B, :start_pos], new], dim=1)  # gradients flow through the new tokens


class LightningIndexer(nn.Module):
    def __init__(self, cfg: DSAConfig, interleaved_rope: bool = False):
        super().__init__()
        self.cfg, self.interleaved_rope = cfg, interleaved_rope
        H, d = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = nn.Linear(cfg.q_lora_rank, H * d, bias=False)
        self.wk = nn.Linear(cfg.dim, d, bias=False)
        self.k_norm = nn.LayerNorm(d, eps=1e-6)
        self.weights_proj = nn.Linear(cfg.dim, H, bias=False)
        self.register_buffer("k_cache", torch.zeros(0, cfg.max_seq_len, d), persistent=False)

    def _rope_first(self, t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate the FIRST qk_rope_head_dim features of t (B, [H,] T, d) along its token axis."""
        r = self.cfg.qk_rope_head_dim
        pe = apply_rope(t[..., :r], positions, self.cfg.rope_theta, interleaved=self.interleaved_rope)
        return torch.cat([pe, t[..., r:]], dim=-1)

    def forward(self, x: torch.Tensor, qr: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        cfg = self.cfg
        B, T, _ = x.shape
        end = start_pos + T
        positions = torch.arange(start_pos, end, device=x.device)
        H, d = cfg.index_n_heads, cfg.index_head_dim
        q = self._rope_first(self.wq_b(qr).view(B, T, H, d).transpose(1, 2), positions)  # (B, H, T, d)
        k = self._rope_first(self.k_norm(self.wk(x)), positions)  # (B, T, d), one key for all index heads
        k = write_cache(self, "k_cache", k, start_pos, cfg.max_seq_len)  # (B, end, d)
        w = self.weights_proj(x) * (H ** -0.5 * d ** -0.5)  # (B, T, H)
        # every (query, head) row against the one shared key matrix: one matmul, no copy of k per head
        scores = torch.relu(q.transpose(1, 2).reshape(B, T * H, d) @ k.transpose(1, 2)).view(B, T, H, end)
        index = (scores * w.unsqueeze(-1)).sum(2)  # ReLU per head first, then the weighted sum over heads
        return index.masked_fill(causal_mask(T, end, device=x.device), float("-inf"))


def topk_indices(index_scores: torch.Tensor, topk: int):
    """Positions of the min(topk, S) highest scores of each query, and which of them are -inf (blocked)."""
    values, indices = index_scores.topk(min(topk, index_scores.shape[-1]), dim=-1)
    return indices, values == float("-inf")


def topk_key_mask(index_scores: torch.Tensor, topk: int) -> torch.Tensor:
    """(B, T, S) bool, True = blocked: all but each query's top-k finite scores."""
    indices, blocked = topk_indices(index_scores, topk)
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, indices, ~blocked)
    return ~keep


class SparseMLA(MultiHeadLatentAttention):
    """09's MLA (same parameters, caches and paths) whose queries read only their index_topk keys."""

    def __init__(self, cfg: DSAConfig, interleaved_indexer_rope: bool = False):
        if cfg.q_lora_rank <= 0:
            raise ValueError("SparseMLA needs q_lora_rank > 0: the indexer reads MLA's query latent")
        super().__init__(cfg)
        self.indexer = LightningIndexer(cfg, interleaved_indexer_rope)

    def _write(self, name: str, new: torch.Tensor, start_pos: int) -> torch.Tensor:
        return write_cache(self, name, new, start_pos, self.cfg.max_seq_len)  # 09's, without the copy at inference

    def forward(self, x: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:
        cfg = self.cfg
        B, T, _ = x.shape
        end = start_pos + T
        H, nope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.v_head_dim
        positions = self._positions(start_pos, T, x.device)
        q_nope, q_pe, qr = self._queries(x, positions)  # 09's queries; the indexer also reads their latent qr
        latent, k_pe = self._latent_and_rope_key(x, positions)
        indices, blocked = topk_indices(self.indexer(x, qr, start_pos), cfg.index_topk)  # (B, T, k): per query, not per head
        if absorb:  # read only the selected latents: the work per step grows with index_topk, not with end
            w_kv_b = self.wkv_b.weight.view(H, nope + dv, cfg.kv_lora_rank)
            q_latent = torch.einsum("bshd,hdc->bshc", q_nope, w_kv_b[:, :nope])
            c, pe = self._write("kv_cache", latent, start_pos), self._write("pe_cache", k_pe, start_pos)
            c_sel, pe_sel = gather_positions(c, indices), gather_positions(pe, indices)  # (B, T, k, .)
            scores = torch.einsum("bshc,bskc->bshk", q_latent, c_sel) + torch.einsum("bshr,bskr->bshk", q_pe, pe_sel)
            scores = (scores * self.softmax_scale).masked_fill(blocked.unsqueeze(2), float("-inf"))
            weights = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)
            out = torch.einsum("bshk,bskc->bshc", weights, c_sel)
            out = torch.einsum("bshc,hdc->bshd", out, w_kv_b[:, nope:])
        else:  # V3.2's prefill: full scores, then the index mask (selected keys 0, the others -inf)
            k, v = self._expand(latent, k_pe)
            k, v = self._write("k_cache", k, start_pos), self._write("v_cache", v, start_pos)
            scores = torch.einsum("bshd,bthd->bsht", torch.cat([q_nope, q_pe], dim=-1), k) * self.softmax_scale
            hidden = torch.ones(B, T, end, dtype=torch.bool, device=x.device).scatter(-1, indices, blocked)
            hidden |= causal_mask(T, end, device=x.device)
            weights = scores.masked_fill(hidden.unsqueeze(2), float("-inf")).softmax(dim=-1, dtype=torch.float32).type_as(x)
            out = torch.einsum("bsht,bthd->bshd", weights, v)
        return self.wo(out.flatten(2))


def gather_positions(cache: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """cache (B, S, w), indices (B, T, k) -> (B, T, k, w): the rows each query selected."""
    B, T, k = indices.shape
    return cache.gather(1, indices.reshape(B, T * k, 1).expand(-1, -1, cache.shape[-1])).view(B, T, k, -1)


def fill_caches(module: SparseMLA, context: int, generator: torch.Generator, batch: int = 1):
    """Caches of `context` positions with the statistics a prefill leaves (RMS-normalised latents,
    unit rope keys, LayerNorm-ed index keys), for timing decode steps without a long prefill.
    Drawn where the generator lives, then moved to the module's device and dtype."""
    cfg = module.cfg
    weight = module.wkv_a.weight
    for owner, name, width in ((module, "kv_cache", cfg.kv_lora_rank), (module, "pe_cache", cfg.qk_rope_head_dim),
                               (module.indexer, "k_cache", cfg.index_head_dim)):
        drawn = torch.randn(batch, context, width, generator=generator, device=generator.device)
        write_cache(owner, name, drawn.to(weight.device, weight.dtype), 0, cfg.max_seq_len)
