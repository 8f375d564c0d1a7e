"""An exercise's input space, declared as axes, and the families generated from it.

A `Space` names the axes its contract allows (`KINDS`: shapes, dtypes, layouts, blocks, value
regimes, flags, call sequences, ...), each with its levels, and a `build(point, seed)` that
turns one point (axis -> level) into inputs. Two axes are applied by the mechanism itself, the
same way for every exercise, so a builder need not know them:

- "dtype": the floating tensors of the inputs (or, for a module, the module) cast to the level;
  its levels are the contract's `dtypes` (rules.py), so the text and the probes cannot disagree;
- "layout": every input tensor of two or more dimensions rearranged in memory with the same
  values: column-major (a transpose of a transposed copy), strided (every other element of a
  buffer whose gaps hold NaN, so reading a gap shows) or mixed (the first such input column-major,
  the others strided).

From one space come two families, deterministically:

- the grading family: a covering array of strength 2 (every pair of levels of every two axes
  appears in some probe), chosen greedily from the valid points in a fixed order, plus the
  exercise's pinned probes (hand-picked inputs that name a mistake);
- the oracle family: every valid point (or a covering array of strength 3 where the product is
  too large) with several seeds: slow, broad, offline (`python -m autograder mutants`, and
  test_spaces.py, which runs the zoo over it).
"""
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

# The kinds an axis may be of, and what each stands for (the axis name is "<kind>" or "<kind>:<what>").
KINDS = {
    "shape": "sizes: batch items and heads that differ, lengths not multiples of any block, sizes past every constant",
    "dtype": "every dtype the contract allows",
    "layout": "non-contiguous inputs: column-major, strided, inputs laid out differently",
    "blocks": "block and tile sizes in both orders",
    "values": "value regimes: one-signed extremes, ties, near-zero, masked rows",
    "flag": "a flag or option and its combinations with the others",
    "sequence": "call sequences on a stateful object",
    "arguments": "arguments away from their defaults",
    "bad": "bad input in every mode",
}
LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
ORACLE_LIMIT = 600  # points; beyond it the oracle is a covering array of strength 3
_DTYPE = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def kind(axis: str) -> str:
    return axis.split(":")[0]


@dataclass
class Space:
    """axes: {name: levels} (levels are printable: str, int, float, bool, tuple); build(point,
    seed) -> (args, kwargs), or a Steps sequence; valid(point) -> False for points the contract
    excludes (a precondition); no_grads(point) -> True where gradients are not compared (extreme
    values saturate a softmax); tolerance(point) -> {dtype: (atol, rtol)} over the family's for
    that point's outputs, or None, read at grading time: for a point whose own arithmetic rounds
    more (a float32 angle at position 4000 carries 2^-24 * 4000 radians of rounding; scores in the
    hundreds; a float32 result of bfloat16 inputs), so two right orders of computation differ by
    more than the family's tolerance there. For a module, the harness also moves it with `.to(dtype)`."""
    __slotnames__ = []
    axes: dict
    build: Callable
    valid: Callable = None
    no_grads: Callable = None
    tolerance: Callable = None
    seeds: tuple = (0, 1)  # the oracle's seeds; grading uses the first

    def __post_init__(self):
        for name, levels in self.axes.items():
            if kind(name) not in KINDS:
                raise ValueError(f"unknown axis kind {kind(name)!r} in {name!r}: one of {sorted(KINDS)}")
            if not levels:
                raise ValueError(f"axis {name!r} has no level")
            if kind(name) == "layout" and set(levels) - set(LAYOUTS):
                raise ValueError(f"layout levels are {LAYOUTS}")

    def _ok(self, point: dict) -> bool:
        return self.valid is None or bool(self.valid(point))

    def points(self) -> list[dict]:
        names = list(self.axes)
        return [p for combo in itertools.product(*self.axes.values()) if self._ok(p := dict(zip(names, combo)))]

    def covering(self, strength: int = 2) -> list[dict]:
        return covering(self.axes, self._ok, strength)

    def oracle_points(self) -> list[dict]:
        """Every valid point, or (past ORACLE_LIMIT) a covering array of strength 3 that also
        holds the grading family's points, so that what grading sees the oracle sees too."""
        size = math.prod(len(v) for v in self.axes.values())
        if size <= ORACLE_LIMIT:
            return self.points()
        points = self.covering(3)
        return points + [p for p in self.covering(2) if p not in points]


