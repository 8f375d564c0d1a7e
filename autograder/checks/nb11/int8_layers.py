"""Probes of notebook 11's int8 layer and of quantize_model_: the linear layers they quantize,
where a module keeps its tensors, the reference output, a watch for a dequantized weight, timing.

Decisions: the int8 linear may compute in bfloat16 (torch._weight_int8pack_mm does), so its
outputs are compared per output channel within 2% of that channel's largest output. "Dequantizes
the whole weight at every call" is caught without a clock: a torch function mode records the
torch calls of one forward (tensor methods and operators included), and none may return a float
tensor half as large as the weight. (A dispatch mode would see below the Python calls too, but
entering the first one imports torch._dynamo, 1.3 s of every submit.) Speed is then measured
against the float32 layer at 4096 x 4096 (more than a last-level cache), interleaved, best of many
rounds, on one thread (on a busy machine a two-thread kernel waits for its second thread at every
call). The rule, as the exercise states it: a forward that takes SLACK = 1.5 times the float32
layer's time or more, in two tries, fails, unless the course's own layer (utils.quantize), timed in
the same rounds, is that slow too. The bound is not "faster than float32" because
torch._weight_int8pack_mm widens every weight to float and multiplies in float: on one core of a
CPU whose vector units convert slowly (AVX2) it only matches float32 (1.07x, issue 20), while on
AVX-512 it is about 2.5x faster; and where PyTorch has no vector kernel for it at all
(ATEN_CPU_CAPABILITY=default) it takes about 4x float32's time, the model answer's as well, so there
the learner's layer is held to 1.5 times the course's. What the bound catches is a forward that is
slow for another reason: a Python loop, or work per weight on top of the kernel.
"""
import time

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import utils.quantize as ref
from autograder.checks import expect, expect_tensor, fail, generator, learner_functions, randn

BIG = 4096   # the timed layer: its float32 weight (64 MB) must come from memory, its int8 one is 16 MB
SLACK = 1.5  # the exercise's rule: 1.5 times the float32 layer's time or more fails
# Past this many times the baselines' time a forward is slow beyond doubt and timing stops early. Not
# lower: on a machine busy with other work a right forward was once timed at 3.3x the course's layer.
HOPELESS = 6


def make_linear(d_in, d_out, bias, seed):
    # On the meta device: no random initialisation to pay for (every value is set below), and
    # unlike nn.utils.skip_init no import of sympy (0.6 s).
    layer = nn.Linear(d_in, d_out, bias=bias, device="meta")
    weight = randn(d_out, d_in, seed=seed) / d_in ** 0.5
    weight[1] *= 50.0  # one loud output channel: a per-tensor scale ruins every other row
    layer.weight = nn.Parameter(weight)
    if bias:
        layer.bias = nn.Parameter(torch.linspace(-3.0, 3.0, d_out))
    return layer


def _reachable(value, depth=3):
    """Tensors inside lists, tuples, dicts, plain objects and unregistered modules, a few levels down."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, nn.Module):
        yield from (t for _, t in value.state_dict(keep_vars=True).items())
    elif depth and isinstance(value, (list, tuple, set)):
        for v in value:
            yield from _reachable(v, depth - 1)
    elif depth and isinstance(value, dict):
        for v in value.values():
            yield from _reachable(v, depth - 1)
    elif depth and hasattr(value, "__dict__") and not isinstance(value, type):
        yield from _reachable(vars(value), depth - 1)


def tensors(module):
    """Every tensor the module keeps: parameters, buffers, tensor attributes, and tensors inside
    containers held as attributes (a list, a dict, a plain object, a module not registered)."""
    found = {}
    for name, m in module.named_modules():
        items = [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]
        items += [(f"{k}[{i}]" if not isinstance(v, torch.Tensor) else k, t) for k, v in vars(m).items()
                  if k not in ("_parameters", "_buffers", "_modules") for i, t in enumerate(_reachable(v))]
        found.update({f"{name}.{k}".lstrip("."): t for k, t in items if t is not None})
    return found


def copies_elsewhere(cls, weight):
    """Names of class attributes and notebook-level containers (dicts, lists, ...) that hold a
    float copy of `weight`: a layer could keep its float weight there, out of the module's sight."""
    places = [(f"{k.__name__}.{name}", v) for k in type.mro(cls) if k.__module__.split(".")[0] not in ("torch", "builtins", "utils")
              for name, v in vars(k).items() if isinstance(v, (list, tuple, dict, set))]
    seen = set()
    for f in learner_functions(cls):
        if id(f.__globals__) not in seen:
            seen.add(id(f.__globals__))
            places += [(name, v) for name, v in f.__globals__.items() if isinstance(v, (list, tuple, dict, set))]
    same = lambda t: t.is_floating_point() and t.shape in (weight.shape, weight.T.shape) and bool(
        torch.allclose(t.detach().float().reshape(weight.shape) if t.shape == weight.shape else t.detach().float().T, weight, atol=1e-3))
    return [name for name, v in places if any(same(t) for t in _reachable(v, depth=3))]


