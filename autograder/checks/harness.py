"""Grading by properties: the learner's code and the course's reference, side by side, over a
family of inputs that each exercise declares as data (`FAMILIES` in its `nbNN.py`).

A family is a list of `Probe`s. Each probe names the axis of variation it stands for (`AXES`:
batch items that differ, extreme values, edges, other dtypes, ...) and builds fresh, seeded
inputs. For every probe, `same_as_reference` (functions) and `same_as_reference_module`
(nn.Module classes, their weights copied from the reference) compare, whatever the exercise:

- outputs: structure, shape, dtype, device and values, at the tolerance of the output's dtype
  (`TOLERANCE`; the precision rule below);
- every gradient (`grads=True`): each floating input and each parameter, against the
  reference's on the same loss sum(w * out), on every probe but extreme values (NO_GRADS);
- inputs unchanged: every call goes through `checks.call`, which compares them;
- state (`Steps`): a sequence of method calls on one object, each output compared, and then
  what the object holds (`holds`: tensor elements reachable from it, in any container), which
  may not grow by more than the reference's does (what each holds at the start, a mask buffer
  for instance, is a design choice).

A named mistake only chooses the words: `explain(probe, out, expected)` may return a sentence
for a failure that the harness has already decided.

Precision rule (course-wide): float32 is the precision graded. A float64 probe checks that the
output follows its input's dtype (float64 out) and is graded at float32's tolerance, so the idiom
of computing a softmax in float32 and casting back (Llama, Hugging Face) stays correct. A
bfloat16 probe is graded at bfloat16's tolerance against the reference run in float32.
"""
import collections
import copy
import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from utils.mla import one_thread  # probes are tiny: one thread is fastest, and a busy machine's handoffs stay out
from autograder.checks import ATOL, RTOL, call, course_runs, expect, fail, load_state, message, randn, seeded_state

AXES = {
    "batch": ("batch items and heads that differ", "各不相同的批次项与注意力头"),
    "extreme": ("extreme values (logits in the hundreds, far positions)", "极端数值（数百量级的 logits、很远的位置）"),
    "edges": ("edges (length 1, k >= length, nothing new, window longer than the prompt)", "边界情况（长度为 1、k >= 长度、没有新内容、窗口长于提示）"),
    "ties": ("ties", "并列值"),
    "dtype": ("another dtype (float64, bfloat16)", "其他 dtype（float64、bfloat16）"),
    "arguments": ("arguments away from their defaults", "不取默认值的参数"),
    "coverage": ("categories left unused (an expert no token picks)", "未被使用的类别（没有词元选择的专家）"),
    "state": ("a sequence of calls (repeat, reset, the same position twice)", "一串调用（重复、重置、同一位置写两次）"),
}
# Gradients are compared on every probe but these: at extreme values a saturated softmax's gradient
# is smaller than float32's rounding of it, and two right orders of summation disagree.
NO_GRADS = {"extreme"}
# (atol, rtol) by the output's dtype; float64 is graded at float32's (the precision rule above).
TOLERANCE = {torch.float32: (ATOL, RTOL), torch.float64: (ATOL, RTOL),
             torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)}


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
    __slotnames__ = []
    probes: list
    compares: tuple = ("values", "shape", "dtype", "device", "inputs")

    def axes(self) -> list:
        return sorted({p.axis for p in self.probes}, key=list(AXES).index)


def _real(reference):
    """The reference itself, also inside an own_work block, which blocks its utils name."""
    return reference.original if type(reference).__name__ == "_Blocked" else reference  # by name: modules are reloaded


def _fresh(value):
    """A deep copy that keeps tensors' requires_grad, for the reference's own inputs."""
    return copy.deepcopy(value)


def _where(probe) -> tuple:
    return f" (on {probe.label})", f"（在{probe.zh or probe.label}上）"


