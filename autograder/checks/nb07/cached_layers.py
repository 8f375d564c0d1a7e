"""What the checks of attention layers that read a KV cache share (notebook 07; open to 08 and 09).

Not a check module: it holds no check_* function of its own. A layer is driven through a
prefill of 3 tokens, two decode steps of 1 and a chunk of 2 (`STEPS`), with the course's cache,
and compared with one pass over the whole sequence; the probes see what values at float32 do
not: work redone for the prefix, state kept across calls, another dtype, gradients.

No `meta` device probe here: on torch 2.13 the first operation on a meta tensor imports sympy
and torch._dynamo, a second or more of every submit (test_checks_import_nothing_heavy).
"""
import math

import torch

from autograder.checks import call, expect, expect_close, expect_known, fail

STEPS = ((0, 3), (3, 4), (4, 5), (5, 7))  # prefill 3 tokens, decode 1, decode 1, a chunk of 2


def attend(q, k, v, blocked):
    """softmax(q kᵀ / sqrt(hd)) v with the True entries of `blocked` masked out."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def run_steps(module, x, cache, name):
    """The outputs of STEPS through `module` with `cache`; only the new tokens may be projected."""
    outs, rows = [], []  # token rows W_key projects per call: (B, T, d_in) or flattened (B * T, d_in) alike
    hook = module.W_key.register_forward_hook(lambda m, i, o: rows.append(i[0].numel() // max(1, i[0].shape[-1])))
    try:
        for a, b in STEPS:
            outs.append(call(module, x[:, a:b], kv_cache=cache, name=f"{name}.forward"))
    finally:
        hook.remove()
    want = [x.shape[0] * (b - a) for a, b in STEPS]
    expect(rows == want,
           f"With a cache, {name} must project only the new tokens: it still projects the whole prefix at every step, the work the cache exists to save.",
           f"有缓存时，{name} 只能投影新的词元：它在每一步仍然投影了整个前缀，而缓存正是为了省下这部分计算。",
           f"token rows given to W_key per call (batch {x.shape[0]}): {rows}, expected {want}")
    return outs


def expect_steps(outs, want_full, q, k, v, out_proj, cache, name):
    """Each step equals one pass over the sequence; a top-left aligned mask is named."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    for (a, b), out in zip(STEPS, outs):
        top_left = torch.ones(b - a, b, dtype=torch.bool).triu(1)
        with torch.no_grad():
            mistake = out_proj(_merge(attend(q[:, :, a:b], k[:, :, :b], v[:, :, :b], top_left))) if a else None
        expect_known(out, want_full[:, a:b], [(mistake,
                     f"At decode time {name} uses a top-left aligned mask: the new token sees only the first keys. The new queries are the LAST positions, so the mask must be bottom-right aligned (causal_mask(T_new, T_total) of notebook 04).",
                     f"解码时 {name} 使用了左上对齐的掩码：新词元只能看到最前面的键。新的查询是最后的几个位置，所以掩码必须右下对齐（笔记本 04 的 causal_mask(T_new, T_total)）。")],
                     f"With a cache, the outputs for tokens {a}..{b - 1} must equal those of one pass over the whole sequence: the new queries attend to every cached key and to the new keys up to their own position.",
                     f"有缓存时，词元 {a}..{b - 1} 的输出必须与对整个序列做一次计算的结果相同：新的查询关注所有缓存的键，以及新键中不超过自身位置的那些。")
    expect(cache.seq_len == STEPS[-1][1],
           f"After {STEPS[-1][1]} tokens the cache given to {name} must hold {STEPS[-1][1]} positions: call kv_cache.update(k, v) once per forward.",
           f"{STEPS[-1][1]} 个词元之后，传给 {name} 的缓存必须有 {STEPS[-1][1]} 个位置：每次 forward 调用一次 kv_cache.update(k, v)。",
           f"seq_len {cache.seq_len}")


def _merge(x):  # (B, H, T, hd) -> (B, T, H * hd)
    B, H, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hd)


