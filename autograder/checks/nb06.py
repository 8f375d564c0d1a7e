"""Hidden checks of notebook 06, multi-head attention.

Weights are built here and copied into the learner's modules; outputs are compared with the
reference in utils.multihead and, when they differ, with the outputs of the usual mistakes.
"""
import math

import torch
from torch import nn

import utils.multihead as ref
from autograder.checks import call, expect, expect_close, expect_linear, expect_tensor, fail, forbid, matches, randn

D_IN, CONTEXT = 5, 6
X = randn(2, 4, D_IN, seed=60)  # T = 4 < context_length, batch items differ



def _fill_linear(layer, seed, bias_scale=0.0):
    with torch.no_grad():
        layer.weight.copy_(randn(*layer.weight.shape, seed=seed) / math.sqrt(layer.in_features))
        if layer.bias is not None:
            layer.bias.copy_(torch.linspace(-1.0, 1.0, layer.out_features) * bias_scale)


def _linear(module, name, d_in, d_out, bias, who):
    if name == "out_proj":
        return expect_linear(module, name, d_in, d_out, bias, who, "out_proj must be nn.Linear(d_out, d_out) with a bias.",
                             "out_proj 必须是带偏置的 nn.Linear(d_out, d_out)。")
    return expect_linear(module, name, d_in, d_out, bias, who)


def _causal_heads(q, k, v, scale):
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) * scale
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def _no_shortcut(module, who):
    return forbid([(torch.nn.functional, "scaled_dot_product_attention"), (torch.nn.functional, "multi_head_attention_forward"),
                   (ref, "split_heads"), (ref, "merge_heads")], [module.forward],
                  f"{who} must compute attention with your own code, not F.scaled_dot_product_attention, nn.MultiheadAttention or utils.",
                  f"{who} 必须用你自己的代码计算注意力，不能调用 F.scaled_dot_product_attention、nn.MultiheadAttention 或 utils。")


def check_MultiHeadAttentionWrapper(MultiHeadAttentionWrapper):
    d_out, heads = 3, 2
    module = call(MultiHeadAttentionWrapper, D_IN, d_out, CONTEXT, 0.0, heads, name="MultiHeadAttentionWrapper")
    lists = [m for m in module.children() if isinstance(m, nn.ModuleList)]
    expect(len(lists) == 1 and len(lists[0]) == heads,
           "Keep the heads in one nn.ModuleList (a plain Python list hides their parameters from the optimizer and from .to()).",
           "请把各个头放在一个 nn.ModuleList 中（普通 Python 列表会让优化器和 .to() 看不到它们的参数）。",
           f"children: {[type(m).__name__ for m in module.children()]}")
    head_modules = list(lists[0])
    expect(len({id(h) for h in head_modules}) == heads,
           "Every head must be its own module with its own weights: [CausalAttention(...)] * num_heads repeats one head.",
           "每个头都必须是独立的模块、拥有自己的权重：[CausalAttention(...)] * num_heads 只是把同一个头重复了几次。")
    parts = []
    for h, head in enumerate(head_modules):
        layers = [_linear(head, n, D_IN, d_out, False, f"head {h}") for n in ("W_query", "W_key", "W_value")]
        for i, layer in enumerate(layers):
            _fill_linear(layer, 61 + 3 * h + i)
        with torch.no_grad():
            q, k, v = (layer(X) for layer in layers)
        parts.append(_causal_heads(q, k, v, 1 / math.sqrt(d_out)))
    module.eval()
    out = call(module, X, name="MultiHeadAttentionWrapper.forward")
    expect_tensor(out, "The wrapper's output", "包装器的输出")
    expected = torch.cat(parts, dim=-1)
    expect(out.shape == expected.shape,
           "Concatenate the heads' outputs along the feature axis (dim=-1): the output is (B, T, d_out * num_heads).",
           "沿特征轴 (dim=-1) 拼接各个头的输出：输出形状为 (B, T, d_out * num_heads)。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    expect_close(out, expected, "The wrapper's output is wrong: head h's causal attention output fills columns h*d_out:(h+1)*d_out.",
                 "包装器的输出不对：第 h 个头的因果注意力输出应占据第 h*d_out 到 (h+1)*d_out 列。")


