"""More solutions of notebook 13 (merged into nb13's WRONG and RIGHT): alternatives written
differently from the reference, and mistakes beyond the first zoo, found in review."""
import math

import torch
from torch import nn

from autograder.tests.zoo.nb13 import indexer_cls
from utils.mla import MultiHeadLatentAttention
from utils.rope import apply_rope


# sliding_window_mask -------------------------------------------------------------------------
def mask_distance(num_queries, num_keys, window):
    """Valid: one broadcast distance p - j, blocked when negative or at least window."""
    distance = (torch.arange(num_queries) + num_keys - num_queries)[:, None] - torch.arange(num_keys)[None, :]
    return (distance < 0) | (distance >= window)


def mask_triu_or_tril(num_queries, num_keys, window):
    """Valid: the future (triu) or-ed with what is older than the window (tril)."""
    ones, shift = torch.ones(num_queries, num_keys, dtype=torch.bool), num_keys - num_queries
    return torch.triu(ones, diagonal=shift + 1) | torch.tril(ones, diagonal=shift - window)


# RollingKVCache ------------------------------------------------------------------------------
class RolledCache:
    """Valid: slots kept in position order by torch.roll (newest last)."""

    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.window, self.seq_len = window, 0
        self.k = torch.zeros(batch_size, num_kv_heads, window, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)

    def update(self, k_new, v_new):
        W, T, kept = self.window, k_new.shape[2], min(self.seq_len, self.window - 1)
        k = torch.cat([self.k[:, :, W - kept:], k_new.to(self.k.dtype)], 2)
        v = torch.cat([self.v[:, :, W - kept:], v_new.to(self.v.dtype)], 2)
        n = min(T, W)
        self.k, self.v = torch.roll(self.k, -n, 2), torch.roll(self.v, -n, 2)
        self.k[:, :, W - n:], self.v[:, :, W - n:] = k_new[:, :, T - n:], v_new[:, :, T - n:]
        self.seq_len += T
        return k, v

    def reset(self):
        self.seq_len = 0


class SlotLoopCache:
    """Valid: position p in slot p % window, read and written one position at a time."""

    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.window, self.seq_len = window, 0
        self.cache_k = torch.empty(batch_size, num_kv_heads, window, head_dim, dtype=dtype, device=device)
        self.cache_v = torch.empty_like(self.cache_k)

    def update(self, k_new, v_new):
        W = self.window
        old = range(max(0, self.seq_len - (W - 1)), self.seq_len)
        k = torch.cat([self.cache_k[:, :, [p % W for p in old]], k_new.to(self.cache_k.dtype)], 2)
        v = torch.cat([self.cache_v[:, :, [p % W for p in old]], v_new.to(self.cache_v.dtype)], 2)
        for t in range(k_new.shape[2]):
            slot = (self.seq_len + t) % W
            self.cache_k[:, :, slot], self.cache_v[:, :, slot] = k_new[:, :, t], v_new[:, :, t]
        self.seq_len += k_new.shape[2]
        return k, v

    def reset(self):
        self.seq_len = 0


# attention_with_sinks -------------------------------------------------------------------------
def _scores(q, k, mask):
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:  # (T_q, T_k) or (B, 1, T_q, T_k): both broadcast
        scores = torch.where(mask, torch.tensor(float("-inf"), dtype=scores.dtype), scores)
    return scores


def sinks_by_hand(q, k, v, sinks, mask=None):
    """Valid: the softmax written out (max, exp, sum), no torch.softmax."""
    scores = _scores(q, k, mask)
    scores = torch.cat([scores, sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)], -1)
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True))[..., :-1] @ v


def sinks_lse_column(sinks_sign=1.0, sink_factor=1.0):
    def attention_with_sinks(q, k, v, sinks, mask=None):
        scores = _scores(q, k, mask)
        sink = (sinks_sign * sink_factor * sinks)[None, :, None, None].expand(*scores.shape[:-1], 1)
        return torch.exp(scores - torch.logsumexp(torch.cat([scores, sink], -1), -1, keepdim=True)) @ v
    return attention_with_sinks


def sinks_not_exponentiated(q, k, v, sinks, mask=None):
    e = _scores(q, k, mask).exp()
    return e / (e.sum(-1, keepdim=True) + sinks[None, :, None, None]) @ v


