"""Hidden checks of notebook 02, trainable queries, keys and values.

Weights are built here (arange/constant fills and fixed generators) and copied into the
learner's module, so nothing depends on the order in which the learner creates parameters.
Outputs are compared with the reference and, when they differ, with the outputs of the usual
mistakes, so that the message can name the mistake that was made.
"""
import math

import torch

import utils.self_attention as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, expect_linear, expect_tensor, fail, matches,
                               own_module, own_work, randn)
from autograder.checks.nb02.contract import D_IN, D_OUT, FAMILIES, QKV, _weights
from autograder.checks.core.harness import _where, same_as_reference, same_as_reference_module

X = randn(2, 4, D_IN, seed=20)  # a batch whose items differ


def _copied(out, args, kwargs):
    """What a copy leaves (its return value is ignored): how v1 holds each weight, the weights,
    v1's output and v2's on two batch items that differ. Each tensor says what it is (`what`)."""
    v1, v2 = args
    described = []
    for name in QKV:
        p = getattr(v1, name, None)
        kind = (("nn.Parameter" if isinstance(p, torch.nn.Parameter) else type(p).__name__)
                + ("" if not isinstance(p, torch.Tensor) else
                   f", {'leaf' if p.is_leaf else 'not a leaf'}, requires_grad={p.requires_grad}, {p.dtype}, {tuple(p.shape)}"
                   + (", an inference tensor (no optimizer can update it)" if p.is_inference() else "")))
        described.append(f"v1.{name}: {kind}")
    x = randn(2, 4, v2.W_query.in_features, seed=56).to(v2.W_query.weight.dtype)
    tensors = [(f"v1.{name}", getattr(v1, name, None)) for name in QKV]
    for what, module in (("v1(x)", v1), ("v2(x)", v2)):
        try:
            tensors.append((what, module(x)))
        except Exception:  # a v1 left broken: how it holds its weights is said first
            tensors.append((what, None))
    for what, t in tensors:
        if isinstance(t, torch.Tensor):
            t = t.detach().clone()
            t.what = what
        described.append(t)
    return tuple(described)


def _copy_explained(probe, out, expected):
    """The sentence for what a copy left wrong, by what the compared item is (`_copied`)."""
    what = getattr(expected, "what", None) or ("weights" if isinstance(expected, str) else None)
    on, zh_on = _where(probe)
    if what == "weights":
        return (f"After the copy, v1's W_query, W_key and W_value must still be nn.Parameters that train (leaves that require grad), "
                f"of v2's dtype and of shape (d_in, d_out), not made under torch.inference_mode(){on}: copy_ into them under torch.no_grad(), "
                f"or assign nn.Parameter(weight.detach().T.clone()).",
                f"复制之后，v1 的 W_query、W_key、W_value 仍必须是可训练的 nn.Parameter（需要梯度的叶子张量），dtype 与 v2 相同、"
                f"形状为 (d_in, d_out)，且不是在 torch.inference_mode() 下创建的{zh_on}：在 torch.no_grad() 下 copy_ 进去，或赋值为 nn.Parameter(weight.detach().T.clone())。")
    if what == "v1(x)":
        return f"After the copy, v1 must compute exactly what v2 computes{on}.", f"复制之后，v1 必须精确计算出 v2 的结果{zh_on}。"
    if what == "v2(x)":
        return (f"copy_weights_v2_to_v1 changed v2{on}: read v2's weights only, never assign or write into them.",
                f"copy_weights_v2_to_v1 改变了 v2{zh_on}：只能读取 v2 的权重，不能给它们赋值或写入。")
    if what:  # one of v1's weights
        name = what.split(".")[1]
        return (f"{what} must hold exactly v2.{name}.weight.T after the copy, whatever v1 held before{on}: "
                "overwrite it, do not add to it or scale it.",
                f"复制之后 {what} 必须恰好等于 v2.{name}.weight.T，无论 v1 之前存的是什么{zh_on}：要覆盖它，而不是在它上面相加或缩放。")
    return None


