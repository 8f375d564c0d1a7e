"""Notebook 04's input families (causal attention): what the harness runs each exercise and the
course's utils.causal on, as data (autograder/checks/core/harness.py)."""
import torch

import utils.causal as ref
from autograder.checks import generator, randn
from autograder.checks.core import rules
from autograder.checks.nb04.causal_layers import layer_probes
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Forbid, Raises
from autograder.checks.core.space import Space

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
_SDPA = Forbid("torch.nn.functional.scaled_dot_product_attention", "it computes the whole masked attention this exercise builds",
               "它会完成本练习要构造的整个带掩码注意力")
_FEW_KEYS = ("num_keys >= num_queries (the queries are the last positions of the keys)", "num_keys >= num_queries（查询是键的最后几个位置）")

CONTRACTS = rules.register("04", [
    Contract("causal_mask", dtypes=(), dtype=("the result is `torch.bool`", "结果是 `torch.bool`"), device="argument",
             preconditions=(_FEW_KEYS,)),
    Contract("mask_and_renormalize", dtypes=("float32", "float64"),
             preconditions=(("every row keeps at least one key", "每一行至少保留一个键"),)),
    Contract("masked_softmax", dtypes=("float32", "float64", "bfloat16"),
             preconditions=(("every row keeps at least one key", "每一行至少保留一个键"),)),
    Contract("CausalSelfAttention", forbids=(_SDPA,), dtypes=("float32", "float64", "bfloat16"),
             dtype=("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算"),
             raises=(Raises("ValueError", "the input has more tokens than `context_length`", "输入的词元多于 `context_length` "),),
             notes=(("The mask is a buffer named `mask` (so `.to()` moves it and the optimizer never trains it).",
                     "掩码是名为 `mask` 的缓冲区（这样 `.to()` 会移动它，优化器也不会训练它）。"),)),
])


# The input spaces --------------------------------------------------------------------------
def _sizes(shape: str):
    """(leading dims, T_q, T_k) of a level of the "shape" axis."""
    return {"B2,H3,4x6": ((2, 3), 4, 6), "B3,5x5": ((3,), 5, 5), "B2,1x7": ((2,), 1, 7), "B1,H2,9x9": ((1, 2), 9, 9)}[shape]


def _mask(kind: str, lead, t_q, t_k):
    if kind == "causal":
        return ref.causal_mask(t_q, t_k)
    blocked = torch.arange(t_k) % 3 == 1  # a padding mask per batch item, (B, 1, ..., T_k); key 0 always kept
    per_item = torch.stack([blocked.roll(b) & (torch.arange(t_k) > 0) for b in range(lead[0])])
    return per_item.view(lead[0], *([1] * (len(lead) - 1)), 1, t_k)


def _scores(values: str, shape, seed):
    x = randn(*shape, seed=seed)
    return {"normal": x * 2, "large": x * 3 + 400.0 * torch.sign(randn(shape[0], *[1] * (len(shape) - 1), seed=seed + 1)),
            "order 300": x * 300, "about -2e9": -2e9 + 1024.0 * (x > 0), "ties": (x > 0).float()}[values]


def _masked_softmax(point, seed):
    lead, t_q, t_k = _sizes(point["shape"])
    scores, mask = _scores(point["values"], (*lead, t_q, t_k), seed), _mask(point["arguments:mask"], lead, t_q, t_k)
    if point["arguments:dim"] == -2:
        return (scores.transpose(-2, -1), mask.transpose(-2, -1)), {"dim": -2}
    return (scores, mask), {}


def _weights_point(point, seed):
    lead, t_q, t_k = _sizes(point["shape"])
    mask = _mask(point["arguments:mask"], lead, t_q, t_k)
    scale = {"softmax": 2.0, "tiny kept": 2.0, "rows not summing to 1": None}[point["values"]]
    if scale is None:
        return (torch.rand(*lead, t_q, t_k, generator=generator(seed)) + 0.1, mask), {}
    logits = randn(*lead, t_q, t_k, seed=seed) * scale + (16.0 * mask if point["values"] == "tiny kept" else 0.0)
    return (torch.softmax(logits, dim=-1), mask), {}


