"""What hidden and visible tests call: checks whose failures name the idea that is wrong.

Every failure is an AssertionError whose message is one English sentence, its Chinese
translation, then the evidence in brackets (shapes, largest difference). One module per
notebook (`nb00`, `nb01`, ...) holds that notebook's checks; this file holds the pieces
they share. `autograder/tests` runs them against a collection of wrong solutions.
"""
import functools
import math

import torch
from torch import nn

# fp32 tolerances for exact algebra (CURRICULUM.md); published 4-digit numbers get 1e-4.
ATOL, RTOL = 1e-5, 1e-4
BOOK_ATOL = 1e-4


def message(en: str, zh: str, evidence: str = "") -> str:
    return f"{en} {zh}" + (f" [{evidence}]" if evidence else "")


class CheckFailed(AssertionError):
    """A check's verdict: one sentence that names the idea that is wrong. An AssertionError of
    any other class comes from the learner's own code (their assert), and is said as theirs."""


def fail(en: str, zh: str, evidence: str = ""):
    raise CheckFailed(message(en, zh, evidence))


def expect(condition, en: str, zh: str, evidence: str = ""):
    if not condition:
        fail(en, zh, evidence)


class Shortcut(CheckFailed):
    """Raised when an exercise calls the very thing it asks the learner to build."""


def call(fn, *args, name: str | None = None, inputs_named: bool = False, **kwargs):
    """Call the learner's code, turning a crash into a sentence a learner can act on; the
    call must leave its tensor arguments as they were (inputs.py says which may change), unless
    `inputs_named`: the check compares them itself, with a sentence in the exercise's words."""
    name = name or getattr(fn, "__name__", "your code")
    from autograder.checks.core import inputs
    from autograder.checks.core import elsewhere
    from autograder.checks.core import rules
    for dtype in inputs.floating_dtypes(fn, args, kwargs):  # what the contract's `dtypes` must name (test_rules.py)
        rules.record(name, "dtypes", dtype)
    copies = [] if inputs_named else inputs.snapshot(fn, name, args, kwargs)
    try:
        out, moved = elsewhere.run(fn, name, args, kwargs)  # its inputs report a GPU
    except (Shortcut, CheckFailed):
        raise
    except AssertionError as e:  # the learner's own assert: theirs, not a check's sentence
        fail(f"Your code raised AssertionError in {name}: {str(e)[:300] or '(an assert without a message)'}. That is your own assert, "
             "not a check's: see which of your conditions failed on these inputs.",
             f"你的代码在 {name} 中抛出了 AssertionError：{str(e)[:300] or '（没有说明的 assert）'}。这是你自己的 assert，不是检查给出的："
             "请看你的哪个条件在这些输入上不成立。", f"inputs of shape {', '.join(_describe(a) for a in args)}")
    except NotImplementedError:
        fail(f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             f"{name} 尚未实现：请用你的代码替换 `raise NotImplementedError()`。")
    except Exception as e:
        shapes = ", ".join(_describe(a) for a in args)
        if _dtype_clash(e):  # two dtypes met in one operation: the advice is about dtypes, not shapes
            dtypes = ", ".join(sorted(inputs.floating_dtypes(fn, args, kwargs))) or "?"
            fail(f"{name} crashed with {type(e).__name__} on inputs of dtype {dtypes}, because it combines tensors of two dtypes in one "
                 "operation. Build every tensor in the input's dtype (dtype=x.dtype), or cast a result back before combining it.",
                 f"{name} 在 dtype 为 {dtypes} 的输入上报错 {type(e).__name__}，因为它在同一个运算中把两种 dtype 的张量放在一起。"
                 "请按输入的 dtype 构造每个张量（dtype=x.dtype），或在组合之前把结果转换回来。",
                 f"{type(e).__name__}: {e}")
        fail(f"{name} crashed with {type(e).__name__} on inputs of shape {shapes}: "
             "check which dimensions your operations combine.",
             f"{name} 在形状为 {shapes} 的输入上报错 {type(e).__name__}：请检查你的运算合并了哪些维度。",
             f"{type(e).__name__}: {e}")
    if moved is not None and elsewhere.PENDING[0] is None:
        elsewhere.PENDING[0] = moved  # said when the check ends: what the output is comes first
    if (found := inputs.changed(copies)) is not None:
        arg, what, evidence = found
        fail(f"Inputs-unchanged rule (notebook 00): {name} changed its input {arg} in place (x /= s, x.add_(...), x[...] = ... on "
             f"the caller's tensor): work on a new tensor (x = x / s), the caller still needs its {arg}.",
             f"输入不变规则（笔记本 00）：{name} 原地修改了它的输入 {arg}（对调用者的张量做 x /= s、x.add_(...)、x[...] = ...）："
             f"请在新张量上计算（x = x / s），调用者还需要原来的 {arg}。", evidence)
    if (found := inputs.switched(copies)) is not None:
        arg, evidence = found
        fail(f"{name} left {arg} in another mode (train() or eval()) than it found it: the mode is the caller's choice "
             "(a generate inside a training loop must not leave the model in eval()). Do not change it, or put it back before returning.",
             f"{name} 改变了 {arg} 的模式（train() 或 eval()）并且没有恢复：模式由调用者决定（训练循环中调用 generate 后，"
             "模型不能被留在 eval() 模式）。不要改变它，或者在返回之前恢复原来的模式。", evidence)
    return out