def _attention_variants(q, k, v):
    """What the usual mistakes compute, to name the one a learner made."""
    scores = q @ k.transpose(-2, -1)
    d_k = k.shape[-1]
    return {
        "you divided the scores by d_out instead of sqrt(d_out)":
            ("你把分数除以了 d_out，而不是 sqrt(d_out)", torch.softmax(scores / d_k, -1) @ v),
        "you divided by sqrt(d_in), but the scale comes from the key width d_out":
            ("你除以了 sqrt(d_in)，但缩放因子来自键的宽度 d_out", torch.softmax(scores / math.sqrt(D_IN), -1) @ v),
        "the scores are not scaled: divide Q K^T by sqrt(d_out) before the softmax":
            ("分数没有缩放：在 softmax 之前把 Q K^T 除以 sqrt(d_out)", torch.softmax(scores, -1) @ v),
        "you scaled after the softmax: divide the scores, not the weights":
            ("你在 softmax 之后才缩放：应除的是分数，而不是权重", torch.softmax(scores, -1) / math.sqrt(d_k) @ v),
        "the softmax runs over the queries (dim=-2): each query's weights over the keys (dim=-1) must sum to 1":
            ("softmax 作用在查询维 (dim=-2) 上：每个查询对所有键 (dim=-1) 的权重之和必须为 1",
             torch.softmax(scores / math.sqrt(d_k), -2) @ v),
    }


def _expect_attention(out, q, k, v, who_en, who_zh):
    expected = ref.attend(q, k, v)
    expect_tensor(out, f"{who_en}'s output", f"{who_zh} 的输出")
    expect(out.shape == expected.shape,
           f"{who_en} must map (B, T, d_in) to (B, T, d_out): project with x @ W and keep the batch dim first.",
           f"{who_zh} 必须把 (B, T, d_in) 映射为 (B, T, d_out)：用 x @ W 做投影，并保持批维在最前。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    mistakes = [(variant, f"{who_en} computes attention with a known mistake: {en}.", f"{who_zh} 的注意力计算有一个常见错误：{zh}。")
                for en, (zh, variant) in _attention_variants(q, k, v).items()]
    if not matches(out, expected) and matches(out[:1], ref.attend(q[:1], k[:1], v[:1])) \
            and not any(matches(out, m) for m, _, _ in mistakes):
        fail(f"{who_en} is right for the first batch item but not the second: use transpose(-2, -1), not .T, so the batch stays apart.",
             f"{who_zh} 对第一个样本正确，但对第二个不正确：请用 transpose(-2, -1) 而不是 .T，让各个样本保持独立。")
    expect_known(out, expected, mistakes,
                 f"{who_en} gives the wrong output: queries x @ W_query, keys x @ W_key, values x @ W_value, then softmax(Q K^T / sqrt(d_out)) V.",
                 f"{who_zh} 的输出不对：查询 x @ W_query，键 x @ W_key，值 x @ W_value，然后 softmax(Q K^T / sqrt(d_out)) V。")


def check_project_qkv(project_qkv):
    W_q, W_k, W_v = _weights(21), _weights(22), _weights(23, d_out=D_OUT + 3)  # d_v != d_k
    with own_work(project_qkv, "project_qkv"):
        out = call(project_qkv, X, W_q, W_k, W_v, name="project_qkv")
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           "project_qkv must return three tensors: (queries, keys, values).",
           "project_qkv 必须返回三个张量：(查询, 键, 值)。", f"got {type(out).__name__}")
    q, k, v = out
    for t, en, zh in ((q, "queries", "查询"), (k, "keys", "键"), (v, "values", "值")):
        expect_tensor(t, f"The {en}", zh)
    expected = (X @ W_q, X @ W_k, X @ W_v)
    matched = [next((j for j, e in enumerate(expected) if matches(t, e)), None) for t in (q, k, v)]
    if sorted(m for m in matched if m is not None) == [0, 1, 2] and matched != [0, 1, 2]:
        fail("The outputs come in the wrong order: return (queries, keys, values).",
             "输出的顺序不对：请返回 (查询, 键, 值)。")
    if matches(q, X @ W_q) and matches(k, X @ W_q):
        fail("keys were computed with W_q: each of queries, keys and values uses its own matrix.",
             "键是用 W_q 计算的：查询、键、值各自使用自己的矩阵。")
    expect_close(q, X @ W_q, "Queries must be x @ W_q for every token of every batch item (row vectors times a (d_in, d_out) matrix).",
                 "查询必须是每个样本每个词元的 x @ W_q（行向量乘以 (d_in, d_out) 矩阵）。")
    expect_close(k, X @ W_k, "Keys must be x @ W_k.", "键必须是 x @ W_k。")
    expect_close(v, X @ W_v, "Values must be x @ W_v, whose width d_v may differ from d_k.",
                 "值必须是 x @ W_v，它的宽度 d_v 可以与 d_k 不同。")
    with own_work(project_qkv, "project_qkv"):
        same_as_reference(project_qkv, ref.project_qkv, FAMILIES["project_qkv"], "project_qkv", grads=True)





