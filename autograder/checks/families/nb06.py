"""The input families of notebook 06's exercises (checks/harness.py), as data: the learner's code
against utils.multihead on each probe."""
import torch

from autograder.checks import randn
from autograder.checks.causal_layers import layer_probes
from autograder.checks.harness import Family, Probe

D_IN, CONTEXT = 5, 6  # the layers' input width and context length, in the families and in checks/nb06.py
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")


def _dtypes(shape, seed, extra=()):
    """A float64 and a bfloat16 probe of the same input."""
    return [Probe("dtype", f"{name} input", lambda dt=dt: ((randn(*shape, seed=seed).to(dt), *extra), {}), f"{name} 输入")
            for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))]


FAMILIES = {
    # run with one head of width 3, then three heads of width 2 with biases (check_MultiHeadAttentionWrapper);
    # dropout 0.0, so outputs are deterministic in train mode too
    "MultiHeadAttentionWrapper": Family([
        *layer_probes(D_IN, CONTEXT, 630),
        # dtype probes: two heads of width 2, dropout=0.3, moved with .to(dtype) and put in eval() (causal_layers.converted)
        *[Probe("dtype", f"{name} inputs, the wrapper (dropout=0.3) moved with .to(torch.{name}) in eval()",
                lambda dt=dt: ((randn(2, CONTEXT, D_IN, seed=635).to(dt),), {}),
                f"{name} 输入，包装器（dropout=0.3）已用 .to(torch.{name}) 转换并处于 eval()")
          for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=_GRADED),
    "split_heads": Family([
        Probe("batch", "(3, 5, 12) inputs whose batch items differ, 4 heads", lambda: ((randn(3, 5, 12, seed=601), 4), {}),
              "批次项各不相同的 (3, 5, 12) 输入，4 个头"),
        Probe("edges", "one token, one head", lambda: ((randn(2, 1, 6, seed=602), 1), {}), "一个词元、一个头"),
        Probe("edges", "head_dim 1 (as many heads as features)", lambda: ((randn(2, 3, 4, seed=603), 4), {}),
              "head_dim 为 1（头数等于特征数）"),
        *_dtypes((2, 3, 6), 604, (2,)),
        # last: bad input, after the probes that name the usual mistakes
        Probe("edges", "a width of 10 for 4 heads (not divisible: no split holds every feature)",
              lambda: ((randn(2, 3, 10, seed=605), 4), {}), "宽度 10、4 个头（不能整除：没有能容纳所有特征的切分）"),
    ], compares=_GRADED),
    "merge_heads": Family([
        Probe("batch", "(2, 3, 4, 2) inputs whose batch items and heads differ", lambda: ((randn(2, 3, 4, 2, seed=611),), {}),
              "批次项与注意力头各不相同的 (2, 3, 4, 2) 输入"),
        Probe("edges", "one token, one head", lambda: ((randn(2, 1, 1, 5, seed=612),), {}), "一个词元、一个头"),
        *_dtypes((2, 2, 3, 3), 613),
    ], compares=_GRADED),
    "MultiHeadAttention": Family([
        *layer_probes(D_IN, CONTEXT, 620),
    ], compares=_GRADED),
    "mha_parameter_count": Family([
        Probe("arguments", "qkv_bias=True, d_in != d_out", lambda: ((64, 32, 4), {"qkv_bias": True}), "qkv_bias=True，d_in != d_out"),
        Probe("edges", "one head", lambda: ((5, 6, 1), {}), "只有一个头"),
        Probe("edges", "head_dim 1 (as many heads as d_out)", lambda: ((10, 8, 8), {}), "head_dim 为 1（头数等于 d_out）"),
    ], compares=("values",)),
    "attention_parameter_count": Family([
        Probe("edges", "one layer of one head", lambda: ((16, 1, 4, 1), {}), "一层、一个头"),
        Probe("arguments", "head_dim != d_model / n_heads", lambda: ((10, 3, 4, 2), {}), "head_dim != d_model / n_heads"),
    ], compares=("values",)),
}