def graded_checks(namespace: dict):
    """Wrap every check_* of a notebook's module: a device finding of its calls (elsewhere.py)
    fails the check once everything else in it has passed, so a wrong value is named first; the
    harness knows the notebook's exercises, to grade each with the course's earlier ones."""
    from autograder.checks.core import elsewhere, harness
    from autograder.checks.core import rules
    exercises = tuple(key[len("check_"):] for key in namespace if key.startswith("check_"))  # in the notebook's order
    own_earlier = namespace.get("OWN_EARLIER", ())  # exercises whose text asks them to call the learner's earlier ones
    own_earlier = tuple(own_earlier) + tuple(e for e in exercises if (c := rules.of(e)) is not None and c.earlier == "own")
    for key, fn in list(namespace.items()):
        if key.startswith("check_") and callable(fn) and not getattr(fn, "graded", False):
            namespace[key] = harness.among(elsewhere.deferred(fn), exercises, own_earlier)
    namespace["as_graded"] = functools.partial(harness.as_graded, exercises=exercises, own_earlier=own_earlier)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{tuple(x.shape)}"
    return type(x).__name__


def expect_tensor(actual, en_what: str, zh_what: str):
    expect(isinstance(actual, torch.Tensor),
           f"{en_what} should be a torch.Tensor, not {type(actual).__name__}.",
           f"{zh_what} 应该是 torch.Tensor，而不是 {type(actual).__name__}。")


