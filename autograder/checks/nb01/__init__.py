"""Hidden checks of notebook 01, dot-product attention without trainable weights."""
import torch

import utils.attention as ref
from autograder.checks import graded_checks, BOOK_ATOL, call, expect, expect_close, expect_tensor, fail, own_work, randn
from autograder.checks.nb01.contract import CONTRACTS, FAMILIES
from autograder.checks.core.harness import same_as_reference
from utils.fixtures import journey_inputs

# Raschka, "Build a Large Language Model (From Scratch)", section 3.3, query "journey" (x[1]).
BOOK_SCORES = [0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]
BOOK_WEIGHTS = [0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]
BOOK_CONTEXT = [0.4419, 0.6515, 0.5683]

_SOFTMAX_OWN = ("softmax's rules say: not allowed: torch.softmax, F.softmax, Tensor.softmax, their log_softmax twins, nor the course's utils. "
                "Write it with exp, amax and sum.",
                "softmax 的规则是：不允许使用 torch.softmax、F.softmax、Tensor.softmax 及对应的 log_softmax，也不能用课程的 utils。"
                "请用 exp、amax 和 sum 自己写出它。")


def _own_work(fn, name, what_en, what_zh):
    """The exercise's utils twin, and what its contract forbids (rules.py), may not do the work."""
    sdpa = any(f.target.endswith("scaled_dot_product_attention") for f in CONTRACTS[name].forbids)
    return own_work(fn, name,
                    en=f"{what_en} must be computed by your own code, not by the course's utils.attention"
                       + (f" ({name}'s rules say: not allowed: F.scaled_dot_product_attention)." if sdpa else "."),
                    zh=f"{what_zh} 必须由你自己的代码计算，而不是调用课程的 utils.attention"
                       + (f"（{name} 的规则是：不允许使用 F.scaled_dot_product_attention）。" if sdpa else "。"))


def check_attention_scores(attention_scores):
    x = journey_inputs()
    with _own_work(attention_scores, "attention_scores", "The scores", "注意力分数"):
        book = call(attention_scores, x[1], x, name="attention_scores")
        inputs, query = randn(5, 7, seed=1), randn(7, seed=2)  # T != d
        scores = call(attention_scores, query, inputs, name="attention_scores")
    expect_tensor(book, "attention_scores' result", "attention_scores 的结果")
    expect(book.shape == (6,),
           "attention_scores must return one score per input token, shape (T,).",
           "attention_scores 必须为每个输入词元返回一个分数，形状为 (T,)。", f"shape {tuple(book.shape)}")
    if abs(float(book.sum()) - 1.0) < 1e-3:  # any dtype: a float64 result is named by the harness below
        fail("attention_scores returned normalized weights: scores are the raw dot products, the softmax comes later.",
             "attention_scores 返回了归一化后的权重：分数是原始点积，softmax 在之后才做。")
    expect_close(book, BOOK_SCORES,
                 "The scores for the query 'journey' differ from the book's: score j is the dot product of the query with input j.",
                 "查询 'journey' 的分数与书中的不同：第 j 个分数是查询与第 j 个输入的点积。", atol=BOOK_ATOL)
    expect_close(scores, ref.attention_scores(query, inputs),
                 "With 5 tokens of width 7, your scores are wrong: take the dot product along the feature axis (d), once per token.",
                 "当有 5 个宽度为 7 的词元时，你的分数不对：应沿特征维 (d) 做点积，每个词元一次。")
    with _own_work(attention_scores, "attention_scores", "The scores", "注意力分数"):
        same_as_reference(attention_scores, ref.attention_scores, FAMILIES["attention_scores"], "attention_scores", grads=True)


