"""Watching what linear-attention code does while it runs (notebook 16): values cannot show whether
a function is recurrent, parallel or chunked, but what it creates can.

`StateWatch` is a torch function mode (not a dispatch mode, whose first use imports torch._dynamo):
it sees the result of every torch call and records
- `calls`: how many torch operations ran (a parallel form runs as many for 6 tokens as for 24);
- `largest`, `largest_shape`: the largest tensor created, its whole storage counted for a view
  (a recurrent form holds nothing larger than its inputs, its output and its state);
- `states`: how many state-sized tensors were created, in units of one whole state: a new tensor
  whose last two dims are (d_k, d_v) adds its elements / the state's (a chunked form writes a few
  states per chunk, a token-by-token one at least one per token). Views are not counted;
- `square_shape`: the first tensor created with two neighbouring dims both equal to `square` (T):
  a (T, T) matrix of scores, which a chunked form never builds (its matrices are (C, C)).

    with StateWatch(state_shape=(B, H, d_k, d_v)) as watch:
        chunk_gated_delta_rule(...)
    watch.states, watch.calls, watch.largest
"""
import torch
from torch.overrides import TorchFunctionMode


class StateWatch(TorchFunctionMode):
    def __init__(self, state_shape=None, square=None):
        super().__init__()
        self.state_shape, self.square = (tuple(state_shape) if state_shape else None), square
        self.calls, self.largest, self.largest_shape, self.states, self.square_shape = 0, 0, None, 0.0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.calls += 1
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if not isinstance(t, torch.Tensor):
                continue
            size = t.untyped_storage().nbytes() // max(1, t.element_size())
            if size > self.largest:
                self.largest, self.largest_shape = size, tuple(t.shape)
            if (self.state_shape and t.dim() >= 2 and tuple(t.shape[-2:]) == self.state_shape[-2:]
                    and t._base is None):
                self.states += t.numel() / max(1, _numel(self.state_shape))
            if self.square and self.square_shape is None and any(
                    a == b == self.square for a, b in zip(t.shape, t.shape[1:])):
                self.square_shape = tuple(t.shape)
        return result


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