def expect_close(actual, expected, en: str, zh: str, atol: float = ATOL, rtol: float = RTOL):
    """Values must match `expected`; the evidence names shapes and the largest difference."""
    expected = torch.as_tensor(expected)
    expect_tensor(actual, "The result", "结果")
    if tuple(actual.shape) != tuple(expected.shape):
        fail(en, zh, f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    a, b = actual.detach().double().cpu(), expected.detach().double().cpu()
    nan = torch.isnan(a) & ~torch.isnan(b)
    if nan.any():
        fail(en, zh, f"{int(nan.sum())} NaN value(s) where a number was expected")
    if not torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        diff = (a - b).abs().nan_to_num(nan=math.inf)
        fail(en, zh, f"largest difference {float(diff.max()):.4g} at index "
                     f"{tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))}; "
                     f"atol={atol}, rtol={rtol}")


def generator(seed: int) -> torch.Generator:
    """Platform-independent inputs: a CPU generator with a fixed seed, one per test."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator(seed))


def matches(actual, expected) -> bool:
    """Quietly: does `actual` equal `expected`? Used to recognise the output of a known mistake."""
    return (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
            and torch.allclose(actual.detach().to(expected.dtype), expected, atol=ATOL, rtol=RTOL, equal_nan=True))


def _dtype_clash(error) -> bool:
    """PyTorch's words for an operation on two floating dtypes (float @ bfloat16, a float32 mask into float64 scores)."""
    text = str(error)
    return any(words in text for words in ("expected scalar type", "same dtype", "dtype mismatch", "must have the same dtype",
                                           "expected mat1 and mat2 to have the same dtype"))


def own_module(cls, *args, **kwargs):
    """Instantiate the learner's class; it must be an nn.Module."""
    module = call(cls, *args, name=cls.__name__, **kwargs)
    expect(isinstance(module, nn.Module), f"{cls.__name__} must subclass nn.Module.", f"{cls.__name__} 必须继承 nn.Module。")
    return module


def expect_linear(module, attr: str, d_in: int, d_out: int, bias: bool, who: str, bias_en=None, bias_zh=None) -> nn.Linear:
    """module.<attr> must be nn.Linear(d_in, d_out) with or without a bias; the default bias
    sentence is about qkv_bias."""
    name = f"{who}.{attr}"
    layer = getattr(module, attr, None)
    expect(isinstance(layer, nn.Linear),
           f"{name} must be an nn.Linear(d_in, d_out) layer.", f"{name} 必须是一个 nn.Linear(d_in, d_out) 层。",
           f"got {type(layer).__name__}")
    expect((layer.in_features, layer.out_features) == (d_in, d_out),
           f"{name} must map d_in features to d_out: nn.Linear(d_in, d_out).",
           f"{name} 必须把 d_in 个特征映射到 d_out 个：nn.Linear(d_in, d_out)。",
           f"nn.Linear({layer.in_features}, {layer.out_features}), expected nn.Linear({d_in}, {d_out})")
    expect((layer.bias is not None) == bias,
           bias_en or f"With qkv_bias={bias} the layers must {'have' if bias else 'not have'} a bias: pass bias=qkv_bias to nn.Linear.",
           bias_zh or f"当 qkv_bias={bias} 时，这些层{'必须有' if bias else '不能有'}偏置：把 bias=qkv_bias 传给 nn.Linear。")
    return layer


# One shortcut guard for every exercise ---------------------------------------------------
# Deterministic weights -------------------------------------------------------------------
def seeded(shape, seed: int, fan_in: int | None = None) -> torch.Tensor:
    """A tensor from a fixed generator, spread like a default initialisation (std 1/sqrt(fan_in))."""
    fan_in = fan_in or (shape[-1] if len(shape) > 1 else 1)
    return randn(*shape, seed=seed) / math.sqrt(fan_in)


def fill_linear(layer: nn.Linear, seed: int, bias_scale: float = 0.5):
    """Copy deterministic weights (and a linspace bias, if any) into an nn.Linear."""
    with torch.no_grad():
        layer.weight.copy_(seeded(tuple(layer.weight.shape), seed, layer.in_features))
        if layer.bias is not None:
            layer.bias.copy_(torch.linspace(-1.0, 1.0, layer.out_features) * bias_scale)
    return layer


def seeded_state(module: nn.Module, seed: int) -> dict:
    """A state_dict for `module` (usually the reference) built from seeds, never from an RNG stream.

    Weight matrices get std 1/sqrt(fan_in); 1-d parameters named like norms get ones plus a
    small ramp (so a skipped norm weight shows); other 1-d parameters get a ramp.
    """
    state = {}
    for i, (key, value) in enumerate(module.state_dict().items()):
        if not value.is_floating_point():
            state[key] = value.clone()
        elif value.dim() >= 2:
            state[key] = seeded(tuple(value.shape), seed + i, value.shape[-1])
        elif "norm" in key:
            state[key] = 1.0 + 0.1 * torch.linspace(-1.0, 1.0, value.numel())
        else:
            state[key] = 0.1 * torch.linspace(-1.0, 1.0, value.numel())
    return state


def load_state(module: nn.Module, state: dict, who: str, buffers: bool = False):
    """Load `state` into the learner's module, naming missing, extra or mis-shaped entries.

    Only parameters are compared unless `buffers=True` (a mask buffer may be persistent or not).
    """
    own = dict(module.named_parameters())
    if buffers:
        own.update(dict(module.named_buffers()))
    wanted = {k: v for k, v in state.items() if buffers or not k.endswith("mask")}
    missing, extra = sorted(set(wanted) - set(own)), sorted(set(own) - set(wanted))
    expect(not missing and not extra,
           f"{who}'s parameters must have the names of the contract (so a checkpoint loads): check the attribute names and which layers have a bias.",
           f"{who} 的参数名必须与约定一致（这样检查点才能加载）：请检查属性名以及哪些层带偏置。",
           f"missing {missing}, unexpected {extra}")
    for key, value in wanted.items():
        expect(tuple(own[key].shape) == tuple(value.shape),
               f"{who}.{key} has the wrong shape: check the in and out sizes of that layer (nn.Linear stores (out, in)).",
               f"{who}.{key} 的形状不对：请检查该层的输入与输出大小（nn.Linear 存储的是 (out, in)）。",
               f"shape {tuple(own[key].shape)}, expected {tuple(value.shape)}")
        with torch.no_grad():
            own[key].copy_(value)
    return module


# Known mistakes --------------------------------------------------------------------------
def expect_known(actual, expected, mistakes, en: str, zh: str, atol: float = ATOL, rtol: float = RTOL):
    """`actual` must equal `expected`; when it equals the output of a known mistake, name it.

    mistakes: (output, en, zh) triples, or a callable returning them (computed only on failure).
    """
    expected = torch.as_tensor(expected)
    if (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
            and torch.allclose(actual.detach().double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True)):
        return  # right within the caller's tolerances: never mistaken for a known mistake
    for output, m_en, m_zh in (mistakes() if callable(mistakes) else mistakes):
        if output is not None and matches(actual, output):
            fail(m_en, m_zh, "your output equals what that mistake computes")
    expect_close(actual, expected, en, zh, atol=atol, rtol=rtol)


def expect_raises(exception, fn, *args, en: str, zh: str, name: str | None = None, **kwargs):
    """Calling fn(*args, **kwargs) must raise `exception` (ValueError for bad sizes or bad input),
    one that the exercise's contract declares (rules.py: the text says so)."""
    name = name or getattr(fn, "__name__", "your code")
    from autograder.checks.core import rules
    if (why := rules.undeclared(name, "raises", exception.__name__)) is not None and rules.of(name) is not None:
        raise RuntimeError(why)
    rules.record(name, "raises", exception.__name__)
    try:
        fn(*args, **kwargs)
    except exception:
        return
    except (Shortcut, CheckFailed):
        raise
    except Exception as e:
        fail(f"{en} ({name} raised {type(e).__name__} instead of {exception.__name__}.)",
             f"{zh}（{name} 抛出的是 {type(e).__name__}，而不是 {exception.__name__}。）", f"{type(e).__name__}: {e}")
    fail(en, zh, f"{name} raised nothing")


from autograder.checks.core.executes import course_runs  # noqa: E402,F401
from autograder.checks.core.shortcuts import (  # noqa: E402  (they need message and Shortcut above)
    course_versions, forbid, learner_functions, own_work, triton_kernel, unwrap, utils_modules, utils_twins)
