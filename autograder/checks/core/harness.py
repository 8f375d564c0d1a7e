"""Grading by properties: the learner's code and the course's reference, side by side, over a
family of inputs that each exercise declares as data (`FAMILIES` in `nbNN/contract.py`).

A family is a list of `Probe`s. Each probe names the axis of variation it stands for (`AXES`:
batch items that differ, extreme values, edges, other dtypes, ...) and builds fresh, seeded
inputs. For every probe, `same_as_reference` (functions) and `same_as_reference_module`
(nn.Module classes, their weights copied from the reference) compare, whatever the exercise:

- outputs: structure, shape, dtype, device and values, at the tolerance of the output's dtype
  (`TOLERANCE`; the precision rule in `comparisons.py`);
- every gradient (`grads=True`): each floating input and each parameter, against the
  reference's on the same loss sum(w * out), on every probe but extreme values (NO_GRADS);
- inputs unchanged: every call goes through `checks.call`, which compares them;
- bad input: where the reference raises (an id past the vocabulary), the learner's code must
  raise too, any exception, rather than answer silently;
- a second call: a module is called again on other inputs of the same shapes, after the same
  first call on both sides; a function called again on equal inputs must return new tensors
  (these added calls are in `extra_calls.py`);
- state (`Steps`): a sequence of method calls on one object, each output compared, and then
  what the object holds (`holds`: tensor elements reachable from it, in any container), which
  may not grow by more than the reference's does (what each holds at the start, a mask buffer
  for instance, is a design choice).

A named mistake only chooses the words: `explain(probe, out, expected)` may return a sentence
for a failure that the harness has already decided.

How two runs are compared (outputs, gradients, what an object holds) and the precision rule
are in `comparisons.py`.
"""
import contextlib
import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from utils.mla import one_thread  # probes are tiny: one thread is fastest, and a busy machine's handoffs stay out
from autograder.checks import call, course_runs, expect, load_state, seeded_state
from autograder.checks.core.comparisons import (TOLERANCE, _backward, _grad_leaves, _where, compare_grads,  # noqa: F401 (re-exported)
                                           compare_outputs, expect_holds_at_most, holds, message_on)
from autograder.checks.core import inputs, storage
from autograder.checks.core.extra_calls import _expect_refused, _fresh_result, _plain, _second_call

AXES = {
    "batch": ("batch items and heads that differ", "各不相同的批次项与注意力头"),
    "extreme": ("extreme values (logits in the hundreds, far positions)", "极端数值（数百量级的 logits、很远的位置）"),
    "edges": ("edges (length 1, k >= length, nothing new, window longer than the prompt)", "边界情况（长度为 1、k >= 长度、没有新内容、窗口长于提示）"),
    "ties": ("ties", "并列值"),
    "dtype": ("another dtype (float64, bfloat16)", "其他 dtype（float64、bfloat16）"),
    "arguments": ("arguments away from their defaults", "不取默认值的参数"),
    "coverage": ("categories left unused (an expert no token picks)", "未被使用的类别（没有词元选择的专家）"),
    "state": ("a sequence of calls (repeat, reset, the same position twice)", "一串调用（重复、重置、同一位置写两次）"),
    "space": ("a point of the declared input space", "声明的输入空间中的一个点"),
}
# Gradients are compared on every probe but these: at extreme values a saturated softmax's gradient
# is smaller than float32's rounding of it, and two right orders of summation disagree.
NO_GRADS = {"extreme"}


# copy.deepcopy caches __slotnames__ on a class the first time it copies one of its objects; the
# kernel guard deep-copies each checks module's data (FAMILIES) and would then see this module
# changed and load it afresh before every test cell. Declared here, the cache is never written.
@dataclass(frozen=True)
class Probe:
    __slotnames__ = []
    axis: str  # a key of AXES
    label: str  # this member, in English ("two batch items that differ")
    build: Callable  # () -> (args, kwargs), or Steps for a call sequence
    zh: str = ""  # the label in Chinese
    tolerance: object = None  # over the family's, for this member only (Family.tolerance says what it holds)
    grads: bool = True  # False: gradients are not compared on this member (a generated point of extreme values)
    dtype: str | None = None  # a generated point's dtype: a module is moved to it (.to) on both sides

    def __post_init__(self):
        if self.axis not in AXES:
            raise ValueError(f"unknown axis {self.axis!r}: one of {sorted(AXES)}")