def expect_attributes(module, wanted: dict, name: str, optional=None):
    """The attributes the course's GPT reads to shape each layer's cache (utils.gpt.new_caches);
    `optional` gives the value an attribute the GPT can do without stands for when absent."""
    optional = optional or {}
    got = {attr: getattr(module, attr, optional.get(attr)) for attr in wanted}
    named = [a for a in wanted if a not in optional]
    expect(got == wanted,
           f"{name} must keep {', '.join(f'self.{a}' for a in named)} (the numbers of its heads and their width): the course's GPT reads them (model.new_caches) to shape each layer's cache.",
           f"{name} 必须保存 {', '.join(f'self.{a}' for a in named)}（头的个数和宽度）：课程的 GPT（model.new_caches）读取它们来确定每一层缓存的形状。",
           f"got {got}, expected {wanted}")


def in_float64(module, x, cache, name):
    """STEPS of the module in float64 with a float64 cache (the module is put back in float32);
    the AssertionError of a crash is returned, for expect_probes to name."""
    module.double()
    try:
        return torch.cat(run_steps(module, x.double(), cache, name), dim=1)
    except AssertionError as e:
        if "crashed" not in str(e):
            raise
        return e
    finally:
        module.float()


def expect_probes(again, wide, outs, reference, x, name):
    """`again`: the STEPS with a new cache; `wide`: in float64 (or its crash)."""
    expect_no_state(again, outs, name)
    with torch.no_grad():
        want64 = reference.double()(x.double())
        reference.float()
    expect_float64(wide, want64, name)


def expect_no_state(again, outs, name):
    """A second prompt through the same layer, with a new cache, gives the same outputs."""
    for first, second in zip(outs, again):
        expect_close(second, first,
                     f"{name} gave other outputs for the same tokens with a new cache: it keeps state across calls (everything a layer remembers between steps belongs in the cache it is given).",
                     f"用新的缓存处理相同的词元时，{name} 给出了不同的输出：它在调用之间保留了状态（一层在步骤之间记住的一切都应该放在传给它的缓存里）。")


def expect_float64(out, want, name):
    """`out`: the float64 outputs, or the AssertionError their run raised (a crash)."""
    expect(isinstance(out, torch.Tensor) and out.dtype == torch.float64,
           f"After .double(), {name} with a float64 cache must compute in float64: build every tensor (mask, scale) from the input's dtype, none in float32.",
           f"调用 .double() 之后，使用 float64 缓存的 {name} 必须用 float64 计算：所有张量（掩码、缩放）都要按输入的 dtype 构造，不能用 float32。",
           str(out).split("[")[-1].rstrip("]") if isinstance(out, Exception) else f"got {getattr(out, 'dtype', type(out).__name__)}")
    expect_close(out, want, f"In float64, {name}'s cached steps must equal one pass over the sequence.",
                 f"在 float64 下，{name} 的缓存步骤必须等于对整个序列的一次计算。")  # float32's tolerance: the precision rule (harness.py)


def expect_gradients(module, x, name):
    """Without a cache the layer trains: every weight gets a gradient."""
    module.zero_grad(set_to_none=True)
    with torch.enable_grad():
        out = call(module, x, name=f"{name}.forward")
        if not (isinstance(out, torch.Tensor) and out.requires_grad):
            fail(f"Without a cache {name} is a layer that trains: its output must carry gradients (no torch.no_grad(), .detach() or .data inside forward).",
                 f"没有缓存时 {name} 是一个要训练的层：它的输出必须带梯度（forward 里不能有 torch.no_grad()、.detach() 或 .data）。")
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    missing = [n for n, p in module.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    expect(not missing,
           f"Without a cache {name} is a layer that trains: gradients must reach every weight (no torch.no_grad(), .detach() or .data on the way).",
           f"没有缓存时 {name} 是一个要训练的层：梯度必须传到每一个权重（路径上不能有 torch.no_grad()、.detach() 或 .data）。",
           f"no gradient for {missing}")