def check_softmax(softmax):
    with own_work(softmax, "softmax", en=_SOFTMAX_OWN[0], zh=_SOFTMAX_OWN[1]):
        book = call(softmax, torch.tensor(BOOK_SCORES), inputs_named=True, name="softmax")
        big = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -999.0, -998.0]])
        big_copy = big.clone()
        stable = call(softmax, big, inputs_named=True, name="softmax")
        grid = randn(3, 5, seed=3)
        by_row = call(softmax, grid, dim=-1, inputs_named=True, name="softmax")
        by_col = call(softmax, grid, dim=0, inputs_named=True, name="softmax")
        batched = randn(2, 4, 3, seed=4) * 3
        middle = call(softmax, batched, dim=1, inputs_named=True, name="softmax")
        masked = torch.tensor([[0.5, float("-inf"), 1.5, float("-inf")], [2.0, 1.0, float("-inf"), 0.0]])
        with_inf = call(softmax, masked, inputs_named=True, name="softmax")
    expect_close(book, BOOK_WEIGHTS,
                 "softmax of the book's scores gives the wrong weights: each weight is exp(score) divided by the sum of all exp(scores).",
                 "对书中分数做 softmax 得到的权重不对：每个权重等于 exp(分数) 除以所有 exp(分数) 之和。", atol=BOOK_ATOL)
    expect(torch.equal(big, big_copy),
           "softmax changed its input in place: compute on a new tensor so the caller's scores stay intact.",
           "softmax 原地修改了输入：请在新的张量上计算，保持调用者的分数不变。")
    row = [0.0900306, 0.2447285, 0.6652410]
    if not torch.isfinite(stable).all():
        fail("softmax gives NaN or inf on large inputs such as [1000, 1001, 1002]: subtract each slice's own maximum before exp (a global maximum underflows the other rows).",
             "softmax 在 [1000, 1001, 1002] 这样的大输入上得到 NaN 或 inf：在 exp 之前减去每个切片自己的最大值（全局最大值会让其他行下溢）。",
             f"got {stable.tolist()}")
    expect_close(stable, torch.tensor([row, row]),
                 "softmax must not change when every entry of a row is shifted by the same amount: subtract each row's own maximum.",
                 "同一行的所有元素加上同一个数，softmax 不应改变：请减去每行自己的最大值。")
    expect_close(by_row.sum(-1), torch.ones(3),
                 "With dim=-1 each row of the output must sum to 1: normalize along the dim you are given.",
                 "当 dim=-1 时，输出的每一行之和必须为 1：沿给定的 dim 归一化。")
    expect_close(by_col, ref.softmax(grid, dim=0),
                 "softmax ignores its dim argument: with dim=0 each column must sum to 1.",
                 "softmax 忽略了参数 dim：当 dim=0 时，每一列之和必须为 1。")
    expect_close(middle, ref.softmax(batched, dim=1),
                 "softmax is wrong on a 3-d tensor with dim=1: keep the reduced dimension (keepdim=True) so the max and the sum broadcast back.",
                 "在三维张量上取 dim=1 时 softmax 出错：保留被归约的维度 (keepdim=True)，使最大值与和能正确广播。")
    expect(not torch.isnan(with_inf).any(),
           "softmax turns -inf entries into NaN: exp(-inf) is 0, so a -inf score must simply get weight 0.",
           "softmax 把 -inf 变成了 NaN：exp(-inf) 等于 0，所以 -inf 的分数应该直接得到权重 0。")
    expect_close(with_inf, ref.softmax(masked),
                 "-inf entries must get weight exactly 0 and the other entries must still sum to 1.",
                 "-inf 的位置必须得到恰好为 0 的权重，其余位置之和仍须为 1。")
    with own_work(softmax, "softmax", en=_SOFTMAX_OWN[0], zh=_SOFTMAX_OWN[1]):
        same_as_reference(softmax, ref.softmax, FAMILIES["softmax"], "softmax", grads=True)


def check_context_vector(context_vector):
    x = journey_inputs()
    with _own_work(context_vector, "context_vector", "The context vector", "上下文向量"):
        book = call(context_vector, x[1], x, name="context_vector")
        inputs, query = randn(5, 7, seed=5), randn(7, seed=6)
        other = call(context_vector, query, inputs, name="context_vector")
    expect_tensor(book, "context_vector's result", "context_vector 的结果")
    expect(book.shape == (3,),
           "context_vector must return one vector of the inputs' width d, shape (d,): it is a weighted sum of the input rows.",
           "context_vector 必须返回一个宽度为 d 的向量，形状 (d,)：它是输入各行的加权和。", f"shape {tuple(book.shape)}")
    unnormalized = ref.attention_scores(x[1], x) @ x
    if torch.allclose(book, unnormalized, atol=1e-4):
        fail("context_vector weights the inputs by the raw scores: turn the scores into weights with softmax first.",
             "context_vector 用原始分数对输入加权：请先用 softmax 把分数变成权重。")
    expect_close(book, BOOK_CONTEXT,
                 "The context vector of 'journey' differs from the book's: it is the softmax weights times the input rows, summed.",
                 "'journey' 的上下文向量与书中的不同：它是 softmax 权重乘以输入各行后求和。", atol=BOOK_ATOL)
    expect_close(other, ref.context_vector(query, inputs),
                 "With 5 tokens of width 7 the context vector is wrong: weight each input row (not the query) by its attention weight.",
                 "当有 5 个宽度为 7 的词元时上下文向量不对：应按注意力权重对每个输入行（而不是查询）加权。")
    with _own_work(context_vector, "context_vector", "The context vector", "上下文向量"):
        same_as_reference(context_vector, ref.context_vector, FAMILIES["context_vector"], "context_vector", grads=True)