def sinks_times_root(q, k, v, sinks, mask=None):
    return sinks_lse_column(sink_factor=math.sqrt(q.shape[-1]))(q, k, v, sinks, mask)


def sinks_key_scaled_in_place(q, k, v, sinks, mask=None):
    k.div_(math.sqrt(q.shape[-1]))  # the caller's keys change
    return _sink_softmax(q, k, v, sinks, mask)


def _sink_softmax(q, k, v, sinks, mask):  # k already carries the 1/sqrt(d)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks[None, :, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1] @ v


class DeviceIgnoredCache(RolledCache):
    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        super().__init__(batch_size, window, num_kv_heads, head_dim, dtype)  # device dropped


# LightningIndexer -----------------------------------------------------------------------------
def rotate_half_rope(t, positions, theta):
    """Half-split RoPE as x * cos + rotate_half(x) * sin (Llama's form)."""
    d = t.shape[-1]
    angles = positions.double()[:, None] / theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=t.device) / d)
    cos, sin = angles.cos().repeat(1, 2).to(t.dtype), angles.sin().repeat(1, 2).to(t.dtype)
    return t * cos + torch.cat([-t[..., d // 2:], t[..., :d // 2]], -1) * sin


def buffered_indexer(scale=None, mistake=None):
    """An indexer with a preallocated key buffer (as DeepSeek's k_cache), rotate_half RoPE and
    einsum; `scale` replaces index_n_heads**-0.5 * index_head_dim**-0.5 and `mistake` names another (None: valid)."""
    class LightningIndexer(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg, H, d = cfg, cfg.index_n_heads, cfg.index_head_dim
            self.wq_b = nn.Linear(cfg.q_lora_rank, H * d, bias=False)
            self.wk = nn.Linear(cfg.dim, d, bias=False)
            self.k_norm = nn.LayerNorm(d, eps=1e-6)
            self.weights_proj = nn.Linear(cfg.dim, H, bias=False)
            self.register_buffer("k_cache", torch.zeros(4, cfg.max_seq_len, d), persistent=False)

        def forward(self, x, qr, start_pos=0):
            c, (B, T, _) = self.cfg, x.shape
            H, d, r = c.index_n_heads, c.index_head_dim, c.qk_rope_head_dim
            end, pos = start_pos + T, torch.arange(start_pos, start_pos + T, device=x.device)
            q = self.wq_b(qr).view(B, T, H, d)
            q = torch.cat([rotate_half_rope(q[..., :r].transpose(1, 2), pos, c.rope_theta).transpose(1, 2), q[..., r:]], -1)
            k = self.wk(x) if mistake == "k_norm after rope" else self.k_norm(self.wk(x))
            if mistake != "key not rotated":
                k = torch.cat([rotate_half_rope(k[..., :r], pos, c.rope_theta), k[..., r:]], -1)
            self.k_cache[:B, start_pos:end] = self.k_norm(k) if mistake == "k_norm after rope" else k
            w = self.weights_proj(x) * ((H * d) ** -0.5 if scale is None else scale(H, d))
            index = torch.einsum("bths,bth->bts", torch.einsum("bthd,bsd->bths", q, self.k_cache[:B, :end]).relu(), w)
            return torch.where(torch.arange(end, device=pos.device)[None, :] > pos[:, None], float("-inf"), index)
    return LightningIndexer


# topk_key_mask -------------------------------------------------------------------------------
def topk_by_sort(index_scores, topk):
    """Valid: argsort, scatter the first topk, then drop the -inf ones."""
    order = index_scores.argsort(-1, descending=True)[..., :topk]
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter_(-1, order, True)
    return ~(keep & ~torch.isneginf(index_scores))


def topk_by_kth_value(index_scores, topk):
    """Wrong on ties (right without them): every score equal to the k-th is kept, more than topk keys."""
    kth = index_scores.topk(min(topk, index_scores.shape[-1]), -1).values[..., -1:]
    return ~((index_scores >= kth) & torch.isfinite(index_scores))


def topk_across_batch(index_scores, topk):
    flat = index_scores.transpose(0, 1).reshape(index_scores.shape[1], -1)  # (T, B * S): the batch mixed
    keep = torch.zeros_like(flat, dtype=torch.bool).scatter(-1, flat.topk(min(topk, flat.shape[-1]), -1).indices, True)
    return ~(keep & torch.isfinite(flat)).view(index_scores.shape[1], index_scores.shape[0], -1).transpose(0, 1)


def topk_no_min(index_scores, topk):
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, index_scores.topk(topk, -1).indices, True)
    return ~(keep & torch.isfinite(index_scores))


def topk_floor_instead_of_inf(index_scores, topk):
    """-inf replaced by a large negative number: the tie at the bottom lets future positions in."""
    floor = index_scores.masked_fill(torch.isneginf(index_scores), -1e9)
    return ~torch.zeros_like(floor, dtype=torch.bool).scatter(-1, floor.topk(min(topk, floor.shape[-1]), -1).indices, True)


# SparseMLA -------------------------------------------------------------------------------------
class GatherSparseMLA(MultiHeadLatentAttention):
    """Valid: gathers the selected keys (B, T, topk, ...) instead of masking all of them."""
    float32_softmax = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.indexer = indexer_cls()(cfg)

    def forward(self, x, start_pos=0, absorb=False):
        c, (B, T, _) = self.cfg, x.shape
        H, nope, rope, dv = c.n_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        pos = torch.arange(start_pos, start_pos + T, device=x.device)
        qr = self.q_norm(self.wq_a(x))
        q_nope, q_pe = self.wq_b(qr).view(B, T, H, nope + rope).split([nope, rope], -1)
        q_pe = apply_rope(q_pe.transpose(1, 2), pos, c.rope_theta, interleaved=True).transpose(1, 2)
        latent, k_pe = self._latent_and_rope_key(x, pos)
        best, idx = self.indexer(x, qr, start_pos).topk(min(c.index_topk, start_pos + T), -1)  # (B, T, K)
        b = torch.arange(B, device=x.device)[:, None, None]
        if absorb:
            w = self.wkv_b.weight.view(H, nope + dv, c.kv_lora_rank)
            lat = self._write("kv_cache", latent, start_pos)[b, idx]  # (B, T, K, C)
            pe = self._write("pe_cache", k_pe, start_pos)[b, idx]
            scores = torch.einsum("bthd,hdc,btkc->bthk", q_nope, w[:, :nope], lat) + torch.einsum("bthr,btkr->bthk", q_pe, pe)
        else:
            k, v = self._expand(latent, k_pe)
            k, v = self._write("k_cache", k, start_pos)[b, idx], self._write("v_cache", v, start_pos)[b, idx]
            scores = torch.einsum("bthd,btkhd->bthk", torch.cat([q_nope, q_pe], -1), k)
        scores = (scores * self.softmax_scale).masked_fill(torch.isneginf(best)[:, :, None], float("-inf"))
        weights = scores.float().softmax(-1).to(scores.dtype) if self.float32_softmax else scores.softmax(-1)
        if absorb:
            return self.wo(torch.einsum("bthk,btkc,hdc->bthd", weights, lat, w[:, nope:]).flatten(2))
        return self.wo(torch.einsum("bthk,btkhd->bthd", weights, v).flatten(2))


# Caught by the families of checks/harness.py --------------------------------------------------
class DictCache(SlotLoopCache):
    """Right outputs, but every position ever seen stays in a dict: a window that keeps everything."""

    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        super().__init__(batch_size, window, num_kv_heads, head_dim, dtype, device)
        self.seen = {}

    def update(self, k_new, v_new):
        for t in range(k_new.shape[2]):
            self.seen[self.seq_len + t] = (k_new[:, :, t].clone(), v_new[:, :, t].clone())
        return super().update(k_new, v_new)


def sinks_scores_detached(q, k, v, sinks, mask=None):  # the scores from a detached q: q never trains
    scores = q.detach() @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat((scores, sink), -1), -1)[..., :-1] @ v


def sinks_exp_unshifted(q, k, v, sinks, mask=None):  # exp without the maximum: right only for small logits
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = scores.exp()
    if mask is not None:
        e = e.masked_fill(mask, 0.0)
    return (e / (e.sum(-1, keepdim=True) + sinks.exp().view(1, -1, 1, 1))) @ v


def sinks_float32_cast_back(q, k, v, sinks, mask=None):  # the softmax in float32, cast back (Llama, Hugging Face)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1).to(scores.dtype)
    weights = torch.softmax(torch.cat((scores, sink), -1).float(), -1)[..., :-1].to(q.dtype)
    return weights @ v


def sinks_softmax_scaled_in_place(q, k, v, sinks, mask=None):  # right values; the softmax's output changed in place
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat((scores, sink), -1), -1)
    weights.mul_(1.0)  # softmax's backward needs its output as it was
    return weights[..., :-1] @ v


class _NoGradLinear(nn.Linear):
    def forward(self, x):
        with torch.no_grad():
            return super().forward(x)


def indexer_head_weights_no_grad():
    """Right scores, but the head weights computed under no_grad: weights_proj never trains."""
    class LightningIndexer(indexer_cls(style="einsum")):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.weights_proj = _NoGradLinear(cfg.dim, cfg.index_n_heads, bias=False)
    return LightningIndexer



class Float32SoftmaxSparseMLA(GatherSparseMLA):
    """Valid: the softmax in float32, cast back (Llama, Hugging Face)."""
    float32_softmax = True


class QueryLatentNoGradSparseMLA(GatherSparseMLA):
    """Right outputs, but the query latent's norm runs under no_grad: wq_a and q_norm never train."""

    def __init__(self, cfg):
        super().__init__(cfg)
        inner = self.q_norm.forward

        def forward(x):
            with torch.no_grad():
                return inner(x)
        self.q_norm.forward = forward

WRONG = {
    "attention_with_sinks": {
        "sink with the wrong sign": (sinks_lse_column(sinks_sign=-1.0), "not -sinks[h]"),
        "sink multiplied by sqrt(d)": (sinks_times_root, "not the sink"),
        "sink not exponentiated": (sinks_not_exponentiated, "exp(sinks[h])"),
        "keys scaled in place": (sinks_key_scaled_in_place, "in place"),
        "scores from a detached q": (sinks_scores_detached, "No gradient reaches input 1"),
        "exp without the maximum": (sinks_exp_unshifted, "on logits and sinks in the hundreds"),
        "softmax's output changed in place": (sinks_softmax_scaled_in_place, "cannot be backpropagated through"),
    },
    "RollingKVCache": {
        "device ignored": (DeviceIgnoredCache, "device=..."),
        "every position kept in a dict": (DictCache, "holds more than it needs"),
    },
    "LightningIndexer": {
        "head weights scaled by index_head_dim**-0.5 only": (buffered_indexer(lambda H, d: d ** -0.5), "both factors"),
        "head weights scaled by index_n_heads**-0.5 only": (buffered_indexer(lambda H, d: H ** -0.5), "both factors"),
        "head weights scaled by sqrt(index_head_dim / index_n_heads)": (buffered_indexer(lambda H, d: (d / H) ** 0.5), "no other factor"),
        "k_norm after RoPE": (buffered_indexer(mistake="k_norm after rope"), "BEFORE RoPE"),
        "key not rotated": (buffered_indexer(mistake="key not rotated"), "the shared key too"),
        "head weights under no_grad": (indexer_head_weights_no_grad(), "No gradient reaches LightningIndexer.weights_proj.weight"),
    },
    "SparseMLA": {
        "query latent under no_grad": (QueryLatentNoGradSparseMLA, "No gradient reaches SparseMLA.wq_a.weight"),
    },
    "topk_key_mask": {
        "top-k across the batch": (topk_across_batch, "not the best of the whole batch"),
        "topk larger than the positions crashes": (topk_no_min, "min(topk, positions)"),
        "-inf replaced by -1e9 (future chosen on ties)": (topk_floor_instead_of_inf, "never be selected"),
        # keeps every score equal to the k-th: more than topk keys on ties / 并列时保留的键多于 topk 个
        "k-th value threshold (more than topk on ties)": (topk_by_kth_value, "on ties at the k-th place"),
    },
}

RIGHT = {
    "sliding_window_mask": {"broadcast distance": mask_distance, "triu | tril": mask_triu_or_tril},
    "RollingKVCache": {"torch.roll, newest last": RolledCache, "slot p % window, one position at a time": SlotLoopCache},
    "attention_with_sinks": {"softmax by hand": sinks_by_hand, "log-sum-exp with the sink column": sinks_lse_column(),
                             "softmax in float32, cast back": sinks_float32_cast_back},
    "LightningIndexer": {"key buffer, rotate_half RoPE, einsum": buffered_indexer()},
    "topk_key_mask": {"argsort then scatter": topk_by_sort},
    "SparseMLA": {"gather the selected keys": GatherSparseMLA, "softmax in float32, cast back": Float32SoftmaxSparseMLA},
}
