"""Notebook 16's input families (linear attention and the delta rule), as data: batch items that
differ, grouped value heads, lengths that are not multiples of the chunk, one token, an initial
state given or not, the final state asked for or not, gates at their extremes (g from -60 to -30, beta 0
and 1), non-contiguous inputs, float64 and bfloat16, and a head count that is not a multiple."""
import torch

from autograder.checks import generator, randn
from autograder.checks.harness import Family, Probe

COMPARES = ("values", "shape", "dtype", "device", "inputs")


def _rand(*shape, seed):
    return torch.rand(*shape, generator=generator(seed))


def _strided(x):
    """The same values as a non-contiguous tensor: (B, T, H, d) stored as (B, H, T, d), as a head split gives it."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _qkv(seed, B=2, T=6, H=2, d_k=4, d_v=3, scale=1.0, dtype=torch.float32, strided=False):
    q, k, v = randn(B, T, H, d_k, seed=seed) * scale, randn(B, T, H, d_k, seed=seed + 1), randn(B, T, H, d_v, seed=seed + 2)
    out = tuple(t.to(dtype) for t in (q, k, v))
    return tuple(map(_strided, out)) if strided else out


def _linear(seed, **sizes):
    return _qkv(seed, **sizes), {}


def _step(seed, B=2, H=3, d_k=4, d_v=3, g=(-1.0, 0.0), beta=None, dtype=torch.float32, strided=False):
    state = randn(B, H, d_k, d_v, seed=seed) * 0.5
    q, k, v = randn(B, H, d_k, seed=seed + 1) * 0.5, randn(B, H, d_k, seed=seed + 2) * 0.5, randn(B, H, d_v, seed=seed + 3)
    gate = g[0] + (g[1] - g[0]) * _rand(B, H, seed=seed + 4)
    b = _rand(B, H, seed=seed + 5) if beta is None else torch.tensor(beta).repeat(B, H // len(beta) + 1)[:, :H]
    args = [t.to(dtype) for t in (state, q, k, v, gate, b)]
    if strided:
        args = [t.T.contiguous().T if t.dim() == 2 else t.transpose(0, 1).contiguous().transpose(0, 1) for t in args]
    return tuple(args), {}


def _rule(seed, B=2, T=7, H_k=2, H_v=2, d_k=4, d_v=3, initial=True, final=True, l2=False, g=(-1.0, 0.0), beta=None,
          dtype=torch.float32, strided=False, chunk=None):
    """Arguments of recurrent_gated_delta_rule (and, with chunk, chunk_gated_delta_rule)."""
    q, k = randn(B, T, H_k, d_k, seed=seed), randn(B, T, H_k, d_k, seed=seed + 1)
    v = randn(B, T, H_v, d_v, seed=seed + 2)
    if not l2:  # keys of norm about 1, as the layer's L2 normalisation gives: the state stays of order 1
        q, k = q * d_k ** -0.5, k * d_k ** -0.5
    gate = g[0] + (g[1] - g[0]) * _rand(B, T, H_v, seed=seed + 3)
    b = _rand(B, T, H_v, seed=seed + 4) if beta is None else torch.tensor(beta).repeat(B, T, H_v // len(beta) + 1)[..., :H_v]
    args = [t.to(dtype) for t in (q, k, v, gate, b)]
    if strided:
        args = [_strided(t) if t.dim() == 4 else t.transpose(0, 1).contiguous().transpose(0, 1) for t in args]
    kwargs = {"output_final_state": final, "use_qk_l2norm": l2}
    if initial:
        kwargs["initial_state"] = (randn(B, H_v, d_k, d_v, seed=seed + 5) * 0.5).to(dtype)
    if chunk is not None:
        kwargs["chunk_size"] = chunk
    return tuple(args), kwargs


def _bytes(*args, **kwargs):
    return args, kwargs


# e^-30 and less: the state forgotten, and within a chunk e^γ underflows to 0 and e^(γ_t - γ_j) for j > t overflows;
# beta 0: no write, 1: a full overwrite
_EXTREME_GATES = dict(g=(-60.0, -30.0), beta=(0.0, 1.0))

_LINEAR = [
    Probe("batch", "batch items and heads that differ", lambda: _linear(400), "各不相同的批次项与注意力头"),
    Probe("edges", "one token", lambda: _linear(401, T=1), "一个词元"),
    Probe("edges", "non-contiguous inputs (transposed views)", lambda: _linear(402, strided=True), "非连续的输入（转置视图）"),
    Probe("extreme", "queries of order 30", lambda: _linear(403, scale=30.0), "30 量级的查询"),
    Probe("dtype", "float64 inputs", lambda: _linear(404, dtype=torch.float64), "float64 输入"),
    Probe("dtype", "bfloat16 inputs", lambda: _linear(405, dtype=torch.bfloat16), "bfloat16 输入"),
]


def _rule_probes(seed, chunk):
    """The members recurrent_gated_delta_rule and chunk_gated_delta_rule share (chunk: its chunk_size, or None)."""
    c = {} if chunk is None else {"chunk": chunk}
    return [
        Probe("batch", "batch items that differ, no initial state", lambda: _rule(seed, initial=False, T=11, **c),
              "各不相同的批次项，没有初始状态"),
        Probe("arguments", "grouped value heads (H_v = 2 H_k), an initial state, L2-normalised q and k",
              lambda: _rule(seed + 1, H_k=2, H_v=4, l2=True, T=9, **c), "分组的值头（H_v = 2 H_k）、初始状态、L2 归一化的 q 和 k"),
        Probe("arguments", "output_final_state=False", lambda: _rule(seed + 2, final=False, **c), "output_final_state=False"),
        Probe("edges", "one token with an initial state", lambda: _rule(seed + 3, T=1, **c), "带初始状态的一个词元"),
        Probe("edges", "non-contiguous inputs (transposed views)", lambda: _rule(seed + 4, strided=True, H_v=4, **c),
              "非连续的输入（转置视图）"),
        Probe("extreme", "g between -60 and -30, beta 0 and 1", lambda: _rule(seed + 5, T=10, **_EXTREME_GATES, **c),
              "g 在 -60 与 -30 之间，beta 为 0 和 1"),
        Probe("dtype", "float64 inputs", lambda: _rule(seed + 6, dtype=torch.float64, **c), "float64 输入"),
        Probe("dtype", "bfloat16 inputs", lambda: _rule(seed + 7, dtype=torch.bfloat16, H_v=4, **c), "bfloat16 输入"),
        Probe("edges", "H_v = 3 value heads for H_k = 2 key heads (not a multiple: an error)",
              lambda: _rule(seed + 8, H_k=2, H_v=3, **c), "H_k = 2 个键头配 H_v = 3 个值头（不是倍数：应报错）"),
    ]


FAMILIES = {
    "linear_attention_recurrent": Family(_LINEAR, compares=COMPARES),
    "linear_attention_parallel": Family(_LINEAR, compares=COMPARES),
    "gated_delta_step": Family([
        Probe("batch", "batch items and heads that differ", lambda: _step(420), "各不相同的批次项与注意力头"),
        Probe("extreme", "g = -50 (the state forgotten) and beta 0 and 1", lambda: _step(421, g=(-50.0, -50.0), beta=(0.0, 1.0)),
              "g = -50（状态被遗忘），beta 为 0 和 1"),
        Probe("edges", "keys of one channel (d_k = 1)", lambda: _step(422, d_k=1), "只有一个通道的键（d_k = 1）"),
        Probe("edges", "non-contiguous inputs", lambda: _step(423, strided=True), "非连续的输入"),
        Probe("dtype", "float64 inputs", lambda: _step(424, dtype=torch.float64), "float64 输入"),
        Probe("dtype", "bfloat16 inputs", lambda: _step(425, dtype=torch.bfloat16), "bfloat16 输入"),
    ], compares=COMPARES),
    "recurrent_gated_delta_rule": Family(_rule_probes(430, None), compares=COMPARES),
    "chunk_gated_delta_rule": Family(_rule_probes(450, 4) + [
        Probe("edges", "fewer tokens than chunk_size", lambda: _rule(470, T=3, chunk=4), "词元少于 chunk_size"),
        Probe("edges", "chunk_size=1", lambda: _rule(471, T=5, chunk=1), "chunk_size=1"),
        Probe("arguments", "the default chunk_size (64), 70 tokens", lambda: _rule(472, T=70, B=1, H_v=4, d_k=3),
              "默认的 chunk_size（64），70 个词元"),
        Probe("edges", "a length that is a multiple of chunk_size", lambda: _rule(473, T=8, chunk=4, H_v=4), "长度是 chunk_size 的倍数"),
    ], compares=COMPARES),
    "hybrid_cache_bytes": Family([
        Probe("arguments", "Qwen3-Next-80B-A3B at 1M tokens", lambda: _bytes(1, 2**20, 36, 12, 32, 128, 128, 1024),
              "Qwen3-Next-80B-A3B，1M 个词元"),
        Probe("arguments", "Kimi-Linear-48B-A3B at 128K tokens (MLA's 576 numbers per token)",
              lambda: _bytes(1, 2**17, 20, 7, 32, 128, 128, 576), "Kimi-Linear-48B-A3B，128K 个词元（MLA 每个词元 576 个数）"),
        Probe("batch", "a batch of 8 texts", lambda: _bytes(8, 4096, 3, 1, 4, 16, 8, 64), "8 段文本的批次"),
        Probe("edges", "no full-attention layer", lambda: _bytes(2, 1000, 4, 0, 2, 8, 8, 32), "没有全注意力层"),
        Probe("edges", "no linear layer", lambda: _bytes(2, 1000, 0, 4, 2, 8, 8, 32), "没有线性层"),
        Probe("arguments", "a bfloat16 state and a float32 cache",
              lambda: _bytes(1, 300, 6, 2, 4, 16, 32, 128, state_bytes_per_element=2, cache_bytes_per_element=4),
              "bfloat16 的状态与 float32 的缓存"),
    ], compares=("values",)),
}