def check_self_attention_weights(self_attention_weights):
    x = journey_inputs()
    batch = randn(2, 5, 4, seed=7)  # items differ, T != d
    deep = randn(2, 3, 4, 6, seed=8)
    with _own_work(self_attention_weights, "self_attention_weights", "The attention weights", "注意力权重"):
        book = call(self_attention_weights, x, name="self_attention_weights")
        batched = call(self_attention_weights, batch, name="self_attention_weights")
        four_d = call(self_attention_weights, deep, name="self_attention_weights")
    expect_tensor(book, "self_attention_weights' result", "self_attention_weights 的结果")
    expect(book.shape == (6, 6),
           "self_attention_weights of T tokens must be a (T, T) matrix: X @ X^T, not X^T @ X.",
           "T 个词元的 self_attention_weights 必须是 (T, T) 矩阵：X @ X^T，而不是 X^T @ X。", f"shape {tuple(book.shape)}")
    expect_close(book.sum(-1), torch.ones(6),
                 "Every row of the attention weights must sum to 1: apply the softmax along the last dim (over keys).",
                 "注意力权重的每一行之和必须为 1：沿最后一维（即对键）做 softmax。")
    expect_close(book[1], BOOK_WEIGHTS,
                 "Row 1 (query 'journey') must equal the book's weights: row i is softmax of query i's dot products with all inputs.",
                 "第 1 行（查询 'journey'）必须与书中的权重相同：第 i 行是查询 i 与所有输入点积的 softmax。", atol=BOOK_ATOL)
    expect(batched.shape == (2, 5, 5),
           "For a batch (B, T, d) the weights must be (B, T, T): transpose only the last two dims (transpose(-2, -1), not .T).",
           "对于一批 (B, T, d) 输入，权重必须是 (B, T, T)：只转置最后两维（用 transpose(-2, -1)，而不是 .T）。",
           f"shape {tuple(batched.shape)}")
    expect_close(batched, ref.self_attention_weights(batch),
                 "Batched weights are wrong: each item of the batch must attend only within itself (transpose(-2, -1), then softmax over the last dim).",
                 "批量权重不对：批中的每个样本只能在自身内部做注意力（先 transpose(-2, -1)，再对最后一维 softmax）。")
    expect_close(four_d, ref.self_attention_weights(deep),
                 "With two leading batch dims (B, H, T, d) the weights are wrong: write the function for any leading dims.",
                 "当有两个前导批维 (B, H, T, d) 时权重不对：请让函数适用于任意前导维度。")
    with _own_work(self_attention_weights, "self_attention_weights", "The attention weights", "注意力权重"):
        same_as_reference(self_attention_weights, ref.self_attention_weights, FAMILIES["self_attention_weights"],
                          "self_attention_weights", grads=True)


def check_self_attention(self_attention):
    x = journey_inputs()
    batch = randn(2, 5, 4, seed=9)
    with _own_work(self_attention, "self_attention", "The context vectors", "上下文向量"):
        book = call(self_attention, x, name="self_attention")
        batched = call(self_attention, batch, name="self_attention")
    expect_tensor(book, "self_attention's result", "self_attention 的结果")
    expect(book.shape == (6, 3),
           "self_attention must return one context vector per token, shape (T, d): weights (T, T) @ inputs (T, d).",
           "self_attention 必须为每个词元返回一个上下文向量，形状 (T, d)：权重 (T, T) @ 输入 (T, d)。",
           f"shape {tuple(book.shape)}")
    if torch.allclose(book, ref.self_attention_weights(x).transpose(-2, -1) @ x, atol=1e-4):
        fail("self_attention used the transposed weights: row i of the weights (query i) must mix the inputs for token i.",
             "self_attention 使用了转置后的权重：权重的第 i 行（查询 i）应当为词元 i 混合输入。")
    expect_close(book[1], BOOK_CONTEXT,
                 "Row 1 must be the book's context vector for 'journey': multiply the attention weights by the inputs.",
                 "第 1 行必须是书中 'journey' 的上下文向量：用注意力权重乘以输入。", atol=BOOK_ATOL)
    expect_close(book, ref.self_attention(x),
                 "The context vectors are wrong: compute softmax(X X^T) row-wise, then multiply by X.",
                 "上下文向量不对：先按行计算 softmax(X X^T)，再乘以 X。")
    expect_close(batched, ref.self_attention(batch),
                 "Batched context vectors are wrong: every batch item must use only its own weights and inputs.",
                 "批量上下文向量不对：批中每个样本只能使用它自己的权重和输入。")
    with _own_work(self_attention, "self_attention", "The context vectors", "上下文向量"):
        same_as_reference(self_attention, ref.self_attention, FAMILIES["self_attention"], "self_attention", grads=True)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
