"""Solutions of notebook 09 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.mla
from utils.rmsnorm import RMSNorm
from utils.rope import apply_rope


def rope_complex(x, positions, theta):
    """Adjacent pairs as complex numbers, as DeepSeek-V3 writes it. x (..., T, r)."""
    r = x.shape[-1]
    freqs = 1.0 / theta ** (torch.arange(0, r, 2, device=x.device).float() / r)
    cis = torch.polar(torch.ones(len(positions), r // 2, device=x.device), torch.outer(positions.float(), freqs))
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(z * cis).flatten(-2).type_as(x)


def mla_class(mistake=None, style="einsum"):
    """One MLA; `mistake` names one error, `style` a valid way of writing it."""

    class MLA(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            H, nope, rope, dv, c = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
            bias = mistake == "linear bias"
            if cfg.q_lora_rank == 0:
                self.wq = nn.Linear(cfg.dim, H * (nope + rope), bias=bias)
            else:
                self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=bias)
                self.q_norm = RMSNorm(cfg.q_lora_rank)
                self.wq_b = nn.Linear(cfg.q_lora_rank, H * (nope + rope), bias=bias)
            pe_width = H * rope if mistake == "rope key per head" else rope
            self.wkv_a = nn.Linear(cfg.dim, c + pe_width, bias=False)
            self.kv_norm = RMSNorm(c + rope if mistake == "kv_norm on rope key" else c)
            self.wkv_b = nn.Linear(c, H * (nope + dv), bias=False)
            self.wo = nn.Linear(H * dv, cfg.dim, bias=False)
            if style == "fixed max batch":  # as DeepSeek-V3: buffers for up to max_batch_size sequences
                for name, width in (("k_cache", (H, nope + rope)), ("v_cache", (H, dv)), ("kv_cache", (c,)), ("pe_cache", (rope,))):
                    self.register_buffer(name, torch.zeros(8, cfg.max_seq_len, *width), persistent=False)

        def _write(self, name, new, start_pos):
            B, T = new.shape[:2]
            cache = getattr(self, name, None)
            if style != "fixed max batch" and start_pos == 0 and (cache is None or cache.shape[0] != B):
                self.register_buffer(name, new.new_zeros(B, self.cfg.max_seq_len, *new.shape[2:]), persistent=False)
                cache = getattr(self, name)
            cache[:B, start_pos:start_pos + T] = new.detach()
            if mistake == "logs every write":  # a debugging list beside the cache: memory grows with every token
                self.__dict__.setdefault("log", []).append(new.detach().clone())
            if mistake == "reads the cache back":  # as V3's inference-only code: the new keys lose their gradients
                return cache[:B, :start_pos + T]
            return torch.cat([cache[:B, :start_pos], new], 1)

        def rotate(self, t, positions):  # t (B, H, T, r) or (B, T, r)
            if mistake == "half-split":
                return apply_rope(t, positions, self.cfg.rope_theta, interleaved=False)
            if style == "complex rope":
                return rope_complex(t, positions, self.cfg.rope_theta)
            return apply_rope(t, positions, 10000.0 if mistake == "default theta" else self.cfg.rope_theta, interleaved=True)

        def forward(self, x, start_pos=0, absorb=False):
            cfg = self.cfg
            B, T, _ = x.shape
            H, nope, rope, dv, c = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
            end = start_pos + T
            positions = torch.arange(T, device=x.device) if mistake == "positions restart" else torch.arange(start_pos, end, device=x.device)
            q = self.wq(x) if cfg.q_lora_rank == 0 else self.wq_b(self.q_norm(self.wq_a(x)))
            q = q.view(B, T, H, nope + rope).transpose(1, 2)  # (B, H, T, nope + rope)
            if mistake == "query rope first":
                q_pe, q_nope = q.split([rope, nope], dim=-1)
            else:
                q_nope, q_pe = q.split([nope, rope], dim=-1)
            kv = self.wkv_a(x)
            if mistake == "kv_norm on rope key":
                kv = self.kv_norm(kv)
            if mistake == "latent after rope key":
                k_pe, latent = kv.split([rope, c], dim=-1)
            else:
                latent, k_pe = kv.split([c, kv.shape[-1] - c], dim=-1)
            raw = latent
            if mistake not in ("no kv_norm", "kv_norm on rope key"):
                latent = self.kv_norm(latent)
            if mistake == "rope key per head":
                k_pe = self.rotate(k_pe.view(B, T, H, rope).transpose(1, 2), positions)  # (B, H, T, rope)
            else:
                k_pe = self.rotate(k_pe, positions)  # (B, T, rope)
            if mistake == "rope on whole head":
                q_full = self.rotate(torch.cat([q_nope, q_pe], -1), positions)
            else:
                q_full = torch.cat([q_nope, self.rotate(q_pe, positions)], -1)
            scale = {"scale nope": nope, "scale v": dv, "scale of ten": 10}.get(mistake, nope + rope) ** -0.5
            w = (self.wkv_b.weight.data if mistake == "weight data" else self.wkv_b.weight).view(H, nope + dv, c)
            w_k, w_v = (w[:, dv:], w[:, :dv]) if mistake == "values first" else (w[:, :nope], w[:, nope:])
            if mistake == "value rows from .data" and absorb:  # W_UV never trains on the absorbed path; W_UK does
                w_v = self.wkv_b.weight.data.view(H, nope + dv, c)[:, nope:]
            if mistake == "only absorbed":
                absorb = True
            if mistake == "only naive" and absorb:  # fills the latent caches, then computes as the naive path
                self._write("kv_cache", latent, start_pos), self._write("pe_cache", k_pe, start_pos)
                absorb = False
            if absorb and mistake == "re-expands":  # caches the latent, expands the whole prefix every step
                cached = self._write("kv_cache", latent, start_pos)
                pe = self._write("pe_cache", k_pe, start_pos)
                kvb = torch.einsum("bsc,hdc->bhsd", cached, torch.cat([w_k, w_v], 1))
                k = torch.cat([kvb[..., :nope], pe.unsqueeze(1).expand(B, H, end, rope)], -1)
                scores = q_full @ k.transpose(-2, -1)
                v, absorb = kvb[..., nope:], False
            elif absorb and mistake != "rope on whole head":
                stored = raw if mistake == "caches raw latent" else latent
                cached = self._write("kv_cache", stored, start_pos)  # (B, end, c)
                if mistake == "caches raw latent":
                    cached = self.kv_norm(cached)
                pe = self._write("pe_cache", k_pe if k_pe.dim() == 3 else k_pe[:, 0], start_pos)
                if style == "sdpa":  # MQA in disguise: one key-value head [latent | rope key], the latent as value
                    q_cat = torch.cat([torch.einsum("bhtd,hdc->bhtc", q_full[..., :nope], w_k), q_full[..., nope:]], -1)
                    k_cat = torch.cat([cached, pe], -1).unsqueeze(1).expand(B, H, end, c + rope)
                    allowed = torch.ones(T, end, dtype=torch.bool, device=x.device).tril(start_pos)
                    lat = F.scaled_dot_product_attention(q_cat, k_cat, cached.unsqueeze(1).expand(B, H, end, c),
                                                         attn_mask=allowed, scale=(nope + rope) ** -0.5)
                    out = torch.einsum("bhtc,hdc->bhtd", lat, w_v)
                    return self.wo(out.transpose(1, 2).reshape(B, T, H * dv))
                if style == "matmul":
                    q_lat = q_full[..., :nope] @ w_k  # (B, H, T, nope) @ (H, nope, c)
                    scores = q_lat @ cached.unsqueeze(1).transpose(-2, -1) + q_full[..., nope:] @ pe.unsqueeze(1).transpose(-2, -1)
                else:
                    q_lat = torch.einsum("bhtd,hdc->bhtc", q_full[..., :nope], w_k)
                    scores = torch.einsum("bhtc,bsc->bhts", q_lat, cached) + torch.einsum("bhtr,bsr->bhts", q_full[..., nope:], pe)
            else:
                kvb = torch.einsum("btc,hdc->bhtd", latent, torch.cat([w_k, w_v], 1))  # (B, H, T, nope + dv)
                k_nope, v = kvb.split([nope, dv], dim=-1)
                pe_heads = k_pe if k_pe.dim() == 4 else k_pe.unsqueeze(1).expand(B, H, T, rope)
                if mistake == "rope on whole head":
                    k = self.rotate(torch.cat([k_nope, kv[..., c:].unsqueeze(1).expand(B, H, T, rope)], -1), positions)
                else:
                    k = torch.cat([k_nope, pe_heads], -1)
                k = self._write("k_cache", k.transpose(1, 2), start_pos).transpose(1, 2)  # (B, H, end, nope + rope)
                v = self._write("v_cache", v.transpose(1, 2), start_pos).transpose(1, 2)
                if style == "naive sdpa":  # PyTorch's attention, in float32, cast back
                    allowed = torch.ones(T, end, dtype=torch.bool, device=x.device).tril(start_pos)
                    out = F.scaled_dot_product_attention(q_full.float(), k.float(), v.float(), attn_mask=allowed, scale=scale).type_as(x)
                    return self.wo(out.transpose(1, 2).reshape(B, T, H * dv))
                scores = q_full @ k.transpose(-2, -1)
            scores = scores * scale  # (B, H, T, end)
            if mistake != "no mask":
                scores = scores.masked_fill(torch.ones(T, end, dtype=torch.bool, device=x.device).triu(1 + start_pos), float("-inf"))
            if mistake == "exp without the max":  # right only while the scores stay small
                e = scores.float().exp()
                weights = e / e.sum(-1, keepdim=True)
            elif style == "softmax in the input's dtype":  # as precise in float32, more in float64: right
                weights = torch.softmax(scores, dim=-1)
            else:
                weights = torch.softmax(scores.float(), dim=-1)
            if mistake != "float32 weights":
                weights = weights.type_as(x)
            if absorb and mistake != "rope on whole head":
                out = torch.einsum("bhts,bsc->bhtc", weights, cached)
                out = torch.einsum("bhtc,hdc->bhtd", out, w_v)
            else:
                out = weights @ v
            return self.wo(out.transpose(1, 2).reshape(B, T, H * dv))

    return MLA


class Borrowed(utils.mla.MultiHeadLatentAttention):
    pass


def cache_twice(n_layers, kv_lora_rank, qk_rope_head_dim):
    return 2 * n_layers * (kv_lora_rank + qk_rope_head_dim)


def cache_one_layer(n_layers, kv_lora_rank, qk_rope_head_dim):
    return kv_lora_rank + qk_rope_head_dim


def cache_no_rope(n_layers, kv_lora_rank, qk_rope_head_dim):
    return n_layers * kv_lora_rank


def cache_right(n_layers, kv_lora_rank, qk_rope_head_dim):
    return sum(kv_lora_rank + qk_rope_head_dim for _ in range(n_layers))


def kv_no_two(n_layers, n_kv_heads, head_dim):
    return n_layers * n_kv_heads * head_dim


def kv_one_layer(n_layers, n_kv_heads, head_dim):
    return 2 * n_kv_heads * head_dim


def kv_right(n_layers, n_kv_heads, head_dim):
    per_layer = n_kv_heads * head_dim  # keys, then values
    return n_layers * (per_layer + per_layer)


WRONG = {
    "MultiHeadLatentAttention": {
        "every cache write also kept in a list": (mla_class("logs every write"), "holds more than it needs"),
        "half-split rope": (mla_class("half-split"), "adjacent pairs"),
        "rope_theta ignored": (mla_class("default theta"), "cfg.rope_theta"),
        "rope on the whole head": (mla_class("rope on whole head"), "not the whole head"),
        "scale over nope": (mla_class("scale nope"), "not by sqrt(qk_nope_head_dim)"),
        "scale over v_head_dim": (mla_class("scale v"), "not by sqrt(v_head_dim)"),
        "kv_norm skipped": (mla_class("no kv_norm"), "kv_norm is skipped"),
        "kv_norm on the rope key": (mla_class("kv_norm on rope key"), "never the rope key"),
        "a rope key per head": (mla_class("rope key per head"), "shared by all heads"),
        "positions restart at decode": (mla_class("positions restart"), "continue from start_pos"),
        "no causal mask": (mla_class("no mask"), "causal mask is missing"),
        "latent after the rope key": (mla_class("latent after rope key"), "[latent | rope key]"),
        "query rope part first": (mla_class("query rope first"), "[nope | rope]"),
        "wkv_b values first": (mla_class("values first"), "[nope keys | values]"),
        "absorbed path caches the raw latent": (mla_class("caches raw latent"), "un-normalised latent"),
        "linear layers with bias": (mla_class("linear bias"), "without bias"),
        "absorb ignored, naive path only": (mla_class("only naive"), "naive path's work"),
        "absorb ignored, latent cache only": (mla_class("only absorbed"), "k_cache"),
        "absorbed path re-expands the prefix": (mla_class("re-expands"), "multiplies every cached latent by wkv_b"),
        "wkv_b.weight.data (no gradient)": (mla_class("weight data"), "Gradients must reach"),
        "softmax weights left in float32": (mla_class("float32 weights"), "dtype of its input"),
        "attends over the detached cache": (mla_class("reads the cache back"), "Gradients must reach"),
        "absorbed value rows from wkv_b.weight.data": (mla_class("value rows from .data"), "MultiHeadLatentAttention.wkv_b.weight through MultiHeadLatentAttention"),
        "exp without subtracting the max": (mla_class("exp without the max"), "size 30"),
        "subclasses utils": (Borrowed, "yourself"),
    },
    "mla_cache_elements_per_token": {
        "latent cached twice": (cache_twice, "cached once"),
        "one layer only": (cache_one_layer, "every layer"),
        "rope key left out": (cache_no_rope, "rope key is cached too"),
        "calls utils": (utils.mla.mla_cache_elements_per_token, "yourself"),
    },
    "kv_cache_elements_per_token": {
        "no factor 2": (kv_no_two, "AND a value"),
        "one layer only": (kv_one_layer, "every layer"),
        "calls utils": (utils.mla.kv_cache_elements_per_token, "yourself"),
    },
}

RIGHT = {
    "MultiHeadLatentAttention": {
        "matmul layout (B, H, T, d)": mla_class(style="matmul"),
        "complex-number rope as DeepSeek-V3": mla_class(style="complex rope"),
        "buffers for a fixed max batch": mla_class(style="fixed max batch"),
        "absorbed path with SDPA (MQA in disguise)": mla_class(style="sdpa"),
        "softmax in the input's dtype": mla_class(style="softmax in the input's dtype"),
    },
    "mla_cache_elements_per_token": {"a sum over layers": cache_right},
    "kv_cache_elements_per_token": {"keys plus values": kv_right},
}

from autograder.tests.zoo import nb09_adversary, nb09_space  # noqa: E402  (they import mla_class from here)

for _more in (nb09_adversary, nb09_space):
    for _exercise, _entries in _more.WRONG.items():
        WRONG[_exercise].update(_entries)
    for _exercise, _entries in _more.RIGHT.items():
        RIGHT[_exercise].update(_entries)
