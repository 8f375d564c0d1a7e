"""Notebook 09's MLA restated from a state_dict, with one known mistake switched on at a time, so
that a wrong output can be named (DeepSeek-V3's layout: wkv_a's output [latent | rope key],
wkv_b's rows per head [nope keys | values], query heads [nope | rope], rope pairs adjacent)."""
import torch

from autograder.checks.nb09.contract import N, SEGMENTS
from utils.rope import apply_rope

MISTAKES = {  # name: (English, Chinese)
    "half-split": ("RoPE must rotate adjacent pairs (2i, 2i+1) as DeepSeek-V3 does: apply_rope(..., interleaved=True), not the half-split layout.",
                   "RoPE 必须像 DeepSeek-V3 那样旋转相邻的一对 (2i, 2i+1)：使用 apply_rope(..., interleaved=True)，而不是前后两半的布局。"),
    "rope on whole head": ("RoPE must rotate only the last qk_rope_head_dim coordinates of each query head and the shared rope key, not the whole head.",
                           "RoPE 只能旋转每个查询头的最后 qk_rope_head_dim 个坐标和共享的 rope 键，而不是整个头。"),
    "default theta": ("RoPE must use the configured base cfg.rope_theta (not 10,000 always): pass it to apply_rope.",
                      "RoPE 必须使用配置中的基数 cfg.rope_theta（而不是总用 10,000）：把它传给 apply_rope。"),
    "scale nope": ("The scores must be divided by sqrt(qk_nope_head_dim + qk_rope_head_dim), the width of the whole query head, not by sqrt(qk_nope_head_dim).",
                   "分数必须除以 sqrt(qk_nope_head_dim + qk_rope_head_dim)，即整个查询头的宽度，而不是 sqrt(qk_nope_head_dim)。"),
    "scale v": ("The scores must be divided by sqrt(qk_nope_head_dim + qk_rope_head_dim), the width of the query-key dot product, not by sqrt(v_head_dim).",
                "分数必须除以 sqrt(qk_nope_head_dim + qk_rope_head_dim)，即查询与键点积的宽度，而不是 sqrt(v_head_dim)。"),
    "no kv_norm": ("The latent must go through kv_norm before wkv_b expands it (and before it is cached): kv_norm is skipped.",
                   "潜在向量在被 wkv_b 展开之前（以及被缓存之前）必须经过 kv_norm：你跳过了 kv_norm。"),
    "positions restart": ("At decode the rope positions must continue from start_pos (start_pos ... start_pos + T - 1); yours restart at 0.",
                          "解码时 rope 的位置必须从 start_pos 接着数（start_pos ... start_pos + T - 1）；你的位置又从 0 开始了。"),
    "no mask": ("The causal mask is missing: a query may not see keys after its own position.",
                "缺少因果掩码：查询不能看到它自己位置之后的键。"),
    "latent after rope key": ("wkv_a's output is [latent | rope key]: the first kv_lora_rank numbers are the latent, the last qk_rope_head_dim the rope key.",
                              "wkv_a 的输出是 [潜在向量 | rope 键]：前 kv_lora_rank 个数是潜在向量，最后 qk_rope_head_dim 个数是 rope 键。"),
    "query rope first": ("Each query head is [nope | rope]: its first qk_nope_head_dim coordinates have no position, the last qk_rope_head_dim are rotated.",
                         "每个查询头的布局是 [nope | rope]：前 qk_nope_head_dim 个坐标不带位置，最后 qk_rope_head_dim 个坐标被旋转。"),
    "values first": ("wkv_b's rows, head by head, are [nope keys | values]: split each head's qk_nope_head_dim + v_head_dim outputs in that order.",
                     "wkv_b 的行逐头排列为 [nope 键 | 值]：请按这个顺序切分每个头的 qk_nope_head_dim + v_head_dim 个输出。"),
}


def _rms(v, w):
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def restated(state, cfg, x, positions, mistake=None):
    """MLA over all tokens of x (B, N, dim), token i at positions[i], causal in token order."""
    B, n, _ = x.shape
    H, nope, rope, dv, c = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank

    def rot(t):  # (B, n, ..., r): rope along the token axis
        t4 = t if t.dim() == 4 else t.unsqueeze(2)
        theta = 10000.0 if mistake == "default theta" else cfg.rope_theta
        out = apply_rope(t4.transpose(1, 2), positions, theta, interleaved=mistake != "half-split").transpose(1, 2)
        return out if t.dim() == 4 else out.squeeze(2)

    q = x @ state["wq.weight"].T if cfg.q_lora_rank == 0 else \
        _rms(x @ state["wq_a.weight"].T, state["q_norm.weight"]) @ state["wq_b.weight"].T
    q = q.view(B, n, H, nope + rope)
    q_nope, q_pe = (q[..., rope:], q[..., :rope]) if mistake == "query rope first" else (q[..., :nope], q[..., nope:])
    kv = x @ state["wkv_a.weight"].T
    latent, k_pe = (kv[..., rope:], kv[..., :rope]) if mistake == "latent after rope key" else (kv[..., :c], kv[..., c:])
    if mistake != "no kv_norm":
        latent = _rms(latent, state["kv_norm.weight"])
    kvb = (latent @ state["wkv_b.weight"].T).view(B, n, H, nope + dv)
    k_nope, v = (kvb[..., dv:], kvb[..., :dv]) if mistake == "values first" else (kvb[..., :nope], kvb[..., nope:])
    k_pe = k_pe.unsqueeze(2).expand(B, n, H, rope)
    if mistake == "rope on whole head":
        q, k = rot(torch.cat([q_nope, q_pe], -1)), rot(torch.cat([k_nope, k_pe], -1))
    else:
        q, k = torch.cat([q_nope, rot(q_pe)], -1), torch.cat([k_nope, rot(k_pe)], -1)
    width = {"scale nope": nope, "scale v": dv}.get(mistake, nope + rope)
    scores = torch.einsum("bshd,bthd->bhst", q, k) / width ** 0.5
    if mistake != "no mask":
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v)
    return out.flatten(2) @ state["wo.weight"].T


def _mistakes(state, cfg, x, start, end):
    def outputs():
        plain = torch.arange(N)
        restart = torch.cat([torch.arange(e - s) for s, e in SEGMENTS])
        for name, (en, zh) in MISTAKES.items():
            positions = restart if name == "positions restart" else plain
            out = restated(state, cfg, x[:, :end], positions[:end], None if name == "positions restart" else name)
            yield out[:, start:end], en, zh
    return outputs
