"""Multi-head latent attention, DeepSeek-V2/V3's attention with a compressed KV cache (09, 12).

Keys and values of all heads are rebuilt from ONE latent vector per token:
    c_kv = kv_norm(first kv_lora_rank outputs of wkv_a(x))        (B, T, kv_lora_rank)
    [k_nope | v] per head = wkv_b(c_kv)                            (B, T, H, nope + v_head_dim)
Queries are compressed too when q_lora_rank > 0: q = wq_b(q_norm(wq_a(x))), else q = wq(x).
RoPE cannot act on keys rebuilt from the latent without blocking the absorption below, so a
small decoupled part carries positions: the last qk_rope_head_dim outputs of wkv_a give ONE
rope key per token shared by all heads, and each query head has qk_rope_head_dim rope
coordinates after its qk_nope_head_dim plain ones. RoPE rotates adjacent pairs (2i, 2i+1),
as DeepSeek-V3's `view_as_complex` does. Scores are scaled by 1/sqrt(nope + rope).

Two paths, same outputs:
- naive (absorb=False): cache full per-head keys (H * (nope + rope)) and values (H * v_head_dim).
- absorbed (absorb=True): cache only c_kv and the rope key, kv_lora_rank + qk_rope_head_dim numbers
  per token; fold wkv_b's key half into the query (q_nope W_UK, per head) and apply its value
  half after the attention over the latents.

Layouts are DeepSeek-V3's `inference/model.py`: parameter names, wkv_a's output as
[latent | rope key], wkv_b's rows per head as [nope keys | values], wq(_b)'s rows per head as
[nope | rope]; so the state_dict of V3's MLA (after V3's own convert.py, one rank) loads
unchanged. Omitted: YaRN. V3's code multiplies the softmax scale by mscale**2 and stretches the
slow rope pairs whenever its max_seq_len exceeds original_seq_len = 4096 (the default
max_seq_len is 16384, so as shipped it always does); this module equals V3's code built with
max_seq_len <= 4096 (utils.rope.yarn_* computes what YaRN changes). `LatentAttention` is the
stepping stone: the latent cache and the absorption, without RoPE.

Cache and batch: the buffers k_cache, v_cache (naive) and kv_cache, pe_cache (absorbed) have
shape (B, max_seq_len, ...). A prefill (start_pos == 0) allocates them for the batch B of its
input (and its dtype); decoding (start_pos > 0) writes positions start_pos.. of that same batch,
so one sequence batch keeps one path from prefill to the last token. Cached values are detached:
gradients flow through the tokens of the current call only, which is all training needs.

`python -m utils.mla` times one decode step of both paths at growing contexts.
Tests: `.venv/bin/pytest utils/tests/test_mla.py`.
"""
import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from utils.benchmark import device_of, expect_same, timed
from utils.causal import causal_mask
from utils.rmsnorm import RMSNorm
from utils.rope import apply_rope


@dataclass
class MLAConfig:
    dim: int
    n_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    max_seq_len: int
    rope_theta: float = 10000.0