def check_split_heads(split_heads):
    x = torch.arange(2 * 4 * 6, dtype=torch.float32).reshape(2, 4, 6)
    out = call(split_heads, x, 2, name="split_heads")
    expect_tensor(out, "split_heads' result", "split_heads 的结果")
    expected = x.view(2, 4, 2, 3).transpose(1, 2)
    expect(out.shape == expected.shape,
           "split_heads must return (B, H, T, D // H): view as (B, T, H, hd), then transpose(1, 2) to put heads next to the batch.",
           "split_heads 必须返回 (B, H, T, D // H)：先 view 成 (B, T, H, hd)，再 transpose(1, 2) 把头放到批维旁边。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    if matches(out, x.reshape(2, 2, 4, 3)):
        fail("Heads were split along the wrong axis: reshaping (B, T, D) straight to (B, H, T, hd) mixes tokens; view (B, T, H, hd) first, then transpose(1, 2).",
             "头沿错误的轴切分了：把 (B, T, D) 直接 reshape 成 (B, H, T, hd) 会混淆词元；先 view 成 (B, T, H, hd)，再 transpose(1, 2)。")
    expect_close(out, expected, "Head h must hold features h*hd:(h+1)*hd of every token.",
                 "第 h 个头必须包含每个词元的第 h*hd 到 (h+1)*hd 个特征。")
    other = randn(3, 5, 12, seed=62)
    expect_close(call(split_heads, other, 4, name="split_heads"), other.view(3, 5, 4, 3).transpose(1, 2),
                 "split_heads must work for any batch, length, width and number of heads.",
                 "split_heads 必须适用于任意批大小、长度、宽度和头数。")


def check_merge_heads(merge_heads):
    x = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).reshape(2, 3, 4, 2)  # (B, H, T, hd)
    try:
        out = merge_heads(x)
    except NotImplementedError:
        out = call(merge_heads, x, name="merge_heads")
    except RuntimeError as e:
        if "view" in str(e):
            fail("After transpose the tensor is not contiguous: use .contiguous().view(...) or .reshape(...) to merge the heads.",
                 "transpose 之后张量不再连续：请用 .contiguous().view(...) 或 .reshape(...) 合并各个头。", str(e).splitlines()[0])
        out = call(merge_heads, x, name="merge_heads")
    expect_tensor(out, "merge_heads' result", "merge_heads 的结果")
    expected = x.transpose(1, 2).reshape(2, 4, 6)
    expect(out.shape == expected.shape,
           "merge_heads must return (B, T, H * hd).", "merge_heads 必须返回 (B, T, H * hd)。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    if matches(out, x.reshape(2, 4, 6)):
        fail("Heads were merged along the wrong axis: transpose(1, 2) back to (B, T, H, hd) before flattening the last two dims.",
             "头沿错误的轴合并了：在展平最后两维之前，先 transpose(1, 2) 回到 (B, T, H, hd)。")
    expect_close(out, expected, "merge_heads must undo split_heads: token t gets head 0's features, then head 1's, and so on.",
                 "merge_heads 必须是 split_heads 的逆操作：词元 t 先放第 0 个头的特征，再放第 1 个头的，依此类推。")


def _mha_reference(layers, out_proj, num_heads):
    with torch.no_grad():
        q, k, v = (ref.split_heads(layer(X), num_heads) for layer in layers)
        hd = q.shape[-1]
        right = out_proj(ref.merge_heads(_causal_heads(q, k, v, 1 / math.sqrt(hd))))
        d_out = hd * num_heads
        variants = {
            "the scores are divided by sqrt(d_out); each head's scores must be divided by sqrt(head_dim)":
                ("分数除以了 sqrt(d_out)；每个头的分数应除以 sqrt(head_dim)",
                 out_proj(ref.merge_heads(_causal_heads(q, k, v, 1 / math.sqrt(d_out))))),
            "the output projection is missing: finish with self.out_proj(context)":
                ("缺少输出投影：最后要做 self.out_proj(context)", ref.merge_heads(_causal_heads(q, k, v, 1 / math.sqrt(hd)))),
            "heads are split along the token axis: view (B, T, H, hd), then transpose(1, 2)":
                ("头沿词元轴切分了：先 view 成 (B, T, H, hd)，再 transpose(1, 2)",
                 out_proj(ref.merge_heads(_causal_heads(*(layer(X).reshape(2, num_heads, 4, hd) for layer in layers),
                                                        1 / math.sqrt(hd))))),
            "heads are merged without transposing back: transpose(1, 2) before reshaping to (B, T, d_out)":
                ("合并头时没有转置回来：reshape 成 (B, T, d_out) 之前要先 transpose(1, 2)",
                 out_proj(_causal_heads(q, k, v, 1 / math.sqrt(hd)).reshape(2, 4, d_out))),
        }
    return right, variants


def check_MultiHeadAttention(MultiHeadAttention):
    d_out, heads = 6, 2  # head_dim 3 > 1, T = 4 < context_length = 6
    try:
        MultiHeadAttention(D_IN, 7, CONTEXT, 0.0, 2)
    except ValueError as e:
        expect("7" in str(e) and "2" in str(e),
               "The ValueError for d_out not divisible by num_heads must name both numbers.",
               "d_out 不能被 num_heads 整除时，ValueError 的信息必须写出这两个数。", f"message: {e}")
    except NotImplementedError:
        call(MultiHeadAttention, D_IN, 7, CONTEXT, 0.0, 2, name="MultiHeadAttention")
    else:
        fail("MultiHeadAttention(d_out=7, num_heads=2) must raise ValueError: d_out has to split evenly into heads.",
             "MultiHeadAttention(d_out=7, num_heads=2) 必须抛出 ValueError：d_out 必须能平均分给各个头。")
    module = call(MultiHeadAttention, D_IN, d_out, CONTEXT, 0.5, heads, name="MultiHeadAttention")
    buffers = dict(module.named_buffers())
    expect("mask" in buffers,
           "The causal mask must be a registered buffer named mask (register_buffer), so it moves with .to() and lives in state_dict.",
           "因果掩码必须是名为 mask 的已注册缓冲区 (register_buffer)，这样它会随 .to() 移动并保存在 state_dict 中。",
           f"buffers: {sorted(buffers)}")
    layers = [_linear(module, n, D_IN, d_out, False, "MultiHeadAttention") for n in ("W_query", "W_key", "W_value")]
    out_proj = _linear(module, "out_proj", d_out, d_out, True, "MultiHeadAttention")
    for i, layer in enumerate(layers + [out_proj]):
        _fill_linear(layer, 70 + i, bias_scale=0.5)
    module.eval()  # dropout 0.5 must be off in eval
    try:
        with _no_shortcut(module, "MultiHeadAttention"):
            out = call(module, X, name="MultiHeadAttention.forward")
            again = call(module, X, name="MultiHeadAttention.forward")
    except AssertionError as e:
        if "must match the size" in str(e):
            fail("With fewer tokens than context_length the mask must be sliced to the input: self.mask[:T, :T].",
                 "当词元数少于 context_length 时，掩码必须按输入长度切片：self.mask[:T, :T]。", str(e).split("[")[-1].rstrip("]"))
        raise
    expect_tensor(out, "MultiHeadAttention's output", "MultiHeadAttention 的输出")
    right, variants = _mha_reference(layers, out_proj, heads)
    expect(out.shape == right.shape, "MultiHeadAttention must map (B, T, d_in) to (B, T, d_out).",
           "MultiHeadAttention 必须把 (B, T, d_in) 映射为 (B, T, d_out)。",
           f"shape {tuple(out.shape)}, expected {tuple(right.shape)}")
    expect(torch.equal(out, again), "In eval() the output must be deterministic: dropout is off.",
           "在 eval() 模式下输出必须是确定的：dropout 已关闭。")
    if not matches(out, right):
        for en, (zh, variant) in variants.items():
            if matches(out, variant):
                fail(f"MultiHeadAttention has a known mistake: {en}.", f"MultiHeadAttention 有一个常见错误：{zh}。")
    expect_close(out, right, "MultiHeadAttention's output is wrong: project, split heads, causal softmax(Q K^T / sqrt(head_dim)) V per head, merge, out_proj.",
                 "MultiHeadAttention 的输出不对：投影，拆分头，每个头做因果 softmax(Q K^T / sqrt(head_dim)) V，合并，out_proj。")
    later = X.clone()
    later[:, -1] += 10.0
    with torch.no_grad(), _no_shortcut(module, "MultiHeadAttention"):
        moved = call(module, later, name="MultiHeadAttention.forward")
    expect_close(moved[:, :-1], out[:, :-1],
                 "Changing the last token changed earlier outputs: the causal mask must stop queries from seeing later keys.",
                 "改变最后一个词元改变了前面的输出：因果掩码必须阻止查询看到后面的键。")


def check_mha_parameter_count(mha_parameter_count):
    for d_in, d_out, heads, bias in ((768, 768, 12, False), (5, 6, 2, False), (5, 6, 3, True), (64, 32, 4, True), (10, 8, 8, False)):
        got = call(mha_parameter_count, d_in, d_out, heads, qkv_bias=bias, name="mha_parameter_count")
        want = ref.mha_parameter_count(d_in, d_out, heads, bias)
        if got == want:
            continue
        if got == want - d_out:
            fail("The count forgot out_proj's bias (d_out numbers).", "计数漏掉了 out_proj 的偏置（d_out 个数）。")
        if bias and got == want - 3 * d_out:
            fail("With qkv_bias=True each of the three projections has a bias of d_out numbers.",
                 "当 qkv_bias=True 时，三个投影各有 d_out 个偏置。")
        if got in (want * heads, (want - d_out * d_out - d_out) * heads + d_out * d_out + d_out):
            fail("The number of heads does not change the count: heads split d_out, they do not multiply the weights.",
                 "头数不改变参数量：多个头是切分 d_out，而不是把权重翻倍。")
        fail(f"mha_parameter_count({d_in}, {d_out}, {heads}, qkv_bias={bias}) is wrong: count 3 projections, their biases if any, and out_proj with its bias.",
             f"mha_parameter_count({d_in}, {d_out}, {heads}, qkv_bias={bias}) 不对：数三个投影、它们可能有的偏置，以及带偏置的 out_proj。",
             f"got {got}, expected {want}")
    gpt2 = call(mha_parameter_count, 768, 768, 12, name="mha_parameter_count")
    expect(gpt2 == 2_360_064,
           "GPT-2 small's attention (768, 768, 12 heads) has 2,360,064 parameters: three d_in x d_out projections, plus out_proj's d_out x d_out weight and its d_out bias.",
           "GPT-2 small 的注意力层 (768, 768, 12 个头) 有 2,360,064 个参数：三个 d_in x d_out 投影，加上 out_proj 的 d_out x d_out 权重和 d_out 个偏置。",
           f"got {gpt2}")


def check_attention_parameter_count(attention_parameter_count):
    gpt3 = call(attention_parameter_count, 12288, 96, 128, 96, name="attention_parameter_count")
    want = ref.attention_parameter_count(12288, 96, 128, 96)
    if gpt3 == want * 3 // 4:
        fail("Only three matrices were counted: the value map has two, value-down (d_model x head_dim) and value-up (head_dim x d_model).",
             "只数了三个矩阵：值映射有两个，value-down (d_model x head_dim) 和 value-up (head_dim x d_model)。")
    if gpt3 == want // 96:
        fail("The count must cover every layer: multiply by n_layers.", "计数必须覆盖每一层：乘以 n_layers。")
    expect(gpt3 == 57_982_058_496,
           "GPT-3's attention has 57,982,058,496 parameters (3Blue1Brown): 4 matrices of d_model x head_dim per head, 96 heads, 96 layers.",
           "GPT-3 的注意力有 57,982,058,496 个参数（3Blue1Brown）：每个头 4 个 d_model x head_dim 矩阵，96 个头，96 层。",
           f"got {gpt3}")
    for args in ((768, 12, 64, 12), (10, 3, 4, 2)):
        got = call(attention_parameter_count, *args, name="attention_parameter_count")
        expect(got == ref.attention_parameter_count(*args),
               f"attention_parameter_count{args} is wrong: 4 * d_model * head_dim per head, times heads and layers.",
               f"attention_parameter_count{args} 不对：每个头 4 * d_model * head_dim，再乘以头数和层数。",
               f"got {got}, expected {ref.attention_parameter_count(*args)}")
