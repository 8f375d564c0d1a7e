"""Notebook 03's scaled dot-product attention: its (context, weights) pair read with the shapes
checked, and the weights that each known mistake computes, so that a wrong answer can be named."""
import math

import torch

from autograder.checks import expect, expect_tensor, fail


def _weights(scores, mask=None):
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _pair(result, q_shape, k_shape, v_shape):
    """The (context, weights) pair, with the shapes checked and a swapped order named."""
    expect(isinstance(result, tuple) and len(result) == 2,
           "scaled_dot_product_attention must return a pair (context, weights).",
           "scaled_dot_product_attention 必须返回一对 (context, weights)。",
           f"got {type(result).__name__}")
    context, weights = result
    expect_tensor(context, "The context", "上下文")
    expect_tensor(weights, "The weights", "注意力权重")
    # torch.empty(...).shape broadcasts like torch.broadcast_shapes, without its first call's
    # import of sympy (0.7 s of grading).
    lead = (torch.empty(*q_shape[:-2], 1, 1) + torch.empty(*k_shape[:-2], 1, 1)).shape[:-2]
    want_context, want_weights = (*lead, q_shape[-2], v_shape[-1]), (*lead, q_shape[-2], k_shape[-2])
    if tuple(context.shape) == want_weights and tuple(weights.shape) == want_context:
        fail("You returned (weights, context): return (context, weights), the context vectors first.",
             "你返回了 (weights, context)：应返回 (context, weights)，上下文向量在前。",
             f"first {tuple(context.shape)}, second {tuple(weights.shape)}")
    expect(tuple(weights.shape) == want_weights,
           "The weights must have shape (..., T_q, T_k): one row per query, one column per key (q @ k.transpose(-2, -1)).",
           "权重的形状必须是 (..., T_q, T_k)：每个查询一行，每个键一列 (q @ k.transpose(-2, -1))。",
           f"shape {tuple(weights.shape)}, expected {want_weights}")
    expect(tuple(context.shape) == want_context,
           "The context must have shape (..., T_q, d_v): the weights (..., T_q, T_k) times v (..., T_k, d_v).",
           "上下文的形状必须是 (..., T_q, d_v)：权重 (..., T_q, T_k) 乘以 v (..., T_k, d_v)。",
           f"shape {tuple(context.shape)}, expected {want_context}")
    return context.detach(), weights.detach()


def _named_mistakes(weights, q, k, d_v, mask=None):
    """Fail with the mistake's name when the weights equal a known wrong computation."""
    d_k = q.shape[-1]
    raw = q @ k.transpose(-2, -1)
    right = _weights(raw / math.sqrt(d_k), mask)
    if torch.allclose(weights, right, atol=1e-5, rtol=1e-4):
        return
    blocked = torch.zeros_like(raw, dtype=torch.bool) if mask is None else mask.expand_as(raw)
    candidates = [
        (_weights(raw / d_k, mask), "The scores were divided by d_k instead of sqrt(d_k): the spread of q·k grows like sqrt(d_k), its variance like d_k.",
         "分数被除以了 d_k 而不是 sqrt(d_k)：q·k 的标准差按 sqrt(d_k) 增长，方差按 d_k 增长。"),
        (_weights(raw / math.sqrt(d_v), mask), "The scores were divided by sqrt(d_v), the width of the values: divide by sqrt(d_k), the width of the vectors in the dot product.",
         "分数被除以了 sqrt(d_v)，即值向量的宽度：应除以 sqrt(d_k)，即参与点积的向量的宽度。"),
        (_weights(raw, mask) / math.sqrt(d_k), "The weights were divided by sqrt(d_k) after the softmax: scale the scores before the softmax, so every row still sums to 1.",
         "权重在 softmax 之后才除以 sqrt(d_k)：应在 softmax 之前缩放分数，这样每一行之和仍为 1。"),
        (_weights(raw, mask), "The scores were not scaled: multiply q kᵀ by scale (default 1 / sqrt(d_k)) before the softmax.",
         "分数没有缩放：在 softmax 之前把 q kᵀ 乘以 scale（默认 1 / sqrt(d_k)）。"),
        (torch.softmax((raw / math.sqrt(d_k)).masked_fill(blocked, float("-inf")), dim=-2),
         "The softmax ran over the queries (dim=-2): each query's row must sum to 1, so normalize over the keys with dim=-1.",
         "softmax 作用在查询维 (dim=-2) 上：每个查询的那一行之和必须为 1，所以应该用 dim=-1 对键归一化。"),
        (torch.softmax(raw / math.sqrt(d_k), dim=-1).masked_fill(blocked, 0.0),
         "The weights of blocked keys were set to 0 after the softmax, so rows no longer sum to 1: fill the blocked scores with -inf before the softmax.",
         "被屏蔽的键的权重在 softmax 之后才置为 0，导致每行之和不再为 1：应在 softmax 之前把被屏蔽的分数填为 -inf。"),
    ]
    if mask is not None:
        candidates.append((_weights(raw / math.sqrt(d_k), ~mask),
                           "Your mask lets through exactly the blocked keys: True means BLOCKED, use scores.masked_fill(mask, float('-inf')), not ~mask.",
                           "你的掩码恰好放行了被屏蔽的键：True 表示屏蔽，请使用 scores.masked_fill(mask, float('-inf'))，而不是 ~mask。"))
    for wrong, en, zh in candidates:
        if wrong.shape == weights.shape and torch.allclose(weights, wrong, atol=1e-5, rtol=1e-4, equal_nan=True):
            fail(en, zh)
