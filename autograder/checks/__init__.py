"""What hidden and visible tests call: checks whose failures name the idea that is wrong.

Every failure is an AssertionError whose message is one English sentence, its Chinese
translation, then the evidence in brackets (shapes, largest difference). One module per
notebook (`nb00`, `nb01`, ...) holds that notebook's checks; this file holds the pieces
they share. `autograder/tests` runs them against a collection of wrong solutions.
"""
import contextlib
import math

import torch
from torch import nn

# fp32 tolerances for exact algebra (../curriculum.md); published 4-digit numbers get 1e-4.
ATOL, RTOL = 1e-5, 1e-4
BOOK_ATOL = 1e-4


def message(en: str, zh: str, evidence: str = "") -> str:
    return f"{en} {zh}" + (f" [{evidence}]" if evidence else "")


def fail(en: str, zh: str, evidence: str = ""):
    raise AssertionError(message(en, zh, evidence))


def expect(condition, en: str, zh: str, evidence: str = ""):
    if not condition:
        fail(en, zh, evidence)


class Shortcut(AssertionError):
    """Raised when an exercise calls the very thing it asks the learner to build."""


def call(fn, *args, name: str | None = None, **kwargs):
    """Call the learner's code, turning a crash into a sentence a learner can act on."""
    name = name or getattr(fn, "__name__", "your code")
    try:
        return fn(*args, **kwargs)
    except (Shortcut, AssertionError):
        raise
    except NotImplementedError:
        fail(f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             f"{name} 尚未实现：请用你的代码替换 `raise NotImplementedError()`。")
    except Exception as e:
        shapes = ", ".join(_describe(a) for a in args)
        fail(f"{name} crashed with {type(e).__name__} on inputs of shape {shapes}: "
             "check which dimensions your operations combine.",
             f"{name} 在形状为 {shapes} 的输入上报错 {type(e).__name__}：请检查你的运算合并了哪些维度。",
             f"{type(e).__name__}: {e}")


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


@contextlib.contextmanager
def forbid(targets, learner_fns, en: str, zh: str):
    """Make `targets` raise Shortcut while learner code runs; restore them afterwards.

    targets: (owner, attribute) pairs such as (torch, "softmax"). Names in the learner's own
    globals that are bound to one of the originals (`from torch import softmax as sm`) are
    replaced too, so an import alias is no way around the rule.
    """
    def blocked(*args, **kwargs):
        raise Shortcut(message(en, zh))

    saved = []  # (namespace, key, original, was_own_attribute)
    try:
        originals = []
        for owner, attr in targets:
            original = getattr(owner, attr)
            originals.append(original)
            saved.append((owner, attr, original, attr in vars(owner)))
            setattr(owner, attr, blocked)
        for fn in learner_fns:
            namespace = getattr(fn, "__globals__", None)
            if namespace is None:
                continue
            for key, value in list(namespace.items()):
                if any(value is o for o in originals):
                    saved.append((namespace, key, value, True))
                    namespace[key] = blocked
        yield
    finally:
        for owner, attr, original, own in reversed(saved):
            if isinstance(owner, dict):
                owner[attr] = original
            elif own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)


def generator(seed: int) -> torch.Generator:
    """Platform-independent inputs: a CPU generator with a fixed seed, one per test."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator(seed))


def matches(actual, expected) -> bool:
    """Quietly: does `actual` equal `expected`? Used to recognise the output of a known mistake."""
    return (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
            and torch.allclose(actual.detach().to(expected.dtype), expected, atol=ATOL, rtol=RTOL, equal_nan=True))


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