@dataclass(frozen=True)
class Steps:
    """A call sequence on one object: [(method name, args, kwargs), ...]; `ctor` and
    `ctor_kwargs`, when given, replace the family's constructor arguments for this probe."""
    __slotnames__ = []
    calls: list = field(default_factory=list)
    ctor: tuple | None = None
    ctor_kwargs: dict | None = None


def _is_steps(built) -> bool:
    """By its fields: grading reloads the checks' modules, so the class may be another copy."""
    return hasattr(built, "calls") and hasattr(built, "ctor_kwargs")


@dataclass
class Family:
    """probes: the pinned members (hand-picked inputs that name a mistake); space: the declared
    input space (space.py), whose covering array of strength 2 follows them. `oracle()` is the
    same family over the whole space, with more seeds: slow, for tests of the tests."""
    __slotnames__ = []
    probes: list
    compares: tuple = ("values", "shape", "dtype", "device", "inputs")
    # {dtype: (atol, rtol)} over TOLERANCE, or a function giving it at grading time, where the
    # exercise's own arithmetic rounds more (notebook 15's tl.dot multiplies in TF32 on a GPU)
    tolerance: object = None
    grad_tolerance: object = None
    space: object = None
    pinned: list = None
    keep: object = None  # a predicate on probes: this family is part of another (Family.only)

    def __post_init__(self):
        if self.pinned is None:  # generated once, at import: the family is data
            self.pinned = list(self.probes)
            self.probes = self.pinned + generated(self.space, self.space.covering() if self.space else [], seeds=(0,))

    def only(self, keep, compares=None) -> "Family":
        """The members for which keep(probe) holds (its oracle too), comparing `compares`."""
        both = keep if self.keep is None else (lambda p, a=self.keep, b=keep: a(p) and b(p))
        return dataclasses.replace(self, probes=[p for p in self.probes if keep(p)], pinned=[p for p in self.pinned if keep(p)],
                                   keep=both, compares=self.compares if compares is None else compares)

    def oracle(self, broad=False) -> "Family":
        """The same family over the whole space, with the space's seeds; `broad`: a covering array
        of strength 3 with the first seed, the oracle CI can afford (cached: each built once)."""
        key = "_broad" if broad else "_oracle"
        cached = self.__dict__.get(key)
        if cached is None:
            if self.space is None:
                points, seeds = [], ()
            elif broad:
                points, seeds = self.space.covering(3), self.space.seeds[:1]
            else:
                points, seeds = self.space.oracle_points(), self.space.seeds
            probes = self.pinned + generated(self.space, points, seeds)
            cached = dataclasses.replace(self, probes=[p for p in probes if self.keep is None or self.keep(p)], pinned=self.pinned)
            self.__dict__[key] = cached
        return cached

    def members(self) -> list:
        """The probes a check runs: the grading family's, or an oracle's while `ORACLE` says so."""
        if not ORACLE[0]:
            return self.probes
        return self.oracle(broad=ORACLE[0] == "broad").probes


    def tolerances(self, gradients=False, probe=None) -> dict:
        extra = self.grad_tolerance if gradients and self.grad_tolerance is not None else self.tolerance
        own = getattr(probe, "tolerance", None)
        return {**TOLERANCE, **(_called(extra) or {}), **((_called(own) or {}) if not gradients else {})}

    def axes(self) -> list:
        return sorted({p.axis for p in self.probes}, key=list(AXES).index)


# What the checks run instead of the grading family: False (grading), True (the whole space, for
# `python -m autograder mutants`) or "broad" (a covering array of strength 3: test_oracle.py, in CI).
ORACLE = [False]