class MultiHeadLatentAttention(nn.Module):
    def __init__(self, cfg: MLAConfig):
        super().__init__()
        self.cfg = cfg
        H, nope, rope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.qk_head_dim = nope + rope
        if cfg.q_lora_rank == 0:
            self.wq = nn.Linear(cfg.dim, H * self.qk_head_dim, bias=False)
        else:
            self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(cfg.q_lora_rank)
            self.wq_b = nn.Linear(cfg.q_lora_rank, H * self.qk_head_dim, bias=False)
        self.wkv_a = nn.Linear(cfg.dim, cfg.kv_lora_rank + rope, bias=False)
        self.kv_norm = RMSNorm(cfg.kv_lora_rank)
        self.wkv_b = nn.Linear(cfg.kv_lora_rank, H * (nope + dv), bias=False)
        self.wo = nn.Linear(H * dv, cfg.dim, bias=False)
        self.softmax_scale = self.qk_head_dim ** -0.5
        widths = {"k_cache": (H, self.qk_head_dim), "v_cache": (H, dv),
                  "kv_cache": (cfg.kv_lora_rank,), "pe_cache": (rope,)}
        for name, width in widths.items():  # batch 0 until a prefill sizes them
            self.register_buffer(name, torch.zeros(0, cfg.max_seq_len, *width), persistent=False)

    def _write(self, name: str, new: torch.Tensor, start_pos: int) -> torch.Tensor:
        """Store new (B, T, ...) at start_pos; return every position up to the end, (B, end, ...)."""
        B, T = new.shape[:2]
        cache = getattr(self, name)
        if start_pos == 0 and (cache.shape[0] != B or cache.dtype != new.dtype or cache.device != new.device):
            cache = new.new_zeros(B, self.cfg.max_seq_len, *new.shape[2:])
            setattr(self, name, cache)
        elif start_pos > 0 and cache.shape[0] < B:
            raise ValueError(f"{name} holds a batch of {cache.shape[0]} from its prefill, got {B}: prefill (start_pos=0) first")
        cache[:B, start_pos:start_pos + T] = new.detach()
        return torch.cat([cache[:B, :start_pos], new], dim=1)

    def _latent_and_rope_key(self, x, positions):
        """(B, T, dim) -> kv_norm(latent) (B, T, c) and the rotated rope key (B, T, rope), one for all heads."""
        latent, k_pe = self.wkv_a(x).split([self.cfg.kv_lora_rank, self.cfg.qk_rope_head_dim], dim=-1)
        return self.kv_norm(latent), apply_rope(k_pe, positions, self.cfg.rope_theta, interleaved=True)

    def _expand(self, latent, k_pe):
        """The naive path's per-head keys [k_nope | k_pe] (B, T, H, nope + rope) and values (B, T, H, dv)."""
        B, T, _ = latent.shape
        H, nope, rope, dv = self.cfg.n_heads, self.cfg.qk_nope_head_dim, self.cfg.qk_rope_head_dim, self.cfg.v_head_dim
        k_nope, v = self.wkv_b(latent).view(B, T, H, nope + dv).split([nope, dv], dim=-1)
        return torch.cat([k_nope, k_pe.unsqueeze(2).expand(B, T, H, rope)], dim=-1), v

    @torch.no_grad()
    def fill_cache(self, x: torch.Tensor, absorb: bool = False):
        """Write what a prefill of x would cache, without computing its attention (to time decoding)."""
        latent, k_pe = self._latent_and_rope_key(x, torch.arange(x.shape[1], device=x.device))
        entries = {"kv_cache": latent, "pe_cache": k_pe} if absorb else dict(zip(("k_cache", "v_cache"), self._expand(latent, k_pe)))
        for name, new in entries.items():
            self._write(name, new, 0)

    def _positions(self, start_pos: int, T: int, device) -> torch.Tensor:
        """Positions start_pos .. start_pos + T - 1, after checking that they fit the caches."""
        end = start_pos + T
        if end > self.cfg.max_seq_len:
            raise ValueError(f"positions up to {end} do not fit max_seq_len={self.cfg.max_seq_len}")
        return torch.arange(start_pos, end, device=device)

    def _queries(self, x: torch.Tensor, positions: torch.Tensor):
        """q_nope (B, T, H, nope), q_pe (B, T, H, rope) with RoPE applied, and the normalised query
        latent (B, T, q_lora_rank), None without a query compression (what V3.2's indexer reads)."""
        cfg = self.cfg
        B, T, _ = x.shape
        qr = None if cfg.q_lora_rank == 0 else self.q_norm(self.wq_a(x))
        q = self.wq(x) if qr is None else self.wq_b(qr)
        q_nope, q_pe = q.view(B, T, cfg.n_heads, self.qk_head_dim).split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        q_pe = apply_rope(q_pe.transpose(1, 2), positions, cfg.rope_theta, interleaved=True).transpose(1, 2)
        return q_nope, q_pe, qr

    def forward(self, x: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:
        cfg = self.cfg
        B, T, _ = x.shape
        end = start_pos + T
        H, nope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.v_head_dim
        positions = self._positions(start_pos, T, x.device)
        q_nope, q_pe, _ = self._queries(x, positions)  # (B, T, H, nope), (B, T, H, rope)
        latent, k_pe = self._latent_and_rope_key(x, positions)

        if not absorb:
            k, v = self._expand(latent, k_pe)
            k, v = self._write("k_cache", k, start_pos), self._write("v_cache", v, start_pos)  # (B, end, H, .)
            scores = torch.einsum("bshd,bthd->bsht", torch.cat([q_nope, q_pe], dim=-1), k)
        else:
            w_kv_b = self.wkv_b.weight.view(H, nope + dv, cfg.kv_lora_rank)  # rows per head: [W_UK | W_UV]
            q_latent = torch.einsum("bshd,hdc->bshc", q_nope, w_kv_b[:, :nope])  # W_UK folded into the query
            c = self._write("kv_cache", latent, start_pos)  # (B, end, c)
            pe = self._write("pe_cache", k_pe, start_pos)  # (B, end, rope)
            scores = torch.einsum("bshc,btc->bsht", q_latent, c) + torch.einsum("bshr,btr->bsht", q_pe, pe)
        scores = scores * self.softmax_scale  # (B, T, H, end)
        if T > 1:
            scores = scores.masked_fill(causal_mask(T, end, device=x.device).unsqueeze(1), float("-inf"))
        weights = scores.softmax(dim=-1, dtype=torch.float32).type_as(x)

        if not absorb:
            out = torch.einsum("bsht,bthd->bshd", weights, v)
        else:
            out = torch.einsum("bsht,btc->bshc", weights, c)  # attend over latents
            out = torch.einsum("bshc,hdc->bshd", out, w_kv_b[:, nope:])  # then W_UV
        return self.wo(out.flatten(2))  # (B, T, H * dv) -> (B, T, dim)


class LatentAttention(nn.Module):
    """MLA's core without positions: one cached latent per token, keys and values rebuilt per head.

    The stepping stone of notebook 09 (no RoPE, no query compression, no norm). Both paths cache
    only the latent (kv_lora_rank numbers per token). absorb=False rebuilds every cached
    latent's keys and values at every step; absorb=True folds wkv_b's key rows into the query
    and applies its value rows after attending over the latents, and never rebuilds them.
    """

    def __init__(self, dim: int, n_heads: int, kv_lora_rank: int, head_dim: int, max_seq_len: int):
        super().__init__()
        self.n_heads, self.head_dim, self.kv_lora_rank = n_heads, head_dim, kv_lora_rank
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.wkv_a = nn.Linear(dim, kv_lora_rank, bias=False)  # down: the latent
        self.wkv_b = nn.Linear(kv_lora_rank, n_heads * 2 * head_dim, bias=False)  # up: [keys | values] per head
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.register_buffer("kv_cache", torch.zeros(0, max_seq_len, kv_lora_rank), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:
        B, T, _ = x.shape
        H, hd, end = self.n_heads, self.head_dim, start_pos + T
        if start_pos == 0:
            self.kv_cache = x.new_zeros(B, self.kv_cache.shape[1], self.kv_lora_rank)
        latent = self.wkv_a(x)  # (B, T, c)
        self.kv_cache[:, start_pos:end] = latent.detach()
        c = torch.cat([self.kv_cache[:, :start_pos], latent], dim=1)  # (B, end, c)
        q = self.wq(x).view(B, T, H, hd)
        w = self.wkv_b.weight.view(H, 2 * hd, self.kv_lora_rank)  # rows per head: [W_UK | W_UV]
        if absorb:
            q_latent = torch.einsum("bshd,hdc->bshc", q, w[:, :hd])  # W_UK folded into the query
            scores = torch.einsum("bshc,btc->bsht", q_latent, c)
        else:
            k, v = self.wkv_b(c).view(B, end, H, 2 * hd).split([hd, hd], dim=-1)  # every latent rebuilt
            scores = torch.einsum("bshd,bthd->bsht", q, k)
        scores = scores.masked_fill(causal_mask(T, end, device=x.device).unsqueeze(1), float("-inf"))
        weights = (scores / hd ** 0.5).softmax(dim=-1)
        if absorb:
            out = torch.einsum("bshc,hdc->bshd", torch.einsum("bsht,btc->bshc", weights, c), w[:, hd:])
        else:
            out = torch.einsum("bsht,bthd->bshd", weights, v)
        return self.wo(out.flatten(2))


def mla_cache_elements_per_token(n_layers: int, kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """Numbers cached per token by the absorbed path: the latent and the shared rope key, every layer."""
    return n_layers * (kv_lora_rank + qk_rope_head_dim)


def kv_cache_elements_per_token(n_layers: int, n_kv_heads: int, head_dim: int) -> int:
    """A key and a value of head_dim per KV head per layer: MHA (all heads), GQA (groups), MQA (1)."""
    return 2 * n_layers * n_kv_heads * head_dim


def cache_bytes(module: MultiHeadLatentAttention, absorb: bool) -> int:
    """Bytes held by the cache buffers of one path, from the tensors themselves."""
    names = ("kv_cache", "pe_cache") if absorb else ("k_cache", "v_cache")
    return sum(getattr(module, n).numel() * getattr(module, n).element_size() for n in names)


@contextlib.contextmanager
def one_thread():
    """Time on one thread: on a shared, busy CPU, multi-threaded ops wait for every core and
    the timings turn into noise; one thread compares the algorithms, not the scheduler."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def prefill_in_chunks(module: nn.Module, x: torch.Tensor, absorb: bool, chunk: int = 256):
    """Fill any MLA's cache with x through forward(x, start_pos, absorb), `chunk` tokens at a
    time, so that the (chunk, context) scores stay small; `fill_cache` when the module has it."""
    if hasattr(module, "fill_cache"):
        return module.fill_cache(x, absorb)
    for start in range(0, x.shape[1], chunk):
        module(x[:, start:start + chunk], start, absorb)


def decode_benchmark(cfg: MLAConfig, contexts, batch=1, repeats=5, seed=0, progress=None, module=None,
                     device=None) -> list[dict]:
    """Median seconds of one decode step (1 new token after `context` cached ones), naive vs absorbed.

    `module` is any MLA with `forward(x, start_pos, absorb)` (a learner's, in notebook 09), timed
    on its own device; by default this file's, with random weights, built on `device` (default:
    the default device). Each path's cache is filled once, up to the
    largest context; a step at start_pos=context then reads context + 1 positions. Rounds are
    interleaved so both paths see the same machine load, the median of `repeats` is kept
    (robust to a busy moment), and the two paths' outputs are checked equal at every context.
    """
    torch.manual_seed(seed)
    device = device_of(module if module is not None else device)
    if module is None:
        with torch.device(device):
            module = MultiHeadLatentAttention(cfg)
    mla = module.eval()
    longest = max(contexts)
    x = torch.randn(batch, longest + 1, cfg.dim, device=device)
    rows = []
    with torch.no_grad(), one_thread():
        for absorb in (False, True):
            prefill_in_chunks(mla, x[:, :longest], absorb)
        for context in (progress(contexts) if progress else contexts):
            new = x[:, longest:]  # any token will do; only the amount of cache read matters
            times = {False: [], True: []}
            for _ in range(repeats):
                for absorb in (False, True):
                    seconds, out = timed(lambda: mla(new, context, absorb), device)
                    times[absorb].append(seconds)
                    if absorb:
                        expect_same(out, naive_out, atol=1e-4, rtol=1e-3, what=f"absorbed vs naive at {context} tokens")
                    naive_out = out
            naive, absorbed = (sorted(times[a])[repeats // 2] for a in (False, True))
            rows.append({"context": context, "naive_ms": naive * 1e3, "absorbed_ms": absorbed * 1e3,
                         "speedup": naive / absorbed})
    return rows


if __name__ == "__main__":
    cfg = MLAConfig(dim=1024, n_heads=16, q_lora_rank=384, kv_lora_rank=128, qk_nope_head_dim=64,
                    qk_rope_head_dim=32, v_head_dim=64, max_seq_len=4097)  # room for the step after 4096 tokens
    print(f"{cfg}\none decode step, batch 1, one thread, median of 5 (naive caches full K and V, absorbed the latent):")
    print(f"{'context':>8} {'naive ms':>10} {'absorbed ms':>12} {'speedup':>8}")
    for r in decode_benchmark(cfg, [256, 512, 1024, 2048, 4096]):
        print(f"{r['context']:>8} {r['naive_ms']:>10.3f} {r['absorbed_ms']:>12.3f} {r['speedup']:>7.2f}x")
