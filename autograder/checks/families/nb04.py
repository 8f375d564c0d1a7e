"""Notebook 04's input families (causal attention): what the harness runs each exercise and the
course's utils.causal on, as data (autograder/checks/harness.py)."""
import torch

import utils.causal as ref
from autograder.checks import generator, randn
from autograder.checks.causal_layers import layer_probes
from autograder.checks.harness import Family, Probe

D_IN, D_OUT, CONTEXT = 5, 3, 6  # non-square projections, head_dim > 1


def _weights(*shape, seed):
    return torch.softmax(randn(*shape, seed=seed) * 2, dim=-1)


def _tiny_kept(seed):
    """Weights of a softmax over large logits whose mass lies in the masked future: the kept ones are
    about 1e-7, so a constant added to the row sum (an epsilon) changes the result."""
    mask = ref.causal_mask(4, 6)
    return torch.softmax(randn(2, 3, 4, 6, seed=seed) + 16.0 * mask, dim=-1), mask


def _big(seed):
    """Scores of +400 and -400 in alternate batch items, spread of order 3 within a row."""
    return randn(2, 4, 6, seed=seed) * 3 + torch.tensor([400.0, -400.0])[:, None, None]


_PADDING = torch.tensor([[False] * 6, [False, False, True, False, True, True]])[:, None, None, :]  # (B, 1, 1, T_k)
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
FAMILIES = {
    "causal_mask": Family([
        Probe("edges", "one query and one key", lambda: ((1,), {}), "一个查询、一个键"),
        Probe("edges", "one new query and 6 keys", lambda: ((1, 6), {}), "一个新查询、6 个键"),
        Probe("arguments", "3 queries, 7 keys, device='cpu'", lambda: ((3, 7), {"device": "cpu"}), "3 个查询、7 个键，device='cpu'"),
        Probe("extreme", "4 queries at the end of 300 keys", lambda: ((4, 300), {}), "300 个键末尾的 4 个查询"),
    ]),
    "mask_and_renormalize": Family([
        Probe("batch", "(B, H, T_q, T_k) weights whose batch items and heads differ, a (T_q, T_k) mask",
              lambda: ((_weights(2, 3, 4, 6, seed=401), ref.causal_mask(4, 6)), {}),
              "批次项与注意力头各不相同的 (B, H, T_q, T_k) 权重，(T_q, T_k) 掩码"),
        Probe("arguments", "a padding mask (B, 1, 1, T_k)", lambda: ((_weights(2, 3, 4, 6, seed=402), _PADDING), {}),
              "填充掩码 (B, 1, 1, T_k)"),
        Probe("edges", "one query", lambda: ((_weights(2, 1, 5, seed=403), ref.causal_mask(1, 5)), {}), "只有一个查询"),
        Probe("extreme", "weights whose kept entries are about 1e-7, the mass in the masked future", lambda: (_tiny_kept(406), {}),
              "保留的权重约为 1e-7、权重集中在被屏蔽的未来"),
        Probe("edges", "weights whose rows do not sum to 1", lambda: ((torch.rand(2, 4, 6, generator=generator(405)) + 0.1, ref.causal_mask(4, 6)), {}),
              "每行之和不为 1 的权重"),
        # float64 only: the book's route multiplies by a float32 0/1 mask, which keeps float64 but
        # not bfloat16 (the text says nothing about bfloat16 here).
        Probe("dtype", "float64 weights", lambda: ((_weights(2, 4, 6, seed=404).double(), ref.causal_mask(4, 6)), {}),
              "float64 权重"),
    ], compares=_GRADED),
    "masked_softmax": Family([
        Probe("batch", "(B, H, T_q, T_k) scores whose batch items and heads differ, a (T_q, T_k) mask",
              lambda: ((randn(2, 3, 4, 6, seed=411) * 2, ref.causal_mask(4, 6)), {}),
              "批次项与注意力头各不相同的 (B, H, T_q, T_k) 分数，(T_q, T_k) 掩码"),
        Probe("arguments", "dim=-2 with the transposed mask", lambda: ((randn(2, 6, 4, seed=412), ref.causal_mask(4, 6).T), {"dim": -2}),
              "dim=-2 与转置的掩码"),
        Probe("extreme", "scores of ±400", lambda: ((_big(413), ref.causal_mask(4, 6)), {}), "±400 的分数"),
        Probe("extreme", "scores of order 300", lambda: ((randn(2, 4, 6, seed=414) * 300, ref.causal_mask(4, 6)), {}),
              "数量级为 300 的分数"),
        Probe("edges", "one query", lambda: ((randn(2, 1, 5, seed=415), ref.causal_mask(1, 5)), {}), "只有一个查询"),
        *[Probe("dtype", f"{name} scores", lambda dt=dt: ((randn(2, 4, 6, seed=416).to(dt), ref.causal_mask(4, 6)), {}), f"{name} 分数")
          for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
        # last (after the probes that name the usual mistakes); -2e9 and -2e9 + 1024 are exact in float32: a finite fill such as -1e9 would outweigh every visible score
        Probe("extreme", "scores of about -2e9", lambda: ((-2e9 + 1024.0 * (randn(2, 4, 6, seed=417) > 0), ref.causal_mask(4, 6)), {}),
              "约为 -2e9 的分数"),
    ], compares=_GRADED),
    "CausalSelfAttention": Family([
        *layer_probes(D_IN, CONTEXT, 420),
        # dtype probes run on layers built and then moved with .to(dtype) (causal_layers.converted)
        *[Probe("dtype", f"{name} inputs, the layer moved with .to(torch.{name})", lambda dt=dt: ((randn(2, CONTEXT, D_IN, seed=425).to(dt),), {}),
                f"{name} 输入，层已用 .to(torch.{name}) 转换") for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads")),
}