def generated(space, points, seeds) -> list:
    """Probes of the points of `space`, one per point and seed."""
    from autograder.checks.core.space import Point, describe
    probes = []
    for seed in seeds:
        for point in points:
            label = describe(point) + (f", seed {seed}" if seed else "")
            build = _Built(Point(point, space), 7919 * seed + 104729)
            no_grads = bool(space.no_grads(point)) if space.no_grads else False
            tolerance = _Called(space.tolerance, point) if getattr(space, "tolerance", None) else None
            probes.append(Probe("space", label, build, label, tolerance=tolerance, grads=not no_grads, dtype=point.get("dtype")))
    return probes


# A generated probe's callables, as data that a deep copy keeps equal (a functools.partial is equal
# to itself only): grading's guard compares a copy of each checks module's FAMILIES with what it
# holds before every test cell, and runs the module afresh when they differ.
@dataclass(frozen=True)
class _Built:
    __slotnames__ = []
    point: object  # space.Point
    seed: int

    def __call__(self):
        return self.point.build(self.seed)

    def __hash__(self):  # a Point (a dict inside) has none: a probe stays hashable
        return hash((repr(self.point.point), self.seed))


@dataclass(frozen=True)
class _Called:
    __slotnames__ = []
    fn: Callable
    point: dict

    def __call__(self):
        return self.fn(self.point)

    def __hash__(self):
        return hash(repr(self.point))


def _called(tolerance):
    return tolerance() if callable(tolerance) else tolerance


def _real(reference):
    """The reference itself, also inside an own_work block, which blocks its utils name."""
    return reference.original if type(reference).__name__ == "_Blocked" else reference  # by name: modules are reloaded


def _fresh(value):
    """A deep copy that keeps tensors' requires_grad, for the reference's own inputs."""
    return copy.deepcopy(value)


_EXERCISES = [()]  # the running check's notebook's exercises, in order (set by `among`)


def among(check, exercises: tuple, own_earlier=()):
    """check, knowing the exercises of its notebook (graded_checks wraps every check with it). The
    learner's code runs with the notebook's earlier exercises as the course's for the whole check,
    named checks included, unless the exercise is in `own_earlier`: its text asks it to call the
    learner's own (FlashAttention's backward must be yours)."""
    who = check.__name__[len("check_"):]

    @functools.wraps(check)
    def run(*args, **kwargs):
        saved, _EXERCISES[0] = _EXERCISES[0], exercises
        try:
            with _earlier_as_the_course(args[0], who) if args and who not in own_earlier else contextlib.nullcontext():
                return check(*args, **kwargs)
        finally:
            _EXERCISES[0] = saved
    run.graded = True
    return run


def as_graded(obj, exercises: tuple, own_earlier=()):
    """For a visible test cell (`with nbNN.as_graded(MultiHeadAttention): ...`): the notebook's
    earlier exercises that `obj` calls are the course's, as they are when it is graded, so a
    mistake in one costs marks once, in its own exercise's tests."""
    who = getattr(obj, "__name__", "")
    if who in own_earlier or who not in exercises:
        return contextlib.nullcontext()
    saved, _EXERCISES[0] = _EXERCISES[0], exercises
    try:
        return _earlier_as_the_course(obj, who)
    finally:
        _EXERCISES[0] = saved


def _earlier_as_the_course(fn, who: str):
    """While the harness runs the learner's code: the notebook's earlier exercises that it calls
    by name are the course's, so an earlier mistake (a softmax that overflows) costs marks once,
    in its own exercise (issue 29, point 8)."""
    from autograder.checks.core.shortcuts import course_versions, utils_twins
    exercises, base = _EXERCISES[0], who.split(".")[0]
    earlier = exercises[:exercises.index(base)] if base in exercises else ()
    course = {name: _real(getattr(*twins[0])) for name in earlier if (twins := utils_twins(name))}
    return course_versions(fn, course)


def same_as_reference(fn, reference, family: Family, who: str, explain=None, grads=False, seed=0, view=None, effect=None):
    """fn(*args) against reference(*args) on every probe of the family. `view`, when given, maps
    both outputs to what the contract fixes before they are compared (e.g. a set's order sorted).
    `effect(out, args, kwargs)`, when given, is what is compared in place of the output: what a
    call whose contract is to change its arguments (copy weights in place) left in them."""
    with one_thread(), _earlier_as_the_course(fn, who):
        _same_as_reference(fn, _real(reference), family, who, explain, grads, seed, view, effect)