def _guard(cls, who):
    return own_work(cls, who,
                    en=f"{who} must compute attention itself: its rules say not allowed: F.scaled_dot_product_attention, nor the course's "
                       "code in utils (attend). Write softmax(Q K^T / sqrt(d_out)) V with @, transpose(-2, -1) and torch.softmax.",
                    zh=f"{who} 必须自己计算注意力：它的规则是不允许使用 F.scaled_dot_product_attention，也不能用 utils 中课程的代码（attend）。"
                       "请用 @、transpose(-2, -1) 和 torch.softmax 写出 softmax(Q K^T / sqrt(d_out)) V。")


def check_SelfAttentionV1(SelfAttentionV1):
    with _guard(SelfAttentionV1, "SelfAttentionV1"):
        module = own_module(SelfAttentionV1, D_IN, D_OUT)
    params = dict(module.named_parameters())
    weights = {}
    for i, name in enumerate(("W_query", "W_key", "W_value")):
        expect(name in params,
               f"{name} must be a registered nn.Parameter of the module, so that training updates it.",
               f"{name} 必须是模块中注册的 nn.Parameter，这样训练才能更新它。", f"parameters: {sorted(params)}")
        expect(tuple(params[name].shape) == (D_IN, D_OUT),
               f"{name} must have shape (d_in, d_out): V1 projects with x @ W, unlike nn.Linear's (d_out, d_in).",
               f"{name} 的形状必须是 (d_in, d_out)：V1 用 x @ W 做投影，与 nn.Linear 的 (d_out, d_in) 不同。",
               f"shape {tuple(params[name].shape)}")
        weights[name] = _weights(30 + i)
        with torch.no_grad():
            params[name].copy_(weights[name])
    with _guard(SelfAttentionV1, "SelfAttentionV1"):
        out = call(module, X, name="SelfAttentionV1.forward")
    q, k, v = X @ weights["W_query"], X @ weights["W_key"], X @ weights["W_value"]
    _expect_attention(out, q, k, v, "SelfAttentionV1", "SelfAttentionV1")
    with _guard(SelfAttentionV1, "SelfAttentionV1"):
        same_as_reference_module(SelfAttentionV1, ref.SelfAttentionV1, (D_IN, D_OUT), FAMILIES["SelfAttentionV1"],
                                 "SelfAttentionV1", grads=True)


def check_SelfAttentionV2(SelfAttentionV2):
    for bias in (False, True):
        with _guard(SelfAttentionV2, "SelfAttentionV2"):
            module = own_module(SelfAttentionV2, D_IN, D_OUT, qkv_bias=bias)
        layers = {}
        for i, name in enumerate(("W_query", "W_key", "W_value")):
            layer = expect_linear(module, name, D_IN, D_OUT, bias, "SelfAttentionV2")
            with torch.no_grad():
                layer.weight.copy_(_weights(40 + i).T)
                if bias:
                    layer.bias.copy_(torch.linspace(-0.5, 0.5, D_OUT) * (i + 1))
            layers[name] = layer
        with _guard(SelfAttentionV2, "SelfAttentionV2"):
            out = call(module, X, name="SelfAttentionV2.forward")
        with torch.no_grad():
            q, k, v = (layers[n](X) for n in ("W_query", "W_key", "W_value"))
        _expect_attention(out, q, k, v, "SelfAttentionV2", "SelfAttentionV2")
    # the pinned probes with biases (every bias's gradient too); the space's points set qkv_bias themselves
    with _guard(SelfAttentionV2, "SelfAttentionV2"):
        same_as_reference_module(SelfAttentionV2, ref.SelfAttentionV2, (D_IN, D_OUT), FAMILIES["SelfAttentionV2"],
                                 "SelfAttentionV2", grads=True, ctor_kwargs={"qkv_bias": True})


