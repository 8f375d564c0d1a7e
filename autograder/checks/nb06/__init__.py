"""Hidden checks of notebook 06, multi-head attention.

Weights are built here and copied into the learner's modules; outputs are compared with the
reference in utils.multihead and, when they differ, with the outputs of the usual mistakes.
"""
import math

import torch
from torch import nn

import utils.multihead as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, expect_linear, expect_raises, expect_tensor, fail,
                               fill_linear, matches, own_work, randn)
from autograder.checks.nb04.causal_layers import (QKV, causal_attention, expect_dropout_on_weights, load_projections, modal, probe_tokens,
                                             probe_weights)
from autograder.checks.nb06.contract import CONTEXT, D_IN, FAMILIES
from autograder.checks.core.harness import same_as_reference, same_as_reference_module

X = randn(2, 4, D_IN, seed=60)  # T = 4 < context_length, batch items differ
P = 0.3  # the dropout rate of the training-mode probes


# What is refused is the contract's (nb06/contract.py): MultiHeadAttention may not call PyTorch's
# multi-head attention; F.scaled_dot_product_attention is allowed in both layers (the lesson is the
# heads, their split and merge and out_proj, not the attention inside a head).
def _guard(cls, who):
    if who == "MultiHeadAttention":
        return own_work(cls, who,
                        en=f"{who} must build the heads with your own code, not nn.MultiheadAttention or F.multi_head_attention_forward (its rules: they do this exercise's whole job) nor the course's utils.multihead.{who}; F.scaled_dot_product_attention inside is fine.",
                        zh=f"{who} 必须用你自己的代码构造多头，不能用 nn.MultiheadAttention 或 F.multi_head_attention_forward（它的规则：它们会完成本练习的全部工作），也不能交上课程的 utils.multihead.{who}；在内部使用 F.scaled_dot_product_attention 是可以的。")
    return own_work(cls, who,
                    en=f"{who} must be your own code, not the course's utils.multihead.{who} (reusing a class of an earlier notebook, CausalAttention, is fine).",
                    zh=f"{who} 必须是你自己的代码，不能交上课程的 utils.multihead.{who}（复用之前笔记本中的类 CausalAttention 是可以的）。")


def _heads(module, heads):
    lists = [m for m in module.children() if isinstance(m, nn.ModuleList)]
    expect(len(lists) == 1 and len(lists[0]) == heads,
           "Keep the heads in one nn.ModuleList (a plain Python list hides their parameters from the optimizer and from .to()).",
           "请把各个头放在一个 nn.ModuleList 中（普通 Python 列表会让优化器和 .to() 看不到它们的参数）。",
           f"children: {[type(m).__name__ for m in module.children()]}")
    head_modules = list(lists[0])
    expect(len({id(h) for h in head_modules}) == heads,
           "Every head must be its own module with its own weights: [CausalAttention(...)] * num_heads repeats one head.",
           "每个头都必须是独立的模块、拥有自己的权重：[CausalAttention(...)] * num_heads 只是把同一个头重复了几次。")
    return head_modules