def covering(axes: dict, ok: Callable, strength: int = 2) -> list[dict]:
    """A covering array: valid points such that every `strength`-tuple of levels that some valid
    point holds is held by one of them; greedy, in the product's order, so always the same: each
    pick is the first candidate that holds the most tuples not yet held. The tuples are numbered
    (one column per group of axes), so a pick costs one pass over an integer array: a space of
    thousands of points is covered in milliseconds, at import."""
    names = list(axes)
    index = [_level_index(axes[n]) for n in names]  # a level's number; levels that print alike are one
    sizes = [max(ix) + 1 for ix in index]
    candidates, rows = [], []
    for combo in itertools.product(*(range(len(axes[n])) for n in names)):
        point = {n: axes[n][i] for n, i in zip(names, combo)}
        if ok(point):
            candidates.append(point)
            rows.append([ix[i] for ix, i in zip(index, combo)])
    if not candidates:
        return []
    strength = min(strength, len(names))
    levels = np.array(rows, dtype=np.int64).reshape(len(rows), len(names))
    columns, offset = [], 0
    for group in itertools.combinations(range(len(names)), strength):
        code = np.zeros(len(rows), dtype=np.int64)
        for a in group:
            code = code * sizes[a] + levels[:, a]
        columns.append(code + offset)
        offset += math.prod(sizes[a] for a in group)
    tuples = np.stack(columns, axis=1)  # candidate -> the numbers of the tuples it holds
    uncovered = np.zeros(offset, dtype=bool)
    uncovered[tuples.ravel()] = True
    chosen = []
    while uncovered.any():
        best = int(uncovered[tuples].sum(axis=1).argmax())  # argmax: the first of the best, as the product's order says
        chosen.append(candidates[best])
        uncovered[tuples[best]] = False
    return chosen


def _level_index(levels) -> list[int]:
    first: dict = {}
    return [first.setdefault(_key(level), len(first)) for level in levels]


def _key(level):
    return repr(level)


def describe(point: dict) -> str:
    return ", ".join(f"{name}={_show(level)}" for name, level in point.items())


def _show(level) -> str:
    return level if isinstance(level, str) else repr(level)


# The axes the mechanism applies ---------------------------------------------------------------
def as_dtype(value, dtype: str):
    """Floating tensors of the inputs cast to `dtype` (requires_grad kept); others as they are, and
    so are 8-bit floats (FP8 codes are the input itself, as int8 codes are: notebook 11)."""
    target = _DTYPE[dtype]

    def cast(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.element_size() > 1 and t.dtype != target:
            return t.detach().to(target).requires_grad_(t.requires_grad)
        return t
    return _map(value, cast)


def as_layout(value, layout: str):
    """Input tensors of two or more dimensions rearranged in memory, with the same values."""
    if layout == "contiguous":
        return value
    count = [0]

    def move(t):
        if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.numel() < 2:
            return t
        count[0] += 1
        how = layout if layout != "mixed" else ("column-major" if count[0] == 1 else "strided")
        with torch.no_grad():
            moved = column_major(t) if how == "column-major" else strided(t)
        return moved.requires_grad_(t.requires_grad) if t.is_leaf and t.is_floating_point() else moved
    return _map(value, move)


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same values with the last two dimensions' strides swapped (as a transposed matrix's)."""
    return t.detach().transpose(-2, -1).contiguous().transpose(-2, -1)


def strided(t: torch.Tensor) -> torch.Tensor:
    """The same values at every other element of a buffer twice as long; the gaps hold NaN (or
    the largest value of an integer or bool type), so code that reads a gap shows it."""
    t = t.detach()
    gap = float("nan") if t.is_floating_point() else (True if t.dtype == torch.bool else torch.iinfo(t.dtype).max)
    buffer = torch.full((*t.shape[:-1], 2 * t.shape[-1]), gap, dtype=t.dtype)
    buffer[..., ::2] = t
    return buffer[..., ::2]


def _map(value, fn):
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_map(v, fn) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return fn(value)


@dataclass
class Point:
    """One generated input: the point, and how to build it with a seed."""
    __slotnames__ = []
    point: dict
    space: Space = field(repr=False)

    def build(self, seed: int):
        """The point's inputs, laid out and cast as its "layout" and "dtype" levels say; for a
        call sequence (Steps), every call's arguments."""
        built = self.space.build(self.point, seed)
        if hasattr(built, "calls"):
            calls = [(method, *self._arranged(args, kwargs)) for method, args, kwargs in built.calls]
            return type(built)(calls, built.ctor, built.ctor_kwargs)
        return self._arranged(*built)

    def _arranged(self, args, kwargs):
        for axis, how in (("layout", as_layout), ("dtype", as_dtype)):  # a module is moved to the dtype by the harness
            if axis in self.point:
                args, kwargs = how(args, self.point[axis]), how(kwargs, self.point[axis])
        return args, kwargs