def expect_int8_storage(module, d_in, d_out, who):
    held = tensors(module)
    saved = module.state_dict()
    expect(any(t.dtype == torch.int8 and tuple(t.shape) == (d_out, d_in) for t in held.values()),
           f"{who} must store the weight as a torch.int8 tensor of shape (out_features, in_features).",
           f"{who} 必须把权重存成形状为 (out_features, in_features) 的 torch.int8 张量。", f"tensors: {[(k, t.dtype) for k, t in held.items()]}")
    floats = [k for k, t in held.items() if t.is_floating_point() and t.numel() >= d_in * d_out]
    expect(not floats, f"{who} keeps a floating-point copy of the whole weight: keep only the int8 weight and its scales, or the memory saving is lost.",
           f"{who} 保留了整个权重的浮点副本：只保留 int8 权重和它的 scale，否则就省不下内存。", f"float tensors {floats}")
    expect(any(t.dtype == torch.int8 and t.numel() == d_in * d_out for t in saved.values()),
           f"{who} keeps its int8 weight outside the module's state: register it as a buffer (self.register_buffer), so that state_dict, .to() and the memory count see it.",
           f"{who} 把 int8 权重放在了模块状态之外：请用 self.register_buffer 注册为缓冲区，这样 state_dict、.to() 和内存统计才能看到它。",
           f"state_dict: {[(k, t.dtype) for k, t in saved.items()]}")


def expect_scales(module, linear, who):
    """One floating scale per output channel, besides the bias (its shape and dtype are free)."""
    expect(scale_of(module, linear).numel() == linear.weight.shape[0],
           f"{who} must keep one floating-point scale per output channel (absmax_quantize(linear.weight, dim=-1)'s scale), as a buffer beside the int8 weight.",
           f"{who} 必须为每个输出通道保留一个浮点 scale（absmax_quantize(linear.weight, dim=-1) 的 scale），作为 int8 权重旁边的缓冲区。",
           f"tensors: {[(k, tuple(t.shape), t.dtype) for k, t in tensors(module).items()]}")


def expect_no_graph(module, who):
    """No tensor of the layer carries an autograd graph: through it the layer would hold the float
    nn.Linear it came from (its weight included) alive."""
    held = [k for k, t in tensors(module).items() if t.grad_fn is not None]
    expect(not held, f"{who} holds an autograd graph back to the nn.Linear it came from, which keeps its float weight alive: copy "
           "detached tensors (linear.weight.detach(), linear.bias.detach()) or copy under torch.no_grad().",
           f"{who} 保留了一张通向其来源 nn.Linear 的自动求导计算图，这会让它的浮点权重一直留在内存中：请复制分离后的张量"
           "（linear.weight.detach()、linear.bias.detach()），或在 torch.no_grad() 下复制。", f"tensors with a grad_fn: {held}")


def reference_linear(linear, x, per_channel=True, bias=True):
    q, s = ref.absmax_quantize(linear.weight.detach(), dim=-1 if per_channel else None)
    y = x @ (q.float() * s).T
    return y + linear.bias.detach() if bias and linear.bias is not None else y


