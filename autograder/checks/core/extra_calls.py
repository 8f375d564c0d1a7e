"""The calls the harness adds to a probe's own (harness.py runs them): where the reference refuses
bad input, the learner's code must refuse it too; a module is called a second time on other
inputs of the same shapes; a function called again on equal inputs must return new tensors."""
import copy
import dataclasses

import torch
from torch.utils._pytree import tree_flatten

from autograder.checks import Shortcut, call, course_runs, expect, fail
from autograder.checks.core.comparisons import _where, compare_outputs


def _fresh_result(fn, out, args, kwargs, probe, who):
    """Called again on copies of the same inputs, fn must return new tensors, not the first call's
    (a cache of results: a caller that writes into one changes what the next caller gets)."""
    first = {t.untyped_storage().data_ptr() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel()}
    if not first:
        return
    args, kwargs = copy.deepcopy((args, kwargs))
    again = call(fn, *args, name=who, **kwargs)
    shared = [t for t in tree_flatten(again)[0] if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() in first]
    en_on, zh_on = _where(probe)
    expect(not shared, f"{who} returned the same tensor on a second call with equal inputs{en_on}: build a new result on every call "
           "(no cache of results such as functools.lru_cache), since a caller that writes into one would change the next caller's.",
           f"{who} 在第二次用相同输入调用时返回了同一个张量{zh_on}：每次调用都要构造新的结果（不要缓存结果，例如 functools.lru_cache），"
           "因为调用者写入其中一个，就会改变下一个调用者得到的结果。", f"output of shape {tuple(shared[0].shape) if shared else ()} shares its storage")


def _expect_refused(fn, args, kwargs, probe, who, refused):
    """Where the course's code raises (an id past the vocabulary), the learner's must raise too:
    bad input gets a clear error, not a silent answer. The error is the one the exercise's
    contract declares (its text says "Raises ValueError when ..."); without a contract, any."""
    from autograder.checks.core import rules
    contract = rules.of(who)
    declared = contract.raise_for(type(refused)) if contract is not None else None
    if contract is not None and declared is None:
        raise RuntimeError(f"a probe of {who} ({probe.label}) makes the course's code raise {type(refused).__name__}, "
                           "which its contract does not declare: declare it (Raises) or make it a precondition the space excludes")
    wanted = declared.exception if declared is not None else Exception
    if declared is not None:
        rules.record(who, "raises", declared.error)
    en_on, zh_on = _where(probe)
    try:
        fn(*args, **kwargs)
    except Shortcut:
        raise
    except NotImplementedError:
        fail(f"{who} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             f"{who} 尚未实现：请用你的代码替换 `raise NotImplementedError()`。")
    except wanted:
        return
    except Exception as other:
        fail(f"{who} raised {type(other).__name__} for bad input{en_on}; its rules say: raises {declared.error} when {declared.when}.",
             f"{who} 对错误的输入{zh_on}抛出了 {type(other).__name__}；它的规则是：{declared.zh}时抛出 {declared.error}。",
             f"{type(other).__name__}: {other}")
    rule_en = f" Its rules say: raises {declared.error} when {declared.when}." if declared is not None else ""
    rule_zh = f"它的规则是：{declared.zh}时抛出 {declared.error}。" if declared is not None else ""
    fail(f"{who} returns a result for bad input{en_on}: the course's raises {type(refused).__name__} there. Bad input must get a "
         f"clear error, not a silent answer (do not clamp or wrap what is out of range).{rule_en}",
         f"{who} 对错误的输入返回了结果{zh_on}：课程的实现在这里会抛出 {type(refused).__name__}。错误的输入必须得到清楚的报错，"
         f"而不是悄悄给出答案（不要截断或回绕越界的值）。{rule_zh}", f"{type(refused).__name__}: {refused}")


def _plain(value) -> bool:
    """Only tensors, numbers and containers of them: no object (a cache) that a call changes."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return isinstance(value, (torch.Tensor, int, float, bool, str, type(None), torch.dtype))


def _other(value):
    """Other inputs of the same shapes and kinds: floats negated, ids in reverse order."""
    if isinstance(value, (list, tuple)):
        return type(value)(_other(v) for v in value)
    if isinstance(value, dict):
        return {k: _other(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return -value.detach()
    if isinstance(value, torch.Tensor) and value.dtype != torch.bool and value.dim() > 0:
        return value.flip(-1)
    return value


def _second_call(obj, reference, built, probe, who, explain, family, view):
    """The same object called again on other inputs of the same shapes, after the same first call
    on both sides: what it kept from the first call (its values, its mask, its batch size) must not
    show in the second (issue 29, point 6)."""
    args, kwargs = _other(built)
    ref_args, ref_kwargs = copy.deepcopy((args, kwargs))
    with course_runs(), torch.enable_grad():
        expected = reference(*ref_args, **ref_kwargs)
    with torch.enable_grad():
        out = call(obj, *args, name=f"{who}.forward", **kwargs)
    if view:
        out, expected = view(out), view(expected)
    again = dataclasses.replace(probe, label=f"{probe.label}, then called again on other inputs of the same shapes",
                                zh=f"{probe.zh or probe.label}，随后用形状相同的其他输入再调用一次")

    def kept(probe_, out_, expected_):
        named = explain(probe_, out_, expected_) if explain else None
        en_on, zh_on = _where(probe_)
        return named or (f"{who} must compute every call from its own inputs: called again on other inputs of the same shapes, it gave "
                         f"a wrong output{en_on} (something kept from the first call?). Keep nothing from one call to the next.",
                         f"{who} 每次调用都必须只用它自己的输入计算：用形状相同的其他输入再次调用时输出不对{zh_on}"
                         "（保留了第一次调用的东西？）。不要在两次调用之间保留任何东西。")
    compare_outputs(out, expected, again, who, kept, values="values" in family.compares, dtype="dtype" in family.compares,
                    tolerance=family.tolerances(probe=probe))
