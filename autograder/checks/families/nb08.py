"""Notebook 08's input families: edges, arguments and long positions for the encodings, heads
whose batch items differ, non-contiguous and bfloat16/float64 heads for apply_rope."""
import torch

from autograder.checks import randn
from autograder.checks.harness import Family, Probe

# Input families: the learner's code against utils.rope on each (checks/harness.py) ----------
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
_FLOATS = ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))
FAMILIES = {
    # Positions stay below 100: float32 angles of a right solution computed another way (float64,
    # exp-log) stay within float32's tolerance there.
    "sinusoidal_positions": Family([
        Probe("edges", "one position, d_model 2", lambda: ((1, 2), {}), "一个位置，d_model 为 2"),
        Probe("arguments", "base=100, 12 positions, d_model 8", lambda: ((12, 8), {"base": 100.0}), "base=100，12 个位置，d_model 为 8"),
        Probe("extreme", "90 positions, d_model 16", lambda: ((90, 16), {}), "90 个位置，d_model 为 16"),
    ], compares=("values", "shape", "dtype", "device")),
    "rope_inverse_frequencies": Family([
        Probe("edges", "head_dim 2", lambda: ((2,), {}), "head_dim 为 2"),
        Probe("arguments", "head_dim 128, theta=500000 (Llama 3)", lambda: ((128,), {"theta": 500000.0}),
              "head_dim 为 128，theta=500000（Llama 3）"),
        Probe("arguments", "head_dim 6, theta 50 given by position", lambda: ((6, 50.0), {}), "head_dim 为 6，theta 50 按位置传入"),
    ], compares=("values", "shape", "dtype", "device")),
    "apply_rope": Family([
        *[Probe("batch", f"(B, H, T, hd) heads whose batch items and heads differ, interleaved={lay}",
                lambda lay=lay: ((randn(2, 3, 5, 8, seed=801), torch.tensor([3, 4, 5, 6, 9]), 100.0), {"interleaved": lay}),
                f"批次项与注意力头各不相同的 (B, H, T, hd)，interleaved={lay}") for lay in (False, True)],
        Probe("edges", "(T, head_dim) with one position and head_dim 2", lambda: ((randn(1, 2, seed=802), torch.tensor([5])), {}),
              "(T, head_dim)，一个位置，head_dim 为 2"),
        Probe("edges", "heads split by a transpose (non-contiguous)",
              lambda: ((randn(2, 4, 3, 6, seed=803).transpose(1, 2), torch.arange(4)), {"interleaved": True}), "经 transpose 拆分出的头（非连续）"),
        *[Probe("extreme", f"positions near 4000 in bfloat16, interleaved={lay}",
                lambda lay=lay: ((randn(2, 2, 4, 8, seed=804).bfloat16(), torch.arange(4000, 4004)), {"interleaved": lay}),
                f"bfloat16 下接近 4000 的位置，interleaved={lay}") for lay in (False, True)],
        *[Probe("dtype", f"{name} heads", lambda dt=dt: ((randn(2, 2, 5, 8, seed=805).to(dt), torch.arange(2, 7)), {}), f"{name} 的头")
          for dt, name in _FLOATS],
    ], compares=_GRADED),
    "interleaved_to_half_split": Family([
        Probe("batch", "a (12, 7) weight of 3 heads whose rows differ", lambda: ((randn(12, 7, seed=811), 3), {}),
              "3 个头、各行不同的 (12, 7) 权重"),
        Probe("edges", "a 1-D bias of 2 heads", lambda: ((randn(12, seed=812), 2), {}), "2 个头的一维偏置"),
        Probe("edges", "head_dim 2", lambda: ((randn(8, 3, seed=813), 4), {}), "head_dim 为 2"),
        *[Probe("dtype", f"a {name} weight", lambda dt=dt: ((randn(12, 5, seed=814).to(dt), 2), {}), f"{name} 权重")
          for dt, name in _FLOATS],
    ], compares=_GRADED),
    "RoPEMultiHeadAttention": Family([
        Probe("batch", "two batch items that differ, 9 tokens = context_length", lambda: ((randn(2, 9, 5, seed=821),), {}),
              "两个不同的批次项，9 个词元 = context_length"),
        Probe("edges", "one token", lambda: ((randn(2, 1, 5, seed=822),), {}), "只有一个词元"),
        Probe("extreme", "inputs of size 12 (scores in the hundreds)", lambda: ((randn(2, 6, 5, seed=823) * 12,), {}),
              "大小为 12 的输入（数百量级的分数）"),
    ], compares=_GRADED),
}