def compare_outputs(out, expected, probe, who, explain=None, path="output", values=True, dtype=True):
    """out must have expected's structure, and each tensor its shape, dtype, device and values
    (not the values when `values` is False: a random draw the contract does not fix)."""
    en_on, zh_on = _where(probe)
    if isinstance(expected, (tuple, list)):
        expect(isinstance(out, (tuple, list)) and len(out) == len(expected),
               f"{who} must return {len(expected)} results{en_on}.", f"{who} 必须返回 {len(expected)} 个结果{zh_on}。",
               f"got {type(out).__name__}")
        for i, (a, b) in enumerate(zip(out, expected)):
            compare_outputs(a, b, probe, who, explain, f"{path}[{i}]", values, dtype)
        return
    if not isinstance(expected, torch.Tensor):
        if not values:
            return
        if isinstance(expected, float):
            ok = isinstance(out, (int, float)) and math.isclose(out, expected, rel_tol=RTOL, abs_tol=ATOL)
        else:
            ok = out == expected
        if not ok:
            _fail_named(explain, probe, out, expected, f"{who} gives the wrong {path}{en_on}.",
                        f"{who} 的 {path} 不对{zh_on}。", f"got {out!r}, expected {expected!r}")
        return
    expect(isinstance(out, torch.Tensor), f"{who}'s {path} should be a torch.Tensor{en_on}.",
           f"{who} 的 {path} 应该是 torch.Tensor{zh_on}。", f"got {type(out).__name__}")
    expect(tuple(out.shape) == tuple(expected.shape), f"{who}'s {path} has the wrong shape{en_on}.",
           f"{who} 的 {path} 形状不对{zh_on}。", f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    expect(out.dtype == expected.dtype or not dtype and out.is_floating_point() == expected.is_floating_point(),
           f"{who}'s {path} must follow its input's dtype ({expected.dtype}){en_on}: build every tensor from the input's dtype, or cast the result back.",
           f"{who} 的 {path} 必须沿用输入的 dtype（{expected.dtype}）{zh_on}：按输入的 dtype 构造每个张量，或把结果转换回来。",
           f"got {out.dtype}")
    expect(out.device == expected.device, f"{who}'s {path} must be on its input's device{en_on}.",
           f"{who} 的 {path} 必须与输入在同一设备上{zh_on}。", f"got {out.device}, expected {expected.device}")
    atol, rtol = TOLERANCE.get(expected.dtype, (0, 0))  # where the dtype is free, the course's dtype sets it
    a, b = out.detach().double(), expected.detach().double()
    if values and not torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        diff = (a - b).abs().nan_to_num(nan=math.inf)
        at = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.dim() else ()
        _fail_named(explain, probe, out, expected, f"{who}'s {path} differs from the course's{en_on}.",
                    f"{who} 的 {path} 与课程的结果不同{zh_on}。",
                    f"largest difference {float(diff.max()):.4g} at {at}; atol={atol}, rtol={rtol}")


def _fail_named(explain, probe, out, expected, en, zh, evidence):
    named = explain(probe, out, expected) if explain else None
    if named:
        en, zh = named
    fail(en, zh, evidence)


def _grad_leaves(args, kwargs):
    """The floating tensors among the arguments, made leaves that require grad (in place of them)."""
    leaves = []

    def leaf(v):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().requires_grad_()
            leaves.append(v)
        return v
    return tuple(leaf(a) for a in args), {k: leaf(v) for k, v in kwargs.items()}, leaves


def _loss(out, seed):
    """sum(w * out) over every floating tensor of out, w fixed by the seed."""
    tensors = [t for t in (out if isinstance(out, (tuple, list)) else [out])
               if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    return sum((t * randn(t.numel(), seed=seed + i).view(t.shape).to(t.dtype)).sum() for i, t in enumerate(tensors))


def compare_grads(own, want, names, probe, who):
    """Gradients, pairwise by name: a missing one (None) or a different one fails."""
    en_on, zh_on = _where(probe)
    for name, g, w in zip(names, own, want):
        if w is None:
            continue
        atol, rtol = TOLERANCE.get(w.dtype, (ATOL, RTOL))
        # Named only where the course's gradient is more than rounding (a saturated softmax gives
        # exact zeros in one order of operations and 1e-30 in another); the values decide below.
        reaches = w.numel() > 0 and bool(w.abs().max() > 10 * atol)
        expect(not reaches or g is not None and bool(g.abs().sum() > 0),
               f"No gradient reaches {name} through {who}{en_on}: no torch.no_grad(), .detach() or .data on the way from it to the output.",
               f"梯度没有经由 {who} 传到 {name}{zh_on}：从它到输出的路径上不能有 torch.no_grad()、.detach() 或 .data。")
        g = torch.zeros_like(w) if g is None else g
        # relative to the gradient's largest entry: sums of many terms (a saturated softmax) cancel
        bound = 10 * atol + 10 * rtol * float(w.double().abs().max())
        diff = float((g.double() - w.double()).abs().max())
        if diff > bound:
            fail(f"The gradient of {name} through {who} differs from the course's{en_on}: part of the output does not train "
                 "(computed under torch.no_grad(), from .detach() or .data) or is computed differently.",
                 f"经由 {who} 到 {name} 的梯度与课程的不同{zh_on}：输出的一部分没有参与训练（在 torch.no_grad() 下、"
                 "或由 .detach() / .data 计算）或计算方式不同。", f"largest difference {diff:.4g}, allowed {bound:.4g}")


_EXERCISES = [()]  # the running check's notebook's exercises, in order (set by `among`)


def among(check, exercises: tuple):
    """check, knowing the exercises of its notebook (graded_checks wraps every check with it)."""
    @functools.wraps(check)
    def run(*args, **kwargs):
        saved, _EXERCISES[0] = _EXERCISES[0], exercises
        try:
            return check(*args, **kwargs)
        finally:
            _EXERCISES[0] = saved
    run.graded = True
    return run


def _earlier_as_the_course(fn, who: str):
    """While the harness runs the learner's code: the notebook's earlier exercises that it calls
    by name are the course's, so an earlier mistake (a softmax that overflows) costs marks once,
    in its own exercise (issue 29, point 8)."""
    from autograder.checks.shortcuts import course_versions, utils_twins
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
    for n, probe in enumerate(family.probes):
        args, kwargs = probe.build()
        grads_here = grads and probe.axis not in NO_GRADS
        if grads_here:
            args, kwargs, leaves = _grad_leaves(args, kwargs)
        ref_args, ref_kwargs = _fresh((args, kwargs))
        with course_runs(), torch.enable_grad():
            expected = reference(*ref_args, **ref_kwargs)
        with torch.enable_grad():
            out = call(fn, *args, name=who, **kwargs)
        if effect:
            with course_runs(), torch.no_grad():
                expected = effect(expected, ref_args, ref_kwargs)
            with torch.no_grad():
                out = effect(out, args, kwargs)
        if view:
            out, expected = view(out), view(expected)
        compare_outputs(out, expected, probe, who, explain, values="values" in family.compares, dtype="dtype" in family.compares)
        if grads_here:
            ref_leaves = [t for t in list(ref_args) + list(ref_kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
            with course_runs():
                want = _backward(expected, ref_leaves, seed + n)
            own = _backward(out, leaves, seed + n, who)
            names = [f"input {i + 1}" for i in range(len(leaves))]
            compare_grads(own, want, names, probe, who)


def _backward(out, leaves, seed, who=None):
    loss = _loss(out, seed)
    if not isinstance(loss, torch.Tensor):
        if who:
            fail(f"{who}'s output does not depend on anything that trains: no torch.no_grad() or .detach() around it.",
                 f"{who} 的输出不依赖任何可训练的量：不要用 torch.no_grad() 或 .detach() 包住它。")
        return [None] * len(leaves)
    try:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    except RuntimeError as e:
        if not who:
            raise
        fail(f"{who}'s output cannot be backpropagated through: check for in-place writes into tensors autograd needs.",
             f"无法对 {who} 的输出做反向传播：检查是否对自动求导需要的张量做了原地写入。", f"{type(e).__name__}: {e}")
    return [None if g is None else g.detach() for g in grads]


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
    for n, probe in enumerate(family.probes):
        built = probe.build()
        steps = built.calls if _is_steps(built) else [("__call__", *built)]
        args_ = built.ctor if _is_steps(built) and built.ctor is not None else ctor
        kwargs_ = built.ctor_kwargs if _is_steps(built) and built.ctor_kwargs is not None else ctor_kwargs
        reference, obj, own_params = _construct(cls, reference_cls, args_, kwargs_, who, state_seed, by_position)
        held = holds(obj) - holds(reference)  # what each holds before the sequence (a mask buffer is a choice)
        ref_steps = _fresh(steps)  # one copy of the whole sequence: an object passed to every step (a cache) stays one
        for (method, args, kwargs), (_, ref_args, ref_kwargs) in zip(steps, ref_steps):
            with course_runs(), torch.enable_grad():
                expected = getattr(reference, method)(*ref_args, **ref_kwargs)
            target = obj if method == "__call__" else getattr(obj, method)
            with torch.enable_grad():
                out = call(target, *args, name=f"{who}.{'forward' if method == '__call__' else method}", **kwargs)
            if view:
                out, expected = view(out), view(expected)
            compare_outputs(out, expected, probe, who, explain, values="values" in family.compares, dtype="dtype" in family.compares)
        if grads and isinstance(reference, nn.Module) and not _is_steps(built) and probe.axis not in NO_GRADS:
            names = [k for k, p in reference.named_parameters() if p.requires_grad]
            with course_runs():
                want = _backward(expected, [dict(reference.named_parameters())[k] for k in names], seed + n)
            own = _backward(out, [own_params[k] for k in names], seed + n, who)
            compare_grads(own, want, [f"{who}.{k}" for k in names], probe, who)
        if _is_steps(built) and "holds" in family.compares:  # where the contract fixes what is kept
            expect_holds_at_most(obj, holds(reference) + max(held, 0), probe, who)


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


def holds(obj, _seen=None) -> int:
    """Tensor elements reachable from obj: attributes, containers (list, tuple, dict, deque, set),
    a module's parameters and buffers; each storage counted once."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        key = ("storage", obj.untyped_storage().data_ptr()) if obj.device.type != "meta" else id(obj)
        if key in seen:
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes() // max(1, obj.element_size())
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        return sum(holds(v, seen) for v in obj)
    if isinstance(obj, dict):
        return sum(holds(v, seen) for v in obj.values())
    if isinstance(obj, (str, bytes, int, float, bool, type(None), type)) or callable(obj) and not hasattr(obj, "__dict__"):
        return 0
    return holds(vars(obj), seen) if hasattr(obj, "__dict__") else 0


def expect_holds_at_most(obj, limit: int, probe, who: str):
    en_on, zh_on = _where(probe)
    held = holds(obj)
    expect(held <= limit,
           f"{who} holds more than it needs{en_on}: drop what falls out of the window or is replaced, wherever you keep it (a tensor, a list, a deque, a dict).",
           f"{who} 保存的内容超出了需要{zh_on}：无论存在哪里（张量、列表、deque、字典），都要丢掉移出窗口或被替换的部分。",
           f"{held} elements held, the course's holds {limit}")


def message_on(probe, en, zh, evidence=""):
    """A sentence that says on which probe it was observed."""
    en_on, zh_on = _where(probe)
    return message(en + en_on, zh + zh_on, evidence)