def _layer_point(point, seed):
    d_in, d_out, context = point["shape:layer"]
    t = {"T=1": 1, "T<context": context - 2, "T=context": context, "T>context": context + 1}[point["shape"]]
    x = randn(2, t, d_in, seed=seed) * (30.0 if point["values"] == "large" else 1.0)
    return Steps([("__call__", (x,), {})], ctor=(d_in, d_out, context), ctor_kwargs={"qkv_bias": point["flag:qkv_bias"]})


_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
SPACES = {
    "causal_mask": Space({"shape": (1, 3, 6), "arguments:num_keys": (None, 0, 1, 300), "arguments:device": (None, "cpu")},
                         lambda p, seed: ((p["shape"],), {**({} if p["arguments:num_keys"] is None else {"num_keys": p["shape"] + p["arguments:num_keys"]}),
                                                         **({} if p["arguments:device"] is None else {"device": p["arguments:device"]})})),
    "mask_and_renormalize": Space({"shape": ("B2,H3,4x6", "B3,5x5", "B2,1x7", "B1,H2,9x9"), "arguments:mask": ("causal", "padding"),
                                   "values": ("softmax", "rows not summing to 1", "tiny kept"),
                                   "dtype": CONTRACTS["mask_and_renormalize"].dtypes, "layout": _LAYOUTS}, _weights_point),
    "masked_softmax": Space({"shape": ("B2,H3,4x6", "B3,5x5", "B2,1x7", "B1,H2,9x9"), "arguments:mask": ("causal", "padding"),
                             "arguments:dim": (-1, -2), "values": ("normal", "large", "order 300", "about -2e9", "ties"),
                             "dtype": CONTRACTS["masked_softmax"].dtypes, "layout": _LAYOUTS}, _masked_softmax,
                            no_grads=lambda p: p["values"] != "normal"),
    "CausalSelfAttention": Space({"shape": ("T=1", "T<context", "T=context", "T>context"),
                                  "shape:layer": ((D_IN, D_OUT, CONTEXT), (4, 8, 5)), "flag:qkv_bias": (False, True),
                                  "values": ("normal", "large"), "dtype": CONTRACTS["CausalSelfAttention"].dtypes,
                                  "layout": _LAYOUTS}, _layer_point, no_grads=lambda p: p["values"] == "large"),
}

FAMILIES = {
    "causal_mask": Family([
        Probe("edges", "one query and one key", lambda: ((1,), {}), "一个查询、一个键"),
        Probe("edges", "one new query and 6 keys", lambda: ((1, 6), {}), "一个新查询、6 个键"),
        Probe("arguments", "3 queries, 7 keys, device='cpu'", lambda: ((3, 7), {"device": "cpu"}), "3 个查询、7 个键，device='cpu'"),
        Probe("extreme", "4 queries at the end of 300 keys", lambda: ((4, 300), {}), "300 个键末尾的 4 个查询"),
    ], space=SPACES["causal_mask"]),
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
    ], compares=_GRADED, space=SPACES["mask_and_renormalize"]),
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
    ], compares=_GRADED, space=SPACES["masked_softmax"]),
    "CausalSelfAttention": Family([
        *layer_probes(D_IN, CONTEXT, 420),
        # dtype probes run on layers built and then moved with .to(dtype) (causal_layers.converted)
        *[Probe("dtype", f"{name} inputs, the layer moved with .to(torch.{name})", lambda dt=dt: ((randn(2, CONTEXT, D_IN, seed=425).to(dt),), {}),
                f"{name} 输入，层已用 .to(torch.{name}) 转换") for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads"), space=SPACES["CausalSelfAttention"]),
}