def check_copy_weights_v2_to_v1(copy_weights_v2_to_v1):
    for d_in, d_out in ((D_OUT, D_OUT), (D_IN, D_OUT)):  # square and non-square
        v1, v2 = ref.SelfAttentionV1(d_in, d_out), ref.SelfAttentionV2(d_in, d_out)
        with torch.no_grad():
            for i, name in enumerate(("W_query", "W_key", "W_value")):
                getattr(v1, name).fill_(0.5)
                getattr(v2, name).weight.copy_(_weights(50 + i, d_in, d_out).T)
        x = randn(2, 4, d_in, seed=55)
        with torch.no_grad():
            expected = v2(x)
        wanted = {name: getattr(v2, name).weight.detach().T.clone() for name in QKV}  # v2 as it was (a copy may not change it)
        with own_work(copy_weights_v2_to_v1, "copy_weights_v2_to_v1"):
            call(copy_weights_v2_to_v1, v1, v2, name="copy_weights_v2_to_v1")  # whatever it returns: the contract grades v1
        params = dict(v1.named_parameters())
        expect(not all(torch.equal(p.detach(), torch.full_like(p, 0.5)) for p in params.values()),
               "copy_weights_v2_to_v1 left v1 unchanged: copy v2's weights into v1 itself, in place (what the function returns is ignored).",
               "copy_weights_v2_to_v1 没有改变 v1：要把 v2 的权重原地复制到 v1 本身（函数的返回值会被忽略）。")
        expect(set(params) == {"W_query", "W_key", "W_value"},
               "After copying, v1 must still hold W_query, W_key and W_value as nn.Parameters.",
               "复制之后，v1 仍必须以 nn.Parameter 的形式持有 W_query、W_key 和 W_value。", f"parameters: {sorted(params)}")
        for name in ("W_query", "W_key", "W_value"):
            expect(tuple(params[name].shape) == (d_in, d_out),
                   f"v1.{name} must keep shape (d_in, d_out): nn.Linear stores (d_out, d_in), so copy its weight transposed (.T).",
                   f"v1.{name} 必须保持形状 (d_in, d_out)：nn.Linear 存储的是 (d_out, d_in)，所以要复制它的转置 (.T)。",
                   f"shape {tuple(params[name].shape)}")
            if not torch.allclose(params[name].detach(), wanted[name]):
                if d_in == d_out and torch.allclose(params[name].detach(), wanted[name].T):
                    fail(f"v1.{name} holds v2's weight without the transpose: nn.Linear computes x @ weight.T, so copy weight.T.",
                         f"v1.{name} 存的是未转置的 v2 权重：nn.Linear 计算的是 x @ weight.T，所以要复制 weight.T。")
                fail(f"v1.{name} must receive v2.{name}.weight.T: copy each projection into the one of the same name.",
                     f"v1.{name} 必须得到 v2.{name}.weight.T：把每个投影复制到同名的投影中。")
        with torch.no_grad():
            expect_close(v1(x), expected,
                         f"After copying, v1 must reproduce v2 exactly (d_in={d_in}, d_out={d_out}).",
                         f"复制之后，v1 必须精确复现 v2 的输出（d_in={d_in}，d_out={d_out}）。")
    with own_work(copy_weights_v2_to_v1, "copy_weights_v2_to_v1"):
        same_as_reference(copy_weights_v2_to_v1, ref.copy_weights_v2_to_v1, FAMILIES["copy_weights_v2_to_v1"],
                          "copy_weights_v2_to_v1", explain=_copy_explained, effect=_copied)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
