"""A copy is a copy: an output, or what a call leaves in one of its arguments, may not share memory
with another argument unless the course's does the same (harness.py runs it on every probe).

`nn.Parameter(v2.W_query.weight.T)` looks like a copy into v1 and is a view of v2's storage: a
later in-place change of one (an optimizer step) changes the other. `return x` from a function
whose course version returns a new tensor hands the caller's own tensor back. Both show here, by
the storage each tensor lives in, compared with the course's run on the same inputs.
"""
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from autograder.checks import expect


def _tensors_of(value, name: str) -> list:
    """(what, tensor) of an argument or output: itself, a module's parameters and buffers, the
    tensors of a list, tuple or dict."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, nn.Module):
        return [(f"{name}.{key}", t) for key, t in [*value.named_parameters(), *value.named_buffers()]]
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return [pair for i, v in enumerate(value) for pair in _tensors_of(v, f"{name}[{i}]")]
    if isinstance(value, dict) and len(value) <= 64:
        return [pair for k, v in value.items() for pair in _tensors_of(v, f"{name}[{k!r}]")]
    return []


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr() if t.numel() else 0
    except RuntimeError:  # a tensor without storage (a functional tensor): nothing to share
        return 0


def _groups(args, kwargs) -> list[tuple[str, list]]:
    named = [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [(name, _tensors_of(value, name)) for name, value in named]


def shared(out, args, kwargs) -> set:
    """Which (output or argument tensor, other argument) pairs share a storage: by position, so the
    learner's run and the course's can be compared."""
    groups = _groups(args, kwargs) + [("the output", [(f"output {i}", t) for i, t in enumerate(tree_flatten(out)[0])
                                                      if isinstance(t, torch.Tensor)])]
    owners = {}
    for g, (_, tensors) in enumerate(groups):
        for what, t in tensors:
            if ptr := _storage(t):
                owners.setdefault(ptr, set()).add(g)
    pairs = set()
    for g, (_, tensors) in enumerate(groups):
        for what, t in tensors:
            for other in owners.get(_storage(t), set()) - {g}:  # an empty tensor (an MLA cache of 0 rows) owns no storage
                pairs.add((what, groups[other][0]))
    return pairs


def _group(what: str) -> str:
    """The argument a tensor belongs to: "argument 1.weight" -> "argument 1"."""
    return what.split(".")[0].split("[")[0]


def expect_own_memory(before: set, after: set, course: set, probe_label: str, who: str, may_change=frozenset()):
    """`after`: the learner's pairs after the call; `before`: the pairs its inputs already had;
    `course`: the course's pairs after the same call. A new pair the course does not make fails,
    except the output and an argument the contract lets the call change in place (`may_change`:
    names and 0-based positions): an update in place may hand that argument back
    (update_expert_bias). Such an argument still may not share with another one (02's v1 and v2)."""
    spared = {f"argument {p + 1}" if isinstance(p, int) else p for p in may_change}

    def returned(pair) -> bool:
        sides = {_group(pair[0]), pair[1]}
        return bool(sides & spared) and bool(sides & {"the output", "output"} or pair[0].startswith("output "))
    new = sorted(pair for pair in after - before - course if not returned(pair))
    if not new:
        return
    what, other = new[0]
    expect(False, f"New-results rule (notebook 00): {who}'s {what} shares memory with {other} (on {probe_label}), and the course's does not. A copy must own its "
           "memory: use .clone() (or copy_ into your own tensor under torch.no_grad()), not a view such as .T, .view or "
           "nn.Parameter(other_tensor), or a change to one will change the other.",
           f"新结果规则（笔记本 00）：{who} 的 {what} 与 {other} 共享内存（在{probe_label}上），而课程的实现没有。副本必须拥有自己的内存：请用 .clone()"
           "（或在 torch.no_grad() 下 copy_ 到你自己的张量中），不要用 .T、.view 或 nn.Parameter(另一个张量) 这样的视图，"
           "否则改变其中一个就会改变另一个。", f"{len(new)} shared pair(s): {new[:3]}")
