"""Probes of what float32 values cannot show: another dtype, gradients, a crash on an input
chosen for one property (non-contiguous, 1-D, ...). Shared by the checks of notebooks 08 and 09.

Not the `meta` device: its first operation imports torch._dynamo and torch._inductor (about a
second of every submit, which test_checks_import_nothing_heavy forbids).
"""
import torch

from autograder.checks import CheckFailed, Shortcut, expect, fail


def attempt(fn, *args, en: str, zh: str, **kwargs):
    """Call learner code on a probe input; a crash fails with the probe's own sentence
    (what the input exercises), not a generic one about shapes."""
    try:
        return fn(*args, **kwargs)
    except (Shortcut, CheckFailed):
        raise
    except NotImplementedError:
        raise
    except Exception as e:
        fail(en, zh, f"{type(e).__name__}: {str(e)[:300]}")


def expect_dtype(out, dtype: torch.dtype, who: str):
    expect(isinstance(out, torch.Tensor) and out.dtype == dtype,
           f"{who} must return its input's dtype ({dtype}): compute in that dtype, or cast the result back.",
           f"{who} 必须返回与输入相同的 dtype（{dtype}）：请用该 dtype 计算，或者把结果转换回来。",
           f"got {getattr(out, 'dtype', type(out).__name__)}")


def expect_gradients(module: torch.nn.Module, who: str, names=None):
    """After a backward pass, the named parameters (all by default) have a non-zero gradient."""
    params = dict(module.named_parameters())
    missing = [n for n in (names or params) if params[n].grad is None or not params[n].grad.abs().sum() > 0]
    expect(not missing,
           f"Gradients must reach every weight of {who} (a module that trains): no torch.no_grad(), .detach() or .data on the way from the weights to the output.",
           f"梯度必须传到 {who} 的每一个权重（这是一个要训练的模块）：从权重到输出的路径上不能有 torch.no_grad()、.detach() 或 .data。",
           f"no gradient for {missing}")
