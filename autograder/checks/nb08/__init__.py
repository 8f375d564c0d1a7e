"""Hidden checks of notebook 08, positions: the sinusoidal encoding and RoPE.

apply_rope is compared with formulations written independently of utils.rope (rope_variants.py): complex
multiplication for adjacent pairs (Meta's Llama code), rotate-half for half-split pairs (Hugging
Face). Known mistakes are recognised by their outputs and named.
"""
import torch

import utils.rope as ref
from autograder.checks import (graded_checks, call, course_runs, expect, expect_close, expect_known, expect_tensor, load_state, own_module,
                               own_work, randn, seeded_state)
from autograder.checks.nb08.contract import FAMILIES, MHA_CTOR
from autograder.checks.core.harness import same_as_reference, same_as_reference_module
from autograder.checks.core.saturated import split_saturated
from autograder.checks.core.probes import attempt, expect_gradients
from autograder.checks.nb08.rope_variants import _freqs, _rope_mha, _rope_mistakes, rope
from utils.kv_cache import KVCache
from utils.multihead import merge_heads, split_heads


# sinusoidal_positions ------------------------------------------------------------------------
def check_sinusoidal_positions(sinusoidal_positions):
    with own_work(sinusoidal_positions, "sinusoidal_positions"):
        out = call(sinusoidal_positions, 9, 6, name="sinusoidal_positions")
        based = call(sinusoidal_positions, 5, 8, base=100.0, name="sinusoidal_positions")
    expect_tensor(out, "sinusoidal_positions' result", "sinusoidal_positions 的结果")
    t = torch.arange(9.0)[:, None]
    w = _freqs(6, 10000.0).float()
    right = torch.stack((torch.sin(t * w), torch.cos(t * w)), dim=-1).flatten(1)
    expect(tuple(out.shape) == (9, 6), "sinusoidal_positions must return (num_positions, d_model).",
           "sinusoidal_positions 必须返回 (num_positions, d_model)。", f"shape {tuple(out.shape)}")
    expect(out.dtype == torch.float32, "sinusoidal_positions must return float32, the dtype of the embeddings it is added to.",
           "sinusoidal_positions 必须返回 float32，即它要加上去的嵌入的 dtype。", f"got {out.dtype}")
    mistakes = [
        (torch.stack((torch.cos(t * w), torch.sin(t * w)), dim=-1).flatten(1),
         "sin and cos are swapped: even columns 2i hold sin(t * w_i), odd columns 2i+1 hold cos(t * w_i).",
         "sin 和 cos 弄反了：偶数列 2i 放 sin(t * w_i)，奇数列 2i+1 放 cos(t * w_i)。"),
        (torch.cat((torch.sin(t * w), torch.cos(t * w)), dim=-1),
         "The sines fill the first half and the cosines the second: interleave them, PE[t, 2i] = sin and PE[t, 2i+1] = cos.",
         "正弦占了前一半、余弦占了后一半：要交错放置，PE[t, 2i] = sin，PE[t, 2i+1] = cos。"),
        (torch.stack((torch.sin(t * _freqs(6, 1e4, lambda i, d: i / d).float()), torch.cos(t * _freqs(6, 1e4, lambda i, d: i / d).float())), -1).flatten(1),
         "The frequencies use base^(-i/d): the exponent of pair i is 2i/d, so w_i = base^(-2i/d).",
         "频率用了 base^(-i/d)：第 i 对的指数是 2i/d，所以 w_i = base^(-2i/d)。"),
    ]
    expect_known(out, right, mistakes, "PE[t, 2i] = sin(t / base^(2i/d)) and PE[t, 2i+1] = cos(t / base^(2i/d)).",
                 "PE[t, 2i] = sin(t / base^(2i/d))，PE[t, 2i+1] = cos(t / base^(2i/d))。")
    t5, w8 = torch.arange(5.0)[:, None], _freqs(8, 100.0).float()
    expect_close(based, torch.stack((torch.sin(t5 * w8), torch.cos(t5 * w8)), dim=-1).flatten(1),
                 "sinusoidal_positions must use the base it is given (base=100 here), not always 10000.",
                 "sinusoidal_positions 必须使用传入的 base（这里是 100），而不是总用 10000。")
    reference = ref.sinusoidal_positions  # looked up before own_work blocks it
    with own_work(sinusoidal_positions, "sinusoidal_positions"):
        same_as_reference(sinusoidal_positions, reference, FAMILIES["sinusoidal_positions"], "sinusoidal_positions")


