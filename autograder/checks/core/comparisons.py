"""How the learner's run and the course's are compared (`harness.py` runs them): outputs
(structure, shape, dtype, device, values at their dtype's tolerance), every gradient, and what an
object holds.

Precision rule (course-wide): float32 is the precision graded. A float64 probe checks that the
output follows its input's dtype (float64 out) and is graded at float32's tolerance, so the idiom
of computing a softmax in float32 and casting back (Llama, Hugging Face) stays correct. A
bfloat16 probe is graded at bfloat16's tolerance against the reference run in float32.
"""
import collections
import math
import numbers

import torch
from torch.utils._pytree import tree_flatten

from autograder.checks import ATOL, RTOL, expect, fail, message, randn

# (atol, rtol) by the output's dtype; float64 is graded at float32's (the precision rule above).
TOLERANCE = {torch.float32: (ATOL, RTOL), torch.float64: (ATOL, RTOL),
             torch.bfloat16: (3e-2, 3e-2), torch.float16: (3e-3, 3e-3)}


def _where(probe) -> tuple:
    return f" (on {probe.label})", f"（在{probe.zh or probe.label}上）"


def compare_outputs(out, expected, probe, who, explain=None, path="output", values=True, dtype=True, tolerance=TOLERANCE,
                    relative=False):
    """out must have expected's structure, and each tensor its shape, dtype, device and values
    (not the values when `values` is False: a random draw the contract does not fix). With
    `relative`, the absolute tolerance scales with the expected tensor's largest magnitude (at
    most 1), so small outputs (a quantization scale of 1e-3) are compared at their own scale."""
    en_on, zh_on = _where(probe)
    if isinstance(expected, (tuple, list)):
        expect(isinstance(out, (tuple, list)) and len(out) == len(expected),
               f"{who} must return {len(expected)} results{en_on}.", f"{who} 必须返回 {len(expected)} 个结果{zh_on}。",
               f"got {type(out).__name__}")
        for i, (a, b) in enumerate(zip(out, expected)):
            compare_outputs(a, b, probe, who, explain, f"{path}[{i}]", values, dtype, tolerance, relative)
        return
    if not isinstance(expected, torch.Tensor):
        if not values:
            return
        if isinstance(expected, float):
            ok = isinstance(out, (int, float)) and math.isclose(out, expected, rel_tol=RTOL, abs_tol=ATOL)
        elif isinstance(expected, int) and not isinstance(expected, bool):  # a count: 7.0 or tensor(7) is not one
            expect(isinstance(out, numbers.Integral) and not isinstance(out, bool),
                   f"{who} must return an int{en_on}, not a float or a tensor: counts are integers (multiply ints, int(...) a tensor's item).",
                   f"{who} 必须返回 int{zh_on}，而不是浮点数或张量：计数是整数（做整数乘法，对张量的元素用 int(...)）。",
                   f"got {type(out).__name__} {out!r} for {path}")
            ok = out == expected
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
           f"dtype rule (notebook 00; the exercise's Rules list the dtypes graded): {who}'s {path} must follow its input's dtype "
           f"({expected.dtype}){en_on}: build every tensor from the input's dtype, or cast the result back.",
           f"dtype 规则（笔记本 00；练习的规则列出了评分所用的 dtype）：{who} 的 {path} 必须沿用输入的 dtype（{expected.dtype}）{zh_on}："
           "按输入的 dtype 构造每个张量，或把结果转换回来。",
           f"got {out.dtype}")
    expect(out.device == expected.device, f"{who}'s {path} must be on its input's device{en_on}.",
           f"{who} 的 {path} 必须与输入在同一设备上{zh_on}。", f"got {out.device}, expected {expected.device}")
    atol, rtol = tolerance.get(expected.dtype, (0, 0))  # where the dtype is free, the course's dtype sets it
    a, b = out.detach().double(), expected.detach().double()
    if relative and b.numel():
        atol *= min(1.0, max(float(b.abs().nan_to_num(posinf=0, neginf=0).max()), 1e-30))
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
    """The floating tensors among the arguments, made leaves that require grad (in place of them),
    and their names: "input i" by position, a keyword argument by its key (model.head.weight)."""
    leaves, names = [], []

    def leaf(v, name):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone().requires_grad_()
            leaves.append(v)
            names.append(name)
        return v
    args = tuple(leaf(a, f"input {i + 1}") for i, a in enumerate(args))
    return args, {k: leaf(v, k) for k, v in kwargs.items()}, leaves, names


def _loss(out, seed):
    """sum(w * out) over every floating tensor of out, however nested, w fixed by the seed and by
    the tensor's place in out."""
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum((t * randn(t.numel(), seed=seed + i).view(t.shape).to(t.device, t.dtype)).sum() for i, t in enumerate(tensors) if t.requires_grad)


def compare_grads(own, want, names, probe, who, tolerance=TOLERANCE):
    """Gradients, pairwise by name: a missing one (None) or a different one fails."""
    en_on, zh_on = _where(probe)
    for name, g, w in zip(names, own, want):
        if w is None:
            continue
        atol, rtol = tolerance.get(w.dtype, (ATOL, RTOL))
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
