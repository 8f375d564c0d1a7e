"""Notebook 12's input families (checks/harness.py): the learner's code against utils.mini_deepseek / utils.mtp."""
import torch

from autograder.checks import randn
from autograder.checks.capstone_parts import CFG, inputs, mtp_probe
from autograder.checks.harness import Family, Probe, Steps

_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")


def _tokens(B, T, V, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _depths(B, T, V, D, seed, scale=2.0):
    """mtp_loss's inputs as separate arguments (the harness compares each one's gradient):
    depth k's logits (B, T - k, V) for k = 1..D, then the tokens."""
    return (*[randn(B, T - k, V, seed=seed + k) * scale for k in range(1, D + 1)], _tokens(B, T, V, seed))


def _x64(args):
    return tuple(a.double() if a.is_floating_point() else a for a in args)


FAMILIES = {
    "RMSNorm": Family([
        Probe("batch", "(2, 3, 6) inputs whose rows differ, with a mean far from 0", lambda: ((randn(2, 3, 6, seed=1201) * 0.4 + 0.3,), {}),
              "各行不同、均值远离 0 的 (2, 3, 6) 输入"),
        Probe("edges", "inputs near 1e-3 (eps shows)", lambda: ((randn(4, 6, seed=1202) * 1e-3,), {}), "接近 1e-3 的输入（eps 的作用显现）"),
        Probe("extreme", "float16 inputs whose squares pass 65504", lambda: (((randn(2, 3, 6, seed=1203) * 250).half(),), {}),
              "平方超过 65504 的 float16 输入"),
        *[Probe("dtype", f"{name} inputs", lambda dt=dt: ((randn(2, 3, 6, seed=1204).to(dt),), {}), f"{name} 输入")
          for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=_GRADED),
    "Block": Family([
        Probe("batch", "two batch items that differ, 6 tokens", lambda: ((inputs(2, 6, 1211),), {}), "两个不同的批次项，6 个词元"),
        Probe("edges", "one token", lambda: ((inputs(2, 1, 1212),), {}), "只有一个词元"),
        *[Probe("state", f"a prefill of 4 tokens, then 2 at start_pos 4 (absorb={absorb})",
                lambda absorb=absorb: Steps([("__call__", (x[:, :4].clone(), 0, absorb), {}), ("__call__", (x[:, 4:].clone(), 4, absorb), {})])
                if (x := inputs(2, 6, 1213)) is not None else None,
                f"先预填充 4 个词元，再在 start_pos 4 输入 2 个（absorb={absorb}）") for absorb in (False, True)],
    ], compares=_GRADED + ("state",)),
    "MiniDeepSeek": Family([
        Probe("batch", "two sequences that differ, 8 tokens", lambda: ((_tokens(2, 8, CFG.vocab_size, 1241),), {}), "两个不同的序列，8 个词元"),
        Probe("edges", "one token", lambda: ((_tokens(2, 1, CFG.vocab_size, 1242),), {}), "只有一个词元"),
        *[Probe("state", f"a prefill of 5 tokens, then 3 at start_pos 5 (absorb={absorb})",
                lambda absorb=absorb: Steps([("__call__", (t[:, :5].clone(), 0, absorb), {}), ("__call__", (t[:, 5:].clone(), 5, absorb), {})])
                if (t := _tokens(2, 8, CFG.vocab_size, 1243)) is not None else None,
                f"先预填充 5 个词元，再在 start_pos 5 输入 3 个（absorb={absorb}）") for absorb in (False, True)],
    ], compares=_GRADED + ("state",)),
    "MTPModule": Family([
        Probe("batch", "hidden states and embeddings of different scales, two batch items that differ",
              lambda: ((inputs(2, 6, 1251) * 0.3, randn(2, 6, CFG.dim, seed=1252) * 3), {}), "尺度不同的隐藏状态与嵌入，两个不同的批次项"),
        Probe("edges", "one position", lambda: ((inputs(2, 1, 1253), randn(2, 1, CFG.dim, seed=1254)), {}), "只有一个位置"),
        Probe("state", "4 positions, then 2 at start_pos 4",
              lambda: Steps([("__call__", (h[:, :4].clone(), e[:, :4].clone(), 0), {}), ("__call__", (h[:, 4:].clone(), e[:, 4:].clone(), 4), {})])
              if (h := inputs(2, 6, 1255)) is not None and (e := randn(2, 6, CFG.dim, seed=1256)) is not None else None,
              "先 4 个位置，再在 start_pos 4 输入 2 个"),
    ], compares=_GRADED + ("state",)),
    "next_token_loss": Family([
        Probe("batch", "(3, 6, 7) logits whose batch items differ", lambda: ((randn(3, 6, 7, seed=1221) * 2, _tokens(3, 6, 7, 1221)), {}),
              "批次项各不相同的 (3, 6, 7) logits"),
        Probe("edges", "2 tokens (one prediction)", lambda: ((randn(2, 2, 5, seed=1222), _tokens(2, 2, 5, 1222)), {}), "2 个词元（一次预测）"),
        Probe("extreme", "logits of order 300", lambda: ((randn(2, 5, 7, seed=1223) * 300, _tokens(2, 5, 7, 1223)), {}),
              "数量级为 300 的 logits"),
        Probe("ties", "logits all equal", lambda: ((torch.zeros(2, 4, 6), _tokens(2, 4, 6, 1224)), {}), "全部相等的 logits"),
        Probe("dtype", "float64 logits", lambda: ((randn(2, 5, 7, seed=1225).double(), _tokens(2, 5, 7, 1225)), {}), "float64 logits"),
    ], compares=_GRADED),
    # every gradient: each parameter of the model (the shared embedding, final norm and head) and of
    # the MTP modules is an argument of the call (capstone_parts.with_weights)
    "mtp_forward": Family([
        Probe("batch", "2 depths, two sequences that differ, 6 tokens", lambda: mtp_probe(2, 6, 2, 1261), "2 个深度，两个不同的序列，6 个词元"),
        Probe("edges", "depth 1, 2 tokens (the shortest sequence: one position at depth 1)", lambda: mtp_probe(2, 2, 1, 1262),
              "深度 1、2 个词元（最短的序列：深度 1 只有一个位置）"),
        Probe("edges", "3 depths, 4 tokens (one position at depth 3)", lambda: mtp_probe(1, 4, 3, 1263), "3 个深度、4 个词元（深度 3 只有一个位置）"),
    ], compares=_GRADED),
    "mtp_loss": Family([
        Probe("batch", "3 depths whose batch items differ, lam=0.1", lambda: (_depths(2, 9, 7, 3, 1231), {"lam": 0.1}),
              "3 个深度、批次项各不相同，lam=0.1"),
        Probe("arguments", "2 depths, the default lam", lambda: (_depths(2, 8, 6, 2, 1232), {}), "2 个深度，默认的 lam"),
        Probe("edges", "one depth, 3 tokens (one target)", lambda: (_depths(2, 3, 5, 1, 1233), {"lam": 0.5}), "一个深度、3 个词元（一个目标）"),
        Probe("extreme", "logits of order 300", lambda: (_depths(2, 7, 6, 2, 1234, scale=300.0), {"lam": 0.3}), "数量级为 300 的 logits"),
        Probe("dtype", "float64 logits", lambda: (_x64(_depths(2, 7, 6, 2, 1235)), {}), "float64 logits"),
    ], compares=_GRADED),
}