# rope_inverse_frequencies --------------------------------------------------------------------
def check_rope_inverse_frequencies(rope_inverse_frequencies):
    with own_work(rope_inverse_frequencies, "rope_inverse_frequencies"):
        out = call(rope_inverse_frequencies, 64, name="rope_inverse_frequencies")
        llama3 = call(rope_inverse_frequencies, 128, theta=500000.0, name="rope_inverse_frequencies")
        small = call(rope_inverse_frequencies, 6, 50.0, name="rope_inverse_frequencies")
    expect_tensor(out, "rope_inverse_frequencies' result", "rope_inverse_frequencies 的结果")
    expect(tuple(out.shape) == (32,), "rope_inverse_frequencies(head_dim) returns one frequency per pair: head_dim // 2 values.",
           "rope_inverse_frequencies(head_dim) 为每一对返回一个频率：共 head_dim // 2 个值。", f"shape {tuple(out.shape)}")
    expect(out.dtype == torch.float32, "rope_inverse_frequencies must return float32.", "rope_inverse_frequencies 必须返回 float32。",
           f"got {out.dtype}")
    mistakes = [
        (_freqs(64, 1e4, lambda i, d: i / d), "theta^(-i/d) was used: the exponent of pair i is 2i/head_dim, so w_i = theta^(-2i/head_dim).",
         "用了 theta^(-i/d)：第 i 对的指数是 2i/head_dim，所以 w_i = theta^(-2i/head_dim)。"),
        (_freqs(64, 1e4, lambda i, d: 2 * i / (d // 2)), "The exponent is divided by head_dim // 2: divide 2i by head_dim itself.",
         "指数除以了 head_dim // 2：应该用 2i 除以 head_dim 本身。"),
        (_freqs(64, 1e4, lambda i, d: -2 * i / d), "The exponent has the wrong sign: w_i = theta^(-2i/head_dim) falls from 1 towards 1/theta.",
         "指数的符号错了：w_i = theta^(-2i/head_dim) 从 1 降向 1/theta。"),
    ]
    expect_known(out, _freqs(64, 1e4), mistakes, "w_i = theta^(-2i/head_dim) for i = 0 .. head_dim/2 - 1 (w_0 = 1, w_1 = 0.74989 for head_dim 64).",
                 "w_i = theta^(-2i/head_dim)，i = 0 .. head_dim/2 - 1（head_dim 为 64 时 w_0 = 1，w_1 = 0.74989）。")
    expect(isinstance(llama3, torch.Tensor) and tuple(llama3.shape) == (64,),
           "rope_inverse_frequencies(head_dim) returns head_dim // 2 frequencies for every head_dim (64 for head_dim 128).",
           "rope_inverse_frequencies(head_dim) 对任何 head_dim 都返回 head_dim // 2 个频率（head_dim 为 128 时是 64 个）。",
           f"shape {tuple(getattr(llama3, 'shape', ()))}")
    expect_close(llama3, _freqs(128, 5e5), "rope_inverse_frequencies must use the theta it is given (Llama 3: 500,000).",
                 "rope_inverse_frequencies 必须使用传入的 theta（Llama 3：500,000）。", rtol=1e-4)
    expect_close(small, _freqs(6, 50.0), "rope_inverse_frequencies must take theta as its second argument.",
                 "rope_inverse_frequencies 的第二个参数是 theta。")
    reference = ref.rope_inverse_frequencies  # looked up before own_work blocks it
    with own_work(rope_inverse_frequencies, "rope_inverse_frequencies"):
        same_as_reference(rope_inverse_frequencies, reference, FAMILIES["rope_inverse_frequencies"], "rope_inverse_frequencies")


# apply_rope ----------------------------------------------------------------------------------
def check_apply_rope(apply_rope):
    x = randn(2, 3, 5, 8, seed=80)
    pos = torch.tensor([3, 4, 5, 6, 9])
    for interleaved in (False, True):
        with own_work(apply_rope, "apply_rope"):
            out = call(apply_rope, given := x.clone(), pos, 100.0, interleaved=interleaved, inputs_named=True, name="apply_rope")
            flat = call(apply_rope, x[0, 0].clone(), pos, interleaved=interleaved, inputs_named=True, name="apply_rope")
        expect(torch.equal(given, x), "apply_rope must return a new tensor and leave x unchanged: do not write the rotated pairs into x.",
               "apply_rope 必须返回一个新张量并保持 x 不变：不要把旋转后的坐标对写回 x。")
        expect_tensor(out, "apply_rope's result", "apply_rope 的结果")
        expect(tuple(out.shape) == tuple(x.shape), "apply_rope must keep the shape (..., T, head_dim).",
               "apply_rope 必须保持形状 (..., T, head_dim)。", f"shape {tuple(out.shape)}")
        expected = rope(x, pos, 100.0, interleaved)
        layout = "adjacent pairs, complex multiplication" if interleaved else "half-split pairs, rotate_half"
        expect_known(out, expected, lambda: _rope_mistakes(x, pos, 100.0, interleaved),
                     f"apply_rope(interleaved={interleaved}) differs from an independent formulation ({layout}) with theta=100.",
                     f"apply_rope(interleaved={interleaved}) 与一个独立的实现（{layout}）在 theta=100 时结果不同。")
        expect_close(flat, rope(x[0, 0], pos, 10000.0, interleaved),
                     "apply_rope must work on (T, head_dim) as well, with theta defaulting to 10000.",
                     "apply_rope 也必须适用于 (T, head_dim)，theta 默认为 10000。")
    q, k = randn(2, 16, seed=81)
    with own_work(apply_rope, "apply_rope"):
        near = call(apply_rope, torch.stack((q, k))[:, None], torch.tensor([7]), inputs_named=True, name="apply_rope")
        far = call(apply_rope, torch.stack((q, k))[:, None], torch.tensor([107]), inputs_named=True, name="apply_rope")
    expect_close(near[0, 0] @ far[1, 0], rope(q[None], torch.tensor([0]))[0] @ rope(k[None], torch.tensor([100]))[0],
                 "The score of a rotated query and key must depend only on their offset: score(7, 107) = score(0, 100).",
                 "旋转后的查询与键的分数只能取决于它们的偏移：score(7, 107) = score(0, 100)。", atol=1e-4)
    for interleaved in (False, True):
        _expect_rope_probes(apply_rope, interleaved)
    reference = ref.apply_rope  # looked up before own_work blocks it
    with own_work(apply_rope, "apply_rope"):
        same_as_reference(apply_rope, reference, FAMILIES["apply_rope"], "apply_rope", grads=True)


def _expect_rope_probes(apply_rope, interleaved):
    """Heads as split_heads leaves them (non-contiguous), with a sentence that says so (the space's
    layouts catch the same crash, in general words)."""
    x, pos = randn(2, 5, 3, 8, seed=86).transpose(1, 2), torch.tensor([2, 3, 4, 5, 6])  # (B, H, T, hd)
    with own_work(apply_rope, "apply_rope"):
        out = attempt(apply_rope, x, pos, 100.0, interleaved=interleaved,
                      en="apply_rope must accept a non-contiguous x, as heads split by a transpose are: use reshape or slicing, not view.",
                      zh="apply_rope 必须接受非连续的 x（经 transpose 拆分出的头就是这样）：请用 reshape 或切片，而不是 view。")
    expect_close(out, rope(x, pos, 100.0, interleaved), "apply_rope must give the same result on a non-contiguous x (heads split by a transpose).",
                 "apply_rope 在非连续的 x（经 transpose 拆分出的头）上必须给出相同的结果。")


# interleaved_to_half_split ---------------------------------------------------------------------
def check_interleaved_to_half_split(interleaved_to_half_split):
    H, hd, d_in = 2, 6, 5
    weight = torch.arange(H * hd * d_in, dtype=torch.float32).reshape(H * hd, d_in)
    with own_work(interleaved_to_half_split, "interleaved_to_half_split"):
        out = call(interleaved_to_half_split, weight, H, name="interleaved_to_half_split")
        random_w = randn(3 * 4, 7, seed=82)
        other = call(interleaved_to_half_split, random_w, 3, name="interleaved_to_half_split")
    expect_tensor(out, "interleaved_to_half_split's result", "interleaved_to_half_split 的结果")
    right_rows = [h * hd + r for h in range(H) for r in [*range(0, hd, 2), *range(1, hd, 2)]]
    global_rows = [*range(0, H * hd, 2), *range(1, H * hd, 2)]
    inverse_rows = [h * hd + (r // 2 if r % 2 == 0 else hd // 2 + r // 2) for h in range(H) for r in range(hd)]
    mistakes = [
        (weight[global_rows], "The rows were permuted across the whole matrix: permute within each head (rows h*hd .. (h+1)*hd - 1), evens first, then odds.",
         "行是在整个矩阵上重排的：要在每个头内部重排（第 h*hd 到 (h+1)*hd - 1 行），先偶数行，后奇数行。"),
        (weight[inverse_rows], "This is the inverse permutation (half-split to interleaved): row i of the result is row 2i of the head, row hd/2 + i is row 2i + 1.",
         "这是逆排列（从前后两半到相邻配对）：结果的第 i 行是该头的第 2i 行，第 hd/2 + i 行是第 2i + 1 行。"),
        (weight.reshape(H * hd, d_in)[:, [*range(0, d_in, 2), *range(1, d_in, 2)]],
         "The columns were permuted: RoPE pairs output features, so permute the ROWS of the (d_out, d_in) weight.",
         "重排的是列：RoPE 配对的是输出特征，所以要重排 (d_out, d_in) 权重的行。"),
    ]
    expect_known(out, weight[right_rows], mistakes,
                 "Within each head, rows (0, 2, 4, ...) come first and (1, 3, 5, ...) second, so the pair (2i, 2i+1) lands on (i, i + hd/2).",
                 "在每个头内部，先放第 (0, 2, 4, ...) 行，再放第 (1, 3, 5, ...) 行，这样一对 (2i, 2i+1) 落到 (i, i + hd/2)。")
    bias = torch.arange(12.0)
    en, zh = "interleaved_to_half_split must work on a 1-D bias of length d_out too.", "interleaved_to_half_split 也必须适用于长度为 d_out 的一维偏置。"
    with own_work(interleaved_to_half_split, "interleaved_to_half_split"):
        got = attempt(interleaved_to_half_split, bias, 2, en=en, zh=zh)
    expect(isinstance(got, torch.Tensor) and torch.equal(got, bias[[0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]]), en, zh)
    x, pos = randn(6, 7, seed=83), torch.arange(6)
    heads = lambda y: y.view(6, 3, 4).transpose(0, 1)
    meta = rope(heads(x @ random_w.T), pos, interleaved=True)
    hf = rope(heads(x @ other.T), pos)
    expect_close(hf @ hf.transpose(-2, -1), meta @ meta.transpose(-2, -1),
                 "Half-split RoPE on the permuted projection must give the same scores as interleaved RoPE on the original.",
                 "对重排后的投影做前后两半式 RoPE，得到的分数必须与对原投影做相邻配对式 RoPE 的相同。", atol=1e-4)
    reference = ref.interleaved_to_half_split  # looked up before own_work blocks it
    with own_work(interleaved_to_half_split, "interleaved_to_half_split"):
        same_as_reference(interleaved_to_half_split, reference, FAMILIES["interleaved_to_half_split"], "interleaved_to_half_split",
                          grads=True)


# RoPEMultiHeadAttention ----------------------------------------------------------------------
def check_RoPEMultiHeadAttention(RoPEMultiHeadAttention):
    name, d_in, d_out, H, ctx, theta = "RoPEMultiHeadAttention", 5, 8, 2, 9, 50.0
    x = randn(2, 7, d_in, seed=84)
    chunks = ((0, 3), (3, 4), (4, 5), (5, 7))
    for interleaved, bias in ((False, False), (True, True)):
        reference = ref.RoPEMultiHeadAttention(d_in, d_out, ctx, H, theta, interleaved, bias).eval()
        state = seeded_state(reference, 85 + bias)
        reference.load_state_dict(state)
        with own_work(RoPEMultiHeadAttention, name):
            module = own_module(RoPEMultiHeadAttention, d_in, d_out, ctx, H, theta=theta, interleaved=interleaved,
                                qkv_bias=bias).eval()
            _expect_gpt_attributes(module, H, d_out // H)
            load_state(module, state, name)
            with torch.no_grad():
                full = call(module, x, name=f"{name}.forward")
                cache = KVCache(2, ctx, H, d_out // H)
                steps = [call(module, x[:, a:b], kv_cache=cache, name=f"{name}.forward") for a, b in chunks]
                again = call(module, x, name=f"{name}.forward")
        expect_close(again, full, f"{name} without a cache must give the same output on every call: keep no keys, values or positions in the module between calls (the cache holds them).",
                     f"{name} 在没有缓存时每次调用都必须给出相同的输出：不要在调用之间把键、值或位置保存在模块里（它们由缓存保存）。")
        expect_tensor(full, f"{name}'s output", f"{name} 的输出")
        with torch.no_grad(), course_runs():
            want = _rope_mha(reference, x, 0, interleaved, theta)
            mistakes = [
                (_rope_mha(reference, x, 0, interleaved, theta, "values"),
                 "The values are rotated too: RoPE rotates queries and keys only, the values carry content, not position.",
                 "值也被旋转了：RoPE 只旋转查询和键，值携带的是内容而不是位置。"),
                (_rope_mha(reference, x, 0, interleaved, theta, "before split"),
                 "RoPE was applied with the wrong head width: split the heads first, then rotate each (B, H, T, head_dim) head with frequencies over head_dim = d_out // num_heads.",
                 "RoPE 用了错误的头宽度：先拆分头，再对每个 (B, H, T, head_dim) 的头做旋转，频率按 head_dim = d_out // num_heads 计算。"),
                (_rope_mha(reference, x, 0, not interleaved, theta),
                 f"The layout is wrong: with interleaved={interleaved} pass it on to apply_rope.",
                 f"布局不对：interleaved={interleaved} 时要把它传给 apply_rope。"),
                (reference.out_proj(merge_heads(torch.softmax((split_heads(reference.W_query(x), H) @ split_heads(reference.W_key(x), H).transpose(-2, -1) / 2.0).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf")), -1) @ split_heads(reference.W_value(x), H))),
                 "No RoPE was applied: rotate the queries and keys by their positions before the scores.",
                 "没有应用 RoPE：在计算分数之前，按位置旋转查询和键。"),
            ]
        expect_known(full, want, mistakes,
                     f"{name}(interleaved={interleaved}, qkv_bias={bias}) is wrong: project, split heads, RoPE on q and k at positions 0..T-1, causal attention, merge, out_proj.",
                     f"{name}（interleaved={interleaved}，qkv_bias={bias}）不对：投影，拆分头，按位置 0..T-1 对 q 和 k 做 RoPE，因果注意力，合并，out_proj。")
        with torch.no_grad():
            restart_cache = KVCache(2, ctx, H, d_out // H)
            restarted = [_rope_mha(reference, x[:, a:b], a, interleaved, theta, "restart", restart_cache) for a, b in chunks]
        for (a, b), got, bad in zip(chunks, steps, restarted):
            expect_known(got, want[:, a:b], [(bad if a else None,
                         "Positions restart at 0 when a cache is given: the new tokens sit at positions kv_cache.seq_len, seq_len + 1, ... (read seq_len BEFORE updating the cache).",
                         "给了缓存时位置从 0 重新开始：新词元的位置是 kv_cache.seq_len、seq_len + 1、……（要在更新缓存之前读取 seq_len）。")],
                         f"With a cache, the outputs for tokens {a}..{b - 1} must equal one pass over the whole sequence.",
                         f"有缓存时，词元 {a}..{b - 1} 的输出必须与对整个序列做一次计算的结果相同。")
    _expect_gradients(RoPEMultiHeadAttention, name, d_in, d_out, H, ctx, theta)
    reference = ref.RoPEMultiHeadAttention  # looked up before own_work blocks it
    graded, steep = split_saturated(FAMILIES[name])
    with own_work(RoPEMultiHeadAttention, name):
        for family, grads in ((graded, True), (steep, False)):
            same_as_reference_module(RoPEMultiHeadAttention, reference, MHA_CTOR, family, name, grads=grads)


def _expect_gpt_attributes(module, num_heads, head_dim):
    got = (getattr(module, "num_heads", None), getattr(module, "head_dim", None))
    expect(got == (num_heads, head_dim) and all(type(n) is int for n in got),  # an int: GPT sizes each cache with them
           "RoPEMultiHeadAttention must keep num_heads and head_dim as attributes: notebook 07's GPT reads them to size each layer's KV cache.",
           "RoPEMultiHeadAttention 必须把 num_heads 和 head_dim 保存为属性：笔记本 07 的 GPT 读取它们来确定每一层 KV 缓存的大小。",
           f"(num_heads, head_dim) = {got}, expected {(num_heads, head_dim)}")


def _expect_gradients(cls, name, d_in, d_out, H, ctx, theta):
    """Gradients reach every weight, said in words (the harness compares each one's values)."""
    reference = ref.RoPEMultiHeadAttention(d_in, d_out, ctx, H, theta, True, True)
    state = seeded_state(reference, 87)
    with own_work(cls, name):
        module = load_state(own_module(cls, d_in, d_out, ctx, H, theta=theta, interleaved=True, qkv_bias=True), state, name)
        out = call(module, randn(2, 6, d_in, seed=88), name=f"{name}.forward")
        out.square().sum().backward()
        expect_gradients(module, name)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
