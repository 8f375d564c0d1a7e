"""Notebook 05's input families: weights to drop and causal attention layers."""
import torch

from autograder.checks import generator, randn
from autograder.checks.causal_layers import layer_probes
from autograder.checks.harness import Family, Probe

D_IN, D_OUT, CONTEXT = 5, 3, 6  # non-square projections, head_dim > 1


def _drop(dtype, p=0.3, training=True, seed=500):
    weights = torch.softmax(randn(2, 3, 4, 6, seed=seed), dim=-1).to(dtype)
    return (weights, p), {"training": training, "generator": generator(seed + 1)}


FAMILIES = {
    # Which entries are dropped is the learner's draw (the contract fixes the rate, not the
    # order of the random numbers), so values are left to the statistics above: the family
    # compares what every draw must keep (shape, dtype, device, inputs unchanged).
    "attention_dropout": Family([
        Probe("dtype", "float64 weights, p=0.3", lambda: _drop(torch.float64), "float64 权重，p=0.3"),
        Probe("dtype", "bfloat16 weights, p=0.3", lambda: _drop(torch.bfloat16), "bfloat16 权重，p=0.3"),
        Probe("arguments", "float64 weights with training=False", lambda: _drop(torch.float64, training=False),
              "training=False 的 float64 权重"),
        Probe("edges", "bfloat16 weights with p=0", lambda: _drop(torch.bfloat16, p=0.0), "p=0 的 bfloat16 权重"),
    ], compares=("shape", "dtype", "device", "inputs")),
    # Built with dropout=0.0, so that training mode is deterministic and every value and
    # gradient can be compared with the course's (dropout itself is checked above).
    "CausalAttention": Family([
        *layer_probes(D_IN, CONTEXT, 510),
        # dtype probes: a layer with dropout=0.3, moved with .to(dtype) and put in eval() (causal_layers.converted)
        *[Probe("dtype", f"{name} inputs, the layer (dropout=0.3) moved with .to(torch.{name}) in eval()",
                lambda dt=dt: ((randn(2, CONTEXT, D_IN, seed=515).to(dt),), {}),
                f"{name} 输入，层（dropout=0.3）已用 .to(torch.{name}) 转换并处于 eval()")
          for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads")),
}