def check_MultiHeadAttentionWrapper(MultiHeadAttentionWrapper):
    who, d_out, heads = "MultiHeadAttentionWrapper", 3, 2  # d_out is each head's width here
    for bias in (False, True):
        with _guard(MultiHeadAttentionWrapper, who):
            module = call(MultiHeadAttentionWrapper, D_IN, d_out, CONTEXT, 0.5, heads, qkv_bias=bias, name=who)
            expect(isinstance(module, nn.Module), f"{who} must subclass nn.Module.", f"{who} 必须继承 nn.Module。")
            parts = []
            for h, head in enumerate(_heads(module, heads)):
                layers = load_projections(head, f"head {h}", D_IN, d_out, bias=bias, seed=61 + 3 * h)
                with torch.no_grad():
                    parts.append(causal_attention(*(layers[n](X) for n in QKV)))
            module.eval()  # dropout 0.5 must be off in eval
            out = call(module, X, name=f"{who}.forward")
            again = call(module, X, name=f"{who}.forward")
        expect_tensor(out, "The wrapper's output", "包装器的输出")
        expected = torch.cat(parts, dim=-1)
        expect(out.shape == expected.shape,
               "Concatenate the heads' outputs along the feature axis (dim=-1): the output is (B, T, d_out * num_heads), d_out being each head's width.",
               "沿特征轴 (dim=-1) 拼接各个头的输出：输出形状为 (B, T, d_out * num_heads)，这里的 d_out 是每个头的宽度。",
               f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
        expect(torch.equal(out, again), "In eval() the wrapper's output must be deterministic: dropout is off.",
               "在 eval() 模式下包装器的输出必须是确定的：dropout 已关闭。")
        expect_close(out, expected, f"The wrapper's output is wrong (qkv_bias={bias}): head h's causal attention output fills columns h*d_out:(h+1)*d_out.",
                     f"包装器的输出不对（qkv_bias={bias}）：第 h 个头的因果注意力输出应占据第 h*d_out 到 (h+1)*d_out 列。")

    reference = modal(ref.MultiHeadAttentionWrapper)  # looked up before own_work blocks it
    with _guard(MultiHeadAttentionWrapper, who):  # the list of heads may have any name: weights by position
        same_as_reference_module(modal(MultiHeadAttentionWrapper), reference, (D_IN, 2, CONTEXT, 0.0, 3), FAMILIES[who],
                                 who, grads=True, ctor_kwargs={"qkv_bias": True}, by_position=True)
    T = CONTEXT
    per_head, expected = probe_weights(T, heads)
    with _guard(MultiHeadAttentionWrapper, who):
        module = call(MultiHeadAttentionWrapper, T, 2 * T, T, P, heads, name=who)
        for h, head in enumerate(_heads(module, heads)):
            load_projections(head, f"head {h}", T, 2 * T, weights=per_head[h])
        module.train()
        out = call(module, probe_tokens(T), name=f"{who}.forward")
    expect_dropout_on_weights(out, expected, P, who)


def check_split_heads(split_heads):
    x = torch.arange(2 * 4 * 6, dtype=torch.float32).reshape(2, 4, 6)
    other = randn(3, 5, 12, seed=62)
    with own_work(split_heads, "split_heads"):
        out = call(split_heads, x, 2, name="split_heads")
        other_out = call(split_heads, other, 4, name="split_heads")
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
    expect_close(other_out, other.view(3, 5, 4, 3).transpose(1, 2),
                 "split_heads must work for any batch, length, width and number of heads.",
                 "split_heads 必须适用于任意批大小、长度、宽度和头数。")
    reference = ref.split_heads  # looked up before own_work blocks it
    with own_work(split_heads, "split_heads"):
        expect_raises(ValueError, split_heads, randn(2, 3, 10, seed=63), 4, name="split_heads",
                      en="split_heads must raise ValueError when the width (10) is not divisible by num_heads (4): no split holds every feature.",
                      zh="宽度 (10) 不能被 num_heads (4) 整除时，split_heads 必须抛出 ValueError：没有能容纳所有特征的切分。")
        _expect_names_both(split_heads, (randn(2, 3, 10, seed=63), 4), ("10", "4"), "split_heads", "the width (10) is not divisible by num_heads (4)",
                           "宽度 (10) 不能被 num_heads (4) 整除")
        same_as_reference(split_heads, reference, FAMILIES["split_heads"], "split_heads", grads=True)


def _expect_names_both(fn, args, numbers, who, en, zh):
    """The ValueError's message names both numbers (CURRICULUM.md's convention): the learner reads which sizes disagree."""
    try:
        fn(*args)
    except ValueError as e:
        expect(all(n in str(e) for n in numbers),
               f"{who}'s ValueError must name both numbers when {en}: say which sizes disagree.",
               f"当{zh}时，{who} 的 ValueError 信息必须写出这两个数：说明哪些大小不匹配。", f"message: {e}")


def check_merge_heads(merge_heads):
    x = torch.arange(2 * 3 * 4 * 2, dtype=torch.float32).reshape(2, 3, 4, 2)  # (B, H, T, hd)
    with own_work(merge_heads, "merge_heads"):
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
    reference = ref.merge_heads  # looked up before own_work blocks it
    with own_work(merge_heads, "merge_heads"):
        same_as_reference(merge_heads, reference, FAMILIES["merge_heads"], "merge_heads", grads=True)


def _mha_mistakes(layers, out_proj, num_heads, x):
    """The right output and (output, en, zh) of the usual mistakes, on (B, T, d_in) inputs."""
    B, T, _ = x.shape
    with torch.no_grad():
        q, k, v = (ref.split_heads(layer(x), num_heads) for layer in layers)
        hd = q.shape[-1]
        d_out = hd * num_heads
        right = out_proj(ref.merge_heads(causal_attention(q, k, v)))
        table = [
            (out_proj(ref.merge_heads(causal_attention(q, k, v, 1 / math.sqrt(d_out)))),
             "the scores are divided by sqrt(d_out); each head's scores must be divided by sqrt(head_dim)",
             "分数除以了 sqrt(d_out)；每个头的分数应除以 sqrt(head_dim)"),
            (ref.merge_heads(causal_attention(q, k, v)), "the output projection is missing: finish with self.out_proj(context)",
             "缺少输出投影：最后要做 self.out_proj(context)"),
            (out_proj(ref.merge_heads(causal_attention(*(layer(x).reshape(B, num_heads, T, hd) for layer in layers)))),
             "heads are split along the token axis: view (B, T, H, hd), then transpose(1, 2)",
             "头沿词元轴切分了：先 view 成 (B, T, H, hd)，再 transpose(1, 2)"),
            (out_proj(causal_attention(q, k, v).reshape(B, T, d_out)),
             "heads are merged without transposing back: transpose(1, 2) before reshaping to (B, T, d_out)",
             "合并头时没有转置回来：reshape 成 (B, T, d_out) 之前要先 transpose(1, 2)"),
        ]
    return right, [(o, f"MultiHeadAttention has a known mistake: {en}.", f"MultiHeadAttention 有一个常见错误：{zh}。") for o, en, zh in table]


def _out_proj(module, d_out, who):
    return expect_linear(module, "out_proj", d_out, d_out, True, who, "out_proj must be nn.Linear(d_out, d_out) with a bias.",
                         "out_proj 必须是带偏置的 nn.Linear(d_out, d_out)。")


def check_MultiHeadAttention(MultiHeadAttention):
    who, d_out, heads = "MultiHeadAttention", 6, 2  # d_out is the total width; head_dim 3 > 1, T = 4 < context_length
    with _guard(MultiHeadAttention, who):
        try:
            MultiHeadAttention(D_IN, 7, CONTEXT, 0.0, 2)
        except NotImplementedError:
            call(MultiHeadAttention, D_IN, 7, CONTEXT, 0.0, 2, name=who)
        except Exception:
            pass
        expect_raises(ValueError, MultiHeadAttention, D_IN, 7, CONTEXT, 0.0, 2, name=who,
                      en="MultiHeadAttention(d_out=7, num_heads=2) must raise ValueError: d_out has to split evenly into heads.",
                      zh="MultiHeadAttention(d_out=7, num_heads=2) 必须抛出 ValueError：d_out 必须能平均分给各个头。")
        _expect_names_both(MultiHeadAttention, (D_IN, 7, CONTEXT, 0.0, 2), ("7", "2"), who, "d_out (7) is not divisible by num_heads (2)",
                           "d_out (7) 不能被 num_heads (2) 整除")
    later = X.clone()
    later[:, -1] += 10.0
    for bias in (False, True):
        with _guard(MultiHeadAttention, who):
            module = call(MultiHeadAttention, D_IN, d_out, CONTEXT, 0.5, heads, qkv_bias=bias, name=who)
            buffers = dict(module.named_buffers())
            expect("mask" in buffers,
                   "The causal mask must be a registered buffer named mask (register_buffer), so it moves with .to() and lives in state_dict.",
                   "因果掩码必须是名为 mask 的已注册缓冲区 (register_buffer)，这样它会随 .to() 移动并保存在 state_dict 中。",
                   f"buffers: {sorted(buffers)}")
            layers = list(load_projections(module, who, D_IN, d_out, bias=bias, seed=70).values())
            out_proj = fill_linear(_out_proj(module, d_out, who), 73, bias_scale=0.5)
            module.eval()  # dropout 0.5 must be off in eval
            try:
                out = call(module, X, name=f"{who}.forward")
            except AssertionError as e:
                if "must match the size" in str(e):
                    fail("With fewer tokens than context_length the mask must be sliced to the input: self.mask[:T, :T].",
                         "当词元数少于 context_length 时，掩码必须按输入长度切片：self.mask[:T, :T]。", str(e).split("[")[-1].rstrip("]"))
                raise
            again = call(module, X, name=f"{who}.forward")
            with torch.no_grad():
                moved = call(module, later, name=f"{who}.forward")
        expect_tensor(out, "MultiHeadAttention's output", "MultiHeadAttention 的输出")
        right, mistakes = _mha_mistakes(layers, out_proj, heads, X)
        expect(out.shape == right.shape, "MultiHeadAttention must map (B, T, d_in) to (B, T, d_out).",
               "MultiHeadAttention 必须把 (B, T, d_in) 映射为 (B, T, d_out)。",
               f"shape {tuple(out.shape)}, expected {tuple(right.shape)}")
        expect(torch.equal(out, again), "In eval() the output must be deterministic: dropout is off.",
               "在 eval() 模式下输出必须是确定的：dropout 已关闭。")
        expect_known(out, right, mistakes,
                     f"MultiHeadAttention's output is wrong (qkv_bias={bias}): project, split heads, causal softmax(Q K^T / sqrt(head_dim)) V per head, merge, out_proj.",
                     f"MultiHeadAttention 的输出不对（qkv_bias={bias}）：投影，拆分头，每个头做因果 softmax(Q K^T / sqrt(head_dim)) V，合并，out_proj。")
        expect_close(moved[:, :-1], out[:, :-1],
                     "Changing the last token changed earlier outputs: the causal mask must stop queries from seeing later keys.",
                     "改变最后一个词元改变了前面的输出：因果掩码必须阻止查询看到后面的键。")

    reference = modal(ref.MultiHeadAttention)  # looked up before own_work blocks it
    with _guard(MultiHeadAttention, who):  # pinned: 2 heads of width 3 with biases; the generated points say theirs
        same_as_reference_module(modal(MultiHeadAttention), reference, (D_IN, d_out, CONTEXT, 0.0, heads), FAMILIES[who],
                                 who, grads=True, ctor_kwargs={"qkv_bias": True})
    T = CONTEXT  # the probe: one-hot tokens, each head's values [I; I], out_proj the identity
    per_head, expected = probe_weights(T, heads)
    stacked = {n: torch.cat([w[n] for w in per_head]) for n in QKV}  # (H * 2T, T): head h owns rows h*2T:(h+1)*2T
    with _guard(MultiHeadAttention, who):
        module = call(MultiHeadAttention, T, heads * 2 * T, T, P, heads, name=who)
        load_projections(module, who, T, heads * 2 * T, weights=stacked)
        with torch.no_grad():
            out_proj = _out_proj(module, heads * 2 * T, who)
            out_proj.weight.copy_(torch.eye(heads * 2 * T))
            out_proj.bias.zero_()
        module.train()
        out = call(module, probe_tokens(T), name=f"{who}.forward")
    expect_dropout_on_weights(out, expected, P, who)


def check_mha_parameter_count(mha_parameter_count):
    cases = ((768, 768, 12, False), (5, 6, 2, False), (5, 6, 3, True), (64, 32, 4, True), (10, 8, 8, False))
    with own_work(mha_parameter_count, "mha_parameter_count"):
        counts = [call(mha_parameter_count, *case[:3], qkv_bias=case[3], name="mha_parameter_count") for case in cases]
        gpt2 = call(mha_parameter_count, 768, 768, 12, name="mha_parameter_count")
        gpt2_biased = call(mha_parameter_count, 768, 768, 12, qkv_bias=True, name="mha_parameter_count")
    for (d_in, d_out, heads, bias), got in zip(cases, counts):
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
    expect(gpt2 == 2_360_064,
           "With qkv_bias=False (the book's default) an attention layer of GPT-2 small's size (768, 768, 12 heads) has 2,360,064 parameters: three d_in x d_out projections, plus out_proj's d_out x d_out weight and its d_out bias.",
           "当 qkv_bias=False（书中的默认值）时，GPT-2 small 大小的注意力层 (768, 768, 12 个头) 有 2,360,064 个参数：三个 d_in x d_out 投影，加上 out_proj 的 d_out x d_out 权重和 d_out 个偏置。",
           f"got {gpt2}")
    expect(gpt2_biased == 2_362_368,
           "GPT-2 small itself has biases on its query, key and value projections (qkv_bias=True): 2,362,368 parameters, 3 x 768 more.",
           "GPT-2 small 本身的查询、键、值投影带有偏置（qkv_bias=True）：2,362,368 个参数，多出 3 x 768 个。",
           f"got {gpt2_biased}")
    reference = ref.mha_parameter_count  # looked up before own_work blocks it
    with own_work(mha_parameter_count, "mha_parameter_count"):
        same_as_reference(mha_parameter_count, reference, FAMILIES["mha_parameter_count"], "mha_parameter_count")


def check_attention_parameter_count(attention_parameter_count):
    others = ((768, 12, 64, 12), (10, 3, 4, 2))
    with own_work(attention_parameter_count, "attention_parameter_count"):
        gpt3 = call(attention_parameter_count, 12288, 96, 128, 96, name="attention_parameter_count")
        counts = [call(attention_parameter_count, *args, name="attention_parameter_count") for args in others]
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
    for args, got in zip(others, counts):
        expect(got == ref.attention_parameter_count(*args),
               f"attention_parameter_count{args} is wrong: 4 * d_model * head_dim per head, times heads and layers.",
               f"attention_parameter_count{args} 不对：每个头 4 * d_model * head_dim，再乘以头数和层数。",
               f"got {got}, expected {ref.attention_parameter_count(*args)}")
    reference = ref.attention_parameter_count  # looked up before own_work blocks it
    with own_work(attention_parameter_count, "attention_parameter_count"):
        same_as_reference(attention_parameter_count, reference, FAMILIES["attention_parameter_count"], "attention_parameter_count")


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