def expect_like_linear(out, x, right, who, mistakes=(), slack=0.02):
    """Per output channel within `slack` of that channel's largest output (bfloat16 activations allowed)."""
    expect_tensor(out, f"{who}'s output", f"{who} 的输出")
    expect(out.shape == right.shape and out.dtype == x.dtype, f"{who} must map (..., in_features) to (..., out_features) in the dtype of the input.",
           f"{who} 必须把 (..., in_features) 映射为 (..., out_features)，dtype 与输入相同。",
           f"shape {tuple(out.shape)} {out.dtype}, expected {tuple(right.shape)} {x.dtype}")
    tol = slack * right.abs().flatten(0, -2).amax(0) + 1e-3
    close = lambda y: bool(((y.detach().float() - right).abs() <= tol).all())
    if close(out):
        return
    for wrong, en, zh in mistakes:
        if bool(((out.detach().float() - wrong).abs() <= tol).all()):
            fail(f"{who} is wrong: {en}.", f"{who} 不对：{zh}。")
    fail(f"{who} must compute x W^T + b with W = int8 weight * per-output-channel scale.",
         f"{who} 必须计算 x W^T + b，其中 W = int8 权重 * 每个输出通道的 scale。", f"largest difference {float((out.detach().float() - right).abs().max()):.4g}")


def linear_mistakes(linear, x):
    return [(reference_linear(linear, x, bias=False), "the bias is dropped: add the layer's bias after the matmul", "偏置被丢掉了：在矩阵乘法之后加上该层的偏置"),
            (reference_linear(linear, x, per_channel=False), "one scale for the whole weight: one loud output channel ruins the others, use one scale per output channel (amax along the input features)",
             "整个权重只用了一个 scale：一个很大的输出通道毁掉了其余通道，请每个输出通道一个 scale（沿输入特征求 amax）")]


class FloatsAsLargeAsTheWeight(TorchFunctionMode):
    """Records every floating-point tensor of at least `limit` elements that a torch call returns."""

    def __init__(self, limit):
        super().__init__()
        self.limit, self.found = limit, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() >= self.limit:
                self.found.append(f"{getattr(func, '__name__', func)}: {tuple(t.shape)} {t.dtype}")
        return out


def best_times(fast, baselines, x, rounds):
    """Best time of `fast` and of each baseline over interleaved rounds, on one thread: on a busy
    machine a multi-threaded kernel waits for its second thread at every call."""
    fns = (fast, *baselines)
    best, threads = [float("inf")] * len(fns), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _time_rounds(fns, x, rounds, best)
    finally:
        torch.set_num_threads(threads)
    return best


def _time_rounds(fns, x, rounds, best):
    with torch.inference_mode():
        for fn in fns:
            fn(x)
        for _ in range(rounds):  # interleaved: a busy moment slows all alike; the best round is the quiet one
            for i, fn in enumerate(fns):
                start = time.perf_counter()
                fn(x); fn(x)
                best[i] = min(best[i], time.perf_counter() - start)
            if best[0] > HOPELESS * max(best[1:]):  # stop early: a slow forward would only burn the time limit
                return


# quantize_model_'s probe -------------------------------------------------------------------
class _Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        return self.proj(x)


class _Probe(nn.Module):
    """Linears at the top, in a ModuleList of Sequentials, in a ModuleDict and in a custom module."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32, bias=False)) for _ in range(2))
        self.mixer = nn.ModuleDict({"inner": _Inner()})
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 24)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        x = x + self.mixer["inner"](x)
        return self.head(self.norm(x))


def probe_model(seed):
    model = _Probe()
    g = generator(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.dim() > 1 else 4) + (1.0 if "norm.weight" in name else 0.0))
    return model.eval()


def scale_of(layer, linear):
    """The layer's per-output-channel scale as amax = scale * 127, in bfloat16; an empty tensor
    where it keeps no floating tensor of out_features elements other than the bias."""
    d_out = linear.weight.shape[0]
    bias = linear.bias.detach() if linear.bias is not None else linear.weight.detach().new_zeros(d_out)  # on its device
    found = [t.detach().float().reshape(-1) for t in tensors(layer).values()
             if t.is_floating_point() and t.numel() == d_out and not torch.allclose(t.detach().float().reshape(-1), bias.float(), atol=1e-3)]
    return (found[0] * 127).bfloat16() if found else torch.empty(0, dtype=torch.bfloat16)
