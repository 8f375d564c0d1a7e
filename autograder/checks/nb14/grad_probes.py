"""Probes of a learner's torch.autograd.Function: that it is one, what it saves, how its backward
runs (two calls in flight included), and its gradients against finite differences.

`torch.autograd.gradcheck` imports sympy (a second or more of every submit), so
`directional_error` checks what gradcheck checks, in float64, along random directions with
central differences: the derivative of sum(w * f(x + eps u)) in eps against the analytic
gradients dotted with u.
"""
import torch

from autograder.checks import call, expect, fail, own_work, randn


def directional_error(apply, inputs, seed, directions=3, eps=1e-6):
    """Largest relative error between analytic and central-difference directional derivatives."""
    with torch.enable_grad():
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        out = apply(*leaves)
        w = randn(*out.shape, seed=seed).double()
        (out * w).sum().backward()
    worst = 0.0
    for r in range(directions):
        u = [randn(*t.shape, seed=seed + 10 * r + i).double() for i, t in enumerate(inputs)]
        with torch.no_grad():
            plus = (apply(*[t + eps * d for t, d in zip(inputs, u)]) * w).sum()
            minus = (apply(*[t - eps * d for t, d in zip(inputs, u)]) * w).sum()
        numeric = float((plus - minus) / (2 * eps))
        analytic = float(sum((leaf.grad * d).sum() for leaf, d in zip(leaves, u)))
        worst = max(worst, abs(numeric - analytic) / max(1.0, abs(numeric)))
    return worst


def backward_through_autograd(out, g, who, n_inputs):
    """(out * g).sum().backward(), naming a backward that returns the wrong number of gradients."""
    def run():
        try:
            (out * g).sum().backward()
        except RuntimeError as e:
            if "number of gradients" in str(e):
                fail(f"{who}.backward must return one gradient per input of forward ({n_inputs}), None for causal: (dq, dk, dv, None).",
                     f"{who}.backward 必须为 forward 的每个输入（{n_inputs} 个）返回一个梯度，causal 对应 None：(dq, dk, dv, None)。",
                     f"RuntimeError: {e}")
            raise

    call(run, name=f"{who}.backward")


def saved_tensors(out):
    """Every tensor out's autograd node keeps: ctx.save_for_backward's and ctx's tensor attributes."""
    node = out.grad_fn
    tensors = list(getattr(node, "saved_tensors", ()) or ())
    tensors += [t for t in vars(node).values() if isinstance(t, torch.Tensor)] if hasattr(node, "__dict__") else []
    return tensors


def expect_autograd_function(FlashAttention, who, extra, en, zh):
    if isinstance(FlashAttention, type) and issubclass(FlashAttention, torch.autograd.Function):
        return
    with own_work(FlashAttention, who, extra=extra, en=en, zh=zh):
        try:
            FlashAttention()  # a wrapper around the course's class is a shortcut, named as such
        except (AssertionError, NotImplementedError):
            raise
        except Exception:
            pass
    fail(f"{who} must subclass torch.autograd.Function, with static methods forward(ctx, q, k, v, causal=False) and backward(ctx, grad_out).",
         f"{who} 必须继承 torch.autograd.Function，带有静态方法 forward(ctx, q, k, v, causal=False) 和 backward(ctx, grad_out)。",
         f"got {FlashAttention!r}")


def apply_and_backward(FlashAttention, inputs, g, causal, who):
    """out, the gradients of (out * g).sum() and the tensors out's node saved."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    with torch.enable_grad():
        out = call(FlashAttention.apply, *leaves, causal, name=f"{who}.apply")
        expect(isinstance(out, torch.Tensor) and out.grad_fn is not None,
               f"{who}.apply(q, k, v, causal) must return out, a tensor connected to the graph: forward returns out only, not (out, lse).",
               f"{who}.apply(q, k, v, causal) 必须返回 out，一个连在计算图上的张量：forward 只返回 out，而不是 (out, lse)。",
               f"got {type(out).__name__}")
        saved = saved_tensors(out)
        backward_through_autograd(out, g, who, 4)
    return out.detach(), [t.grad for t in leaves], saved


def calls_in_flight(FlashAttention, q, k, v, g, who):
    """Gradients of a causal call whose backward runs after a second, non-causal call on other inputs."""
    first = [t.clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        out = call(FlashAttention.apply, *first, True, name=f"{who}.apply")
        call(FlashAttention.apply, *[(2 * t).requires_grad_() for t in (q, k, v)], False, name=f"{who}.apply")
        backward_through_autograd(out, g, who, 4)
    return [t.grad for t in first]


def watched_apply_and_backward(FlashAttention, inputs, forward_watch, watch, who):
    """One causal forward under `forward_watch` and its backward, called directly, under `watch` (the
    autograd engine would run it outside this thread's function modes)."""
    with torch.enable_grad():
        with forward_watch:
            out = call(FlashAttention.apply, *inputs, True, name=f"{who}.apply")
        with watch:
            call(FlashAttention.backward, out.grad_fn, torch.ones_like(out), name=f"{who}.backward")


def apply_without_causal(FlashAttention, q, k, v, who):
    """out of FlashAttention.apply(q, k, v): causal must default to False."""
    try:
        return FlashAttention.apply(q, k, v)
    except TypeError as e:
        fail(f"{who}.apply(q, k, v) must work without causal: give forward the default causal=False.",
             f"{who}.apply(q, k, v) 在不传 causal 时也必须能用：给 forward 的 causal 加上默认值 False。", f"TypeError: {e}")


def expect_no_probabilities_saved(saved, T_q, T_k, who):
    full = [tuple(t.shape) for t in saved if t.dim() >= 2 and tuple(t.shape[-2:]) == (T_q, T_k)]
    expect(not full, f"{who} saves a (T_q, T_k) tensor for backward, the probabilities FlashAttention exists to avoid: save q, k, v, out and lse only.",
           f"{who} 为反向传播保存了 (T_q, T_k) 的张量，而 FlashAttention 正是为了避免保存这些概率：只保存 q、k、v、out 和 lse。",
           f"saved shapes {full}")