def _same_as_reference(fn, reference, family, who, explain, grads, seed, view, effect):
    for n, probe in enumerate(family.members()):
        args, kwargs = probe.build()
        grads_here = grads and probe.axis not in NO_GRADS and probe.grads
        if grads_here:
            args, kwargs, leaves, names = _grad_leaves(args, kwargs)
        ref_args, ref_kwargs = _fresh((args, kwargs))
        try:
            with course_runs(), torch.enable_grad():
                expected = reference(*ref_args, **ref_kwargs)
        except Exception as refused:  # bad input: the contract's answer is an error
            _expect_refused(fn, args, kwargs, probe, who, refused)
            continue
        before = storage.shared(None, args, kwargs)
        with torch.enable_grad():
            out = call(fn, *args, name=who, **kwargs)
        memory = storage.shared(out, args, kwargs), storage.shared(expected, ref_args, ref_kwargs)  # said after values and gradients
        if effect:
            with course_runs(), torch.no_grad():
                expected = effect(expected, ref_args, ref_kwargs)
            with torch.no_grad():
                out = effect(out, args, kwargs)
        if view:
            out, expected = view(out), view(expected)
        compare_outputs(out, expected, probe, who, explain, values="values" in family.compares, dtype="dtype" in family.compares,
                        tolerance=family.tolerances(probe=probe), relative="relative" in family.compares)
        if n == 0:
            _fresh_result(fn, out, args, kwargs, probe, who)
        if grads_here:
            ref_leaves = [t for t in list(ref_args) + list(ref_kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
            with course_runs():
                want = _backward(expected, ref_leaves, seed + n)
            own = _backward(out, leaves, seed + n, who)
            compare_grads(own, want, names, probe, who, family.tolerances(gradients=True, probe=probe))
        storage.expect_own_memory(before, *memory, probe.label, who, inputs.may_change(reference, who))


def same_as_reference_module(cls, reference_cls, ctor: tuple, family: Family, who: str, explain=None,
                             grads=False, seed=0, ctor_kwargs=None, state_seed=1, view=None, by_position=False):
    """Learner's cls(*ctor) and reference_cls(*ctor) (an nn.Module gets the reference's seeded
    weights, loaded by name, or by position where the contract leaves the names free), on every
    probe: forward (or a Steps sequence of method calls), outputs, every parameter's gradient,
    and what the object holds after a sequence."""
    with one_thread(), _earlier_as_the_course(cls, who):
        _same_as_reference_module(cls, _real(reference_cls), ctor, family, who, explain, grads, seed, ctor_kwargs or {},
                                  state_seed, view, by_position)


def _same_as_reference_module(cls, reference_cls, ctor, family, who, explain, grads, seed, ctor_kwargs, state_seed, view,
                              by_position):
    for n, probe in enumerate(family.members()):
        built = probe.build()
        steps = built.calls if _is_steps(built) else [("__call__", *built)]
        args_ = built.ctor if _is_steps(built) and built.ctor is not None else ctor
        kwargs_ = built.ctor_kwargs if _is_steps(built) and built.ctor_kwargs is not None else ctor_kwargs
        reference, obj, own_params = _construct(cls, reference_cls, args_, kwargs_, who, state_seed, by_position)
        if probe.dtype and isinstance(reference, nn.Module):  # a generated point's dtype: both modules moved to it
            reference, obj = _moved(reference, probe.dtype), _moved(obj, probe.dtype, who)
            own_params = {k: p for k, p in obj.named_parameters()} if not by_position else own_params
        # what each holds before the sequence (a mask buffer is a choice), where the contract fixes it
        held = holds(obj) - holds(reference) if "holds" in family.compares else 0
        ref_steps = _fresh(steps)  # one copy of the whole sequence: an object passed to every step (a cache) stays one
        refused = False
        for (method, args, kwargs), (_, ref_args, ref_kwargs) in zip(steps, ref_steps):
            target = obj if method == "__call__" else getattr(obj, method)
            try:
                with course_runs(), torch.enable_grad():
                    expected = getattr(reference, method)(*ref_args, **ref_kwargs)
            except Exception as error:  # bad input: the contract's answer is an error
                _expect_refused(target, args, kwargs, probe, f"{who}.{'forward' if method == '__call__' else method}", error)
                refused = True
                break
            before = storage.shared(None, args, kwargs)
            with torch.enable_grad():
                out = call(target, *args, name=f"{who}.{'forward' if method == '__call__' else method}", **kwargs)
            memory = storage.shared(out, args, kwargs), storage.shared(expected, ref_args, ref_kwargs)
            if view:
                out, expected = view(out), view(expected)
            compare_outputs(out, expected, probe, who, explain, values="values" in family.compares, dtype="dtype" in family.compares,
                            tolerance=family.tolerances(probe=probe), relative="relative" in family.compares)
            storage.expect_own_memory(before, *memory, probe.label, who)
        if refused:
            continue
        single = not _is_steps(built) or (len(built.calls) == 1 and built.calls[0][0] == "__call__")  # one forward, other ctor arguments
        if grads and isinstance(reference, nn.Module) and single and probe.axis not in NO_GRADS and probe.grads:
            params = dict(reference.named_parameters())
            names = [k for k, p in params.items() if p.requires_grad]
            with course_runs():
                want = _backward(expected, [params[k] for k in names], seed + n)
            own = _backward(out, [own_params[k] for k in names], seed + n, who)
            compare_grads(own, want, [f"{who}.{k}" for k in names], probe, who, family.tolerances(gradients=True, probe=probe))
        if not single and "holds" in family.compares:  # where the contract fixes what is kept
            expect_holds_at_most(obj, holds(reference) + max(held, 0), probe, who)
        call_args = built if not _is_steps(built) else tuple(built.calls[0][1:])
        if single and isinstance(reference, nn.Module) and _plain(call_args):
            _second_call(obj, reference, call_args, probe, who, explain, family, view)


def _moved(module, dtype: str, who=None):
    """module.to(dtype), as a learner's caller would: the module must come back moved."""
    from autograder.checks.core.space import _DTYPE
    if who is None:
        with course_runs():
            return module.to(_DTYPE[dtype])
    moved = call(module.to, _DTYPE[dtype], name=f"{who}.to")
    expect(moved is module, f"{who}.to(dtype) must return the module itself (do not override nn.Module.to).",
           f"{who}.to(dtype) 必须返回模块本身（不要重写 nn.Module.to）。")
    return moved


def _construct(cls, reference_cls, args, kwargs, who, state_seed, by_position=False):
    """(reference, learner's object, its parameters by the reference's names); a module's weights
    are the reference's seeded ones."""
    from autograder.checks import own_module
    with course_runs():
        reference = reference_cls(*args, **kwargs)
        if isinstance(reference, nn.Module):
            reference.load_state_dict(seeded_state(reference, state_seed), strict=False)
    if not isinstance(reference, nn.Module):
        return reference, call(cls, *args, name=who, **kwargs), {}
    obj = own_module(cls, *args, **kwargs)
    if not by_position:
        load_state(obj, reference.state_dict(), who)
        return reference, obj, dict(obj.named_parameters())
    own, want = list(obj.named_parameters()), list(reference.named_parameters())
    shapes = [tuple(p.shape) for _, p in own]
    expect(shapes == [tuple(p.shape) for _, p in want],
           f"{who}'s parameters, in the order the module registers them, must have the shapes of the contract: check each layer's in and out sizes, which layers have a bias, and their order.",
           f"{who} 的参数按模块注册的顺序必须具有约定的形状：请检查每层的输入与输出大小、哪些层带偏置以及它们的顺序。",
           f"shapes {shapes}, expected {[tuple(p.shape) for _, p in want]}")
    with torch.no_grad():
        for (_, mine), (_, theirs) in zip(own, want):
            mine.copy_(theirs)
    return reference, obj, {k: mine for (k, _), (_, mine) in zip(want, own)}


