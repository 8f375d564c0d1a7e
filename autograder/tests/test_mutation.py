"""The mutants of a model answer (autograder/checks/core/mutation.py) and the covering arrays of an
input space (autograder/checks/core/space.py): what the tests of the tests are made of."""
import itertools

import torch

from autograder.checks.core import mutation
from autograder.checks.core.space import Space, as_layout, covering, strided

ANSWER = '''
def f(x, n=None, scale=True):
    n = x.shape[-1] if n is None else n
    y = x[..., :n].contiguous() * 2.0
    if scale:
        y = y / n
    return y.clone()
'''


def test_mutants_change_one_thing_each_inside_the_definitions():
    found = mutation.mutants(ANSWER, {0: 4})
    descriptions = [d for d, _ in found]
    assert len(descriptions) == len(set(t for _, t in found)), "every mutant is a different program"
    for wanted in ("* -> /", "constant 2.0 -> 4.0", "if scale -> if True", "if scale -> if False",
                   ".contiguous(...) dropped", ".clone(...) dropped", "conditional -> its first branch",
                   "x.shape[-1] -> the constant 4"):
        assert any(wanted in d for d in descriptions), f"no mutant {wanted!r} among {descriptions}"
    for _, text in found:
        compile(text, "<mutant>", "exec")
        assert text.startswith("def f(x, n=None, scale=True):"), "the signature is never mutated"


def test_instrumented_cell_records_each_size_site():
    text, count = mutation.instrumented(ANSWER)
    seen = {}
    space = {"__size__": lambda i, v: (seen.setdefault(i, v), v)[1]}
    exec(text, space)
    out = space["f"](torch.ones(2, 5))
    assert count == 1 and seen == {0: 5} and out.shape == (2, 5)


def test_a_covering_array_holds_every_pair_and_respects_the_constraint():
    axes = {"a": (1, 2, 3), "b": ("x", "y", "z"), "c": (False, True), "d": (0, 1)}
    ok = lambda p: not (p["a"] == 3 and p["b"] == "z")
    points = covering(axes, ok)
    assert all(ok(p) for p in points)
    assert len(points) < len(list(itertools.product(*axes.values())))
    valid = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values()) if ok(dict(zip(axes, combo)))]
    for n1, n2 in itertools.combinations(axes, 2):
        for pair in {(p[n1], p[n2]) for p in valid}:  # every pair some valid point holds
            assert any((p[n1], p[n2]) == pair for p in points), f"pair {n1}, {n2} = {pair} not covered"
    assert covering(axes, ok) == points, "the same points every time"


def test_layouts_keep_the_values_and_change_the_strides():
    x = torch.arange(12.0).view(3, 4).requires_grad_()
    for layout in ("column-major", "strided", "mixed"):
        (moved,), _ = as_layout((x,), layout), None
        assert torch.equal(moved.detach(), x.detach()) and not moved.is_contiguous() and moved.requires_grad
    gaps = strided(torch.ones(2, 3))._base
    assert torch.isnan(gaps[..., 1::2]).all(), "reading a gap of a strided input gives NaN"


def test_a_space_generates_its_grading_and_oracle_points():
    space = Space({"shape": (1, 2, 3), "dtype": ("float32", "float64")}, lambda p, seed: ((torch.ones(p["shape"]),), {}))
    assert len(space.covering()) == 6 and len(space.oracle_points()) == 6
    from autograder.checks.core.space import Point
    (x,), _ = Point({"shape": 2, "dtype": "float64"}, space).build(0)
    assert x.dtype == torch.float64 and x.shape == (2,)
