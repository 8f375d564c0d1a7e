"""Families whose extreme probes saturate a softmax: their gradients are rounding, not a property.

Scores in the hundreds make softmax one-hot in float32; what flows back through it is then of the
order of float32's rounding of those scores, and two right solutions (q @ k.T against einsum or
F.scaled_dot_product_attention) differ there by more than any useful tolerance. Such probes are
compared on their outputs (an exp without the max overflows there); the other probes of the
family compare every gradient as well.
"""
from autograder.checks.core.harness import Family


def split_saturated(family: Family) -> tuple[Family, Family]:
    """(the probes whose gradients are compared, the extreme probes compared on outputs only)."""
    graded = family.only(lambda p: p.axis != "extreme")
    steep = family.only(lambda p: p.axis == "extreme", tuple(c for c in family.compares if c != "grads"))
    return graded, steep
