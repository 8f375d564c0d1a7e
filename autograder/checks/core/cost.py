"""How much arithmetic a call does: multiply-adds of matrix products, and how many products.

Checks use this to grade what values cannot show: that an "absorbed" decode step does not
re-expand the whole cache (notebook 09), that a sparse MoE layer runs only the chosen experts
(notebook 10). `MatmulCost` is a `torch.overrides.TorchFunctionMode`: every torch function a
learner can multiply matrices with (`F.linear` and so `nn.Linear`, `@`, `matmul`, `mm`, `bmm`,
`mv`, `dot`, `einsum`, `tensordot`, `addmm`, `baddbmm`, SDPA, ... and their Tensor methods) is
counted at the call, whatever layer or method it was reached through, so calling layers
differently cannot dodge it. Unlike `torch.utils.flop_counter.FlopCounterMode` (a dispatch mode),
it imports nothing heavy: FlopCounterMode's first use imports torch._dynamo and sympy (more than
a second of every submit). autograder/tests/test_cost.py compares the two.

    with MatmulCost() as cost:
        layer(x)
    cost.macs      # multiply-adds of matrix products (FlopCounterMode's flops / 2)
    cost.calls     # how many matrix products were called (SDPA counts once)
    cost.muls      # element-wise multiplications (a matrix product by broadcasting shows here)
    cost.by_name   # {"linear": macs, "matmul": macs, ...}

What it does not see: products inside Python-level torch functions that are overridable as a
whole (`F.multi_head_attention_forward`); such calls are listed in `cost.uncounted`. An einsum of
three or more operands is counted contracted left to right, which is what torch does without
opt_einsum (not installed here; with it, torch may choose another order).
"""
import math
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

# Products whose contraction length is the last dimension of this argument.
_LAST_DIM_OF = {"linear": 0, "matmul": 0, "__matmul__": 0, "__rmatmul__": 1, "linalg_matmul": 0,
                "mm": 0, "bmm": 0, "mv": 0, "dot": 0, "vdot": 0, "inner": 0,
                "addmm": 1, "addmm_": 1, "baddbmm": 1, "baddbmm_": 1, "addmv": 1, "addmv_": 1}
_MULS = {"mul", "mul_", "__mul__", "__rmul__", "__imul__", "multiply", "multiply_"}
_BROADCAST = "0123456789"
_UNCOUNTED = {"multi_head_attention_forward", "bilinear", "chain_matmul", "multi_dot", "addbmm", "outer"}


def _numel(shape) -> int:
    return math.prod(int(s) for s in shape)


def _argument(args, kwargs, index, *names):
    if len(args) > index:
        return args[index]
    return next(kwargs[n] for n in names if n in kwargs)


def _einsum_terms(args):
    """(input index strings, output index string, operands) of either einsum form."""
    if isinstance(args[0], str):
        operands = args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        inputs, arrow, output = args[0].replace(" ", "").partition("->")
        terms = inputs.split(",")
    else:  # sublist form: einsum(op1, [0, 1], op2, [1, 2], [0, 2])
        letters = lambda sub: "".join(chr(ord("a") + int(i)) for i in sub)
        operands, terms = args[0::2][:len(args) // 2], [letters(s) for s in args[1::2]]
        arrow, output = len(args) % 2, letters(args[-1]) if len(args) % 2 else ""
    # An ellipsis stands for broadcast dimensions, aligned from the right: name them 0-9.
    spans = [op.dim() - len(t.replace("...", "")) for t, op in zip(terms, operands)]
    width = max([n for t, n in zip(terms, spans) if "..." in t], default=0)
    terms = [t.replace("...", _BROADCAST[width - n:width]) for t, n in zip(terms, spans)]
    if not arrow:  # implicit output: broadcast dims, then indices that occur once, alphabetically
        joined = "".join(terms)
        output = _BROADCAST[:width] + "".join(sorted(c for c in set(joined) if joined.count(c) == 1
                                                      and c not in _BROADCAST))
    return terms, output.replace("...", _BROADCAST[:width]), operands


def _einsum_macs(args) -> int:
    """Multiply-adds of an einsum contracted left to right, as torch does without opt_einsum."""
    terms, output, operands = _einsum_terms(args)
    if len(operands) < 2:
        return 0  # one operand (a trace, a transpose) multiplies nothing
    size = {}
    for term, op in zip(terms, operands):
        for c, n in zip(term, op.shape):
            size[c] = max(size.get(c, 1), int(n))  # broadcast dimensions of size 1
    macs, left = 0, terms[0]
    for i, right in enumerate(terms[1:], start=1):
        indices = set(left) | set(right)
        macs += _numel(size[c] for c in indices)
        later = set(output).union(*terms[i + 1:])
        left = "".join(c for c in indices if c in later)
    return macs


def _tensordot_macs(args, kwargs, out) -> int:
    a = args[0]
    dims = args[2] if len(args) > 2 else kwargs.get("dims", 2)
    if isinstance(dims, int):
        contracted = a.shape[a.dim() - dims:] if dims else ()
    else:
        contracted = [a.shape[d] for d in (dims[0] if isinstance(dims[0], (list, tuple)) else [dims[0]])]
    return out.numel() * _numel(contracted)


def _sdpa_macs(args, kwargs) -> int:
    q, k, v = (_argument(args, kwargs, i, n) for i, n in enumerate(("query", "key", "value")))
    return _numel(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])


class MatmulCost(TorchFunctionMode):
    """Counts matrix products (multiply-adds and calls) done inside the `with` block."""

    def __init__(self):
        super().__init__()
        self.macs, self.calls, self.muls = 0, 0, 0
        self.by_name, self.uncounted = Counter(), Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        macs = self._macs(name, args, kwargs, out)
        if macs is not None:
            self.macs += macs
            self.calls += 1
            self.by_name[name] += macs
        elif name in _MULS and isinstance(out, torch.Tensor):
            self.muls += out.numel()
        elif name in _UNCOUNTED:
            self.uncounted[name] += 1
        return out

    @staticmethod
    def _macs(name, args, kwargs, out):
        if name in _LAST_DIM_OF and isinstance(out, torch.Tensor):
            operand = args[_LAST_DIM_OF[name]] if len(args) > _LAST_DIM_OF[name] else None
            if not isinstance(operand, torch.Tensor):  # addmm(input, mat1=..., mat2=...)
                operand = kwargs.get("mat1", kwargs.get("batch1", kwargs.get("mat", kwargs.get("weight"))))
            if name == "linear":  # the contraction runs over the input's last dimension
                operand = args[0] if args else kwargs["input"]
            return out.numel() * max(operand.shape[-1] if operand.dim() else 1, 1)
        if name == "einsum":
            return _einsum_macs(args)
        if name == "tensordot":
            return _tensordot_macs(args, kwargs, out)
        if name == "scaled_dot_product_attention":
            return _sdpa_macs(args, kwargs)
        return None
