"""Inputs unchanged: every call of learner code through `autograder.checks.call` compares its
tensor arguments (and the parameters and buffers of its nn.Module arguments) with a copy taken
before the call. A learner who writes `x /= scale` on the caller's tensor loses the point here,
in the exercise that does it, and not in a later one that reuses x.

What an exercise's contract says it changes is declared in MAY_CHANGE, not special-cased in a
check. Objects other than tensors, modules, and lists or tuples of them (a KV cache, whose
`update` is meant to write into itself) are not compared."""
import inspect

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

# call name (the `name=` a check passes to call, or the function's __name__) -> the parameters
# that its contract says it changes in place.
# A parameter is named as the contract names it and by its position (0: the first), so that a
# learner's own name for it (def copy_weights_v2_to_v1(a, b)) is no reason to fail.
MAY_CHANGE = {
}


def may_change(fn, name: str) -> set:
    """The parameters the call may change in place: its contract's (rules.py), each named as the
    contract names it and by its position in the course's signature, so that a learner's own name
    for it (def copy_weights_v2_to_v1(a, b)) is no reason to fail."""
    from autograder.checks.core import rules
    contract = rules.of(name.split(".")[-1]) or rules.of(name)
    if contract is None:  # not yet declared
        return MAY_CHANGE.get(name.split(".")[-1], set()) | MAY_CHANGE.get(name, set())
    allowed = set(contract.may_change)
    if allowed:
        from autograder.checks.core.shortcuts import utils_twins
        for signed in [getattr(module, attr) for module, attr in utils_twins(contract.exercise)[:1]] + [fn]:
            try:  # the course's utils twin, or the function itself (the course's reference, as the harness passes it)
                params = list(inspect.signature(signed).parameters)
            except (TypeError, ValueError):
                continue
            allowed |= {params.index(p) for p in contract.may_change if p in params}
    return allowed


def floating_dtypes(fn, args, kwargs) -> set:
    """The floating dtypes a call computes in: its tensor arguments' and its module's (or the
    module arguments') parameters, as names ("float64")."""
    found = set()
    for name, value in [("self", fn), *_named_args(fn, args, kwargs)]:
        if name == "self" and not isinstance(value, nn.Module):
            value = getattr(value, "__self__", None)  # a bound method's object
        for _, t in _tensors(name, value) if value is not None else ():
            if t.is_floating_point() and t.element_size() > 1:  # FP8 codes are data, as int8 ones are: no dtype computed in
                found.add(str(t.dtype).removeprefix("torch."))
    return found


_SIGNATURES = {}  # function -> its signature: computed once, not at every call a check makes (thousands per submit)


def _signature(fn) -> inspect.Signature:
    """inspect.signature(fn), kept per function; a bound method's is its function's without the
    first parameter. A class's is not kept: its __init__ may be replaced after it is made."""
    target = fn.forward if isinstance(fn, nn.Module) else fn
    func = getattr(target, "__func__", target)
    if not inspect.isfunction(func):
        return inspect.signature(target)
    key = (func, func is not target)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = inspect.signature(target)
    return _SIGNATURES[key]


def _named_args(fn, args, kwargs) -> list:
    """(parameter name, value) for each argument, named after fn's signature when it has one."""
    try:
        signature = _signature(fn)
        bound = signature.bind_partial(*args, **kwargs).arguments
        named = []
        for key, value in bound.items():
            kind = signature.parameters[key].kind
            if isinstance(value, tuple) and kind is inspect.Parameter.VAR_POSITIONAL:
                named += [(f"{key}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, dict) and kind is inspect.Parameter.VAR_KEYWORD:
                named += list(value.items())
            else:
                named.append((key, value))
        return named
    except (TypeError, ValueError):  # no signature (a builtin), or arguments it does not take: it will say so itself
        return [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())


def _tensors(name, value) -> list:
    """(what, tensor) pairs an argument holds: itself, a module's parameters and buffers, a list's items."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, nn.Module):
        return [(f"{name}.{key}", t) for key, t in [*value.named_parameters(), *value.named_buffers()]]
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return []


def snapshot(fn, name: str, args, kwargs) -> list:
    """(argument, what, tensor, copy) for every tensor the call may not change."""
    allowed = may_change(fn, name)
    found = []
    with _disable_current_modes(), torch.no_grad():  # a check's dispatch mode (a tile or NaN watch) sees the learner's ops only
        for position, (arg, value) in enumerate(_named_args(fn, args, kwargs)):
            if arg in allowed or position in allowed:
                continue
            for what, t in _tensors(arg, value):
                if t.device.type != "meta" and not t.is_sparse:
                    found.append((arg, what, t, t.detach().clone()))
            if isinstance(value, nn.Module):  # its train()/eval() mode is the caller's too
                found.append((arg, "mode", value, _modes(value)))
    return found


def _modes(module) -> tuple:
    return tuple(m.training for m in module.modules())


def switched(found) -> tuple | None:
    """The first module argument whose train()/eval() mode the call left changed, with the evidence."""
    for arg, what, module, modes in found:
        if what == "mode" and _modes(module) != modes:
            before, after = ("train" if modes[0] else "eval"), ("train" if module.training else "eval")
            return arg, f"{arg} was in {before}() mode before the call, {after}() after" + (
                "" if before != after else " (a submodule's mode changed)")
    return None


def changed(found) -> tuple | None:
    """The first (argument, what) whose tensor differs from its copy, with the evidence."""
    with _disable_current_modes(), torch.no_grad():
        for arg, what, t, copy in found:
            if what == "mode":
                continue
            if t.shape != copy.shape or t.dtype != copy.dtype:
                return arg, what, f"{what} became {t.dtype} {tuple(t.shape)}, was {copy.dtype} {tuple(copy.shape)}"
            same = t.detach() == copy
            if t.is_floating_point() or t.is_complex():
                same |= t.detach().isnan() & copy.isnan()
            if not bool(same.all()):
                return arg, what, f"{what}: {int((~same).sum())} of {t.numel()} values changed"
    return None
