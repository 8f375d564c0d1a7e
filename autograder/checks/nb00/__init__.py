"""Hidden checks of notebook 00, tokens and embeddings."""
import torch

import utils.embeddings
import utils.tokenizer
from autograder.checks import graded_checks, call, expect, expect_close, expect_tensor, fail, own_work, randn
from autograder.checks.nb00.contract import FAMILIES
from autograder.checks.core.harness import same_as_reference

# Strings whose GPT-2 ids show what BPE does: merges, leading spaces, digits, bytes of CJK.
ENCODE_CASES = [
    "Hello, world",
    "Your journey starts with one step",
    "  two leading spaces and a tab\t",
    "tokenization of 12345 and 3.14159",
    "注意力就是你所需要的",
    "Akwirw ier",
    "",
]


def check_encode(encode):
    with own_work(encode, "encode", en="encode must call the tokenizer object itself, not utils.tokenizer.encode, which this exercise asks you to write.",
                  zh="encode 必须直接调用分词器对象，而不是 utils.tokenizer.encode——本练习要求你自己写出它。"):
        results = [call(encode, text, name="encode") for text in ENCODE_CASES]
    for text, ids in zip(ENCODE_CASES, results):
        expect(isinstance(ids, list),
               f"encode should return a plain Python list of ints, not {type(ids).__name__}.",
               f"encode 应返回由 int 组成的 Python 列表，而不是 {type(ids).__name__}。")
        expect(all(type(i) is int for i in ids),
               "encode should return token ids as ints, not strings or tensors.",
               "encode 应返回整数形式的词元 id，而不是字符串或张量。",
               f"first items: {ids[:3]!r}")
        expected = utils.tokenizer.gpt2_encoding().encode(text)
        if ids == expected:
            continue
        if ids == [ord(c) for c in text] or ids == list(text.encode("utf-8")):
            fail("encode returned one id per character or byte: GPT-2 merges frequent byte pairs, so use its BPE tokenizer.",
                 "encode 为每个字符或字节返回了一个 id：GPT-2 会合并常见的字节对，请使用它的 BPE 分词器。",
                 f"{text!r}")
        if ids[-1:] == [50256] and ids[:-1] == expected:
            fail("encode appended <|endoftext|> (50256): return only the ids of the text itself.",
                 "encode 末尾多加了 <|endoftext|> (50256)：只返回文本本身的 id。", f"{text!r}")
        fail(f"encode({text!r}) gave different ids from GPT-2's tokenizer: keep spaces and case as they are, and encode the whole text at once.",
             f"encode({text!r}) 的结果与 GPT-2 分词器不同：保留原有的空格和大小写，并一次性编码整段文本。",
             f"got {ids[:8]}, expected {expected[:8]}")
    with own_work(encode, "encode"):
        same_as_reference(encode, utils.tokenizer.encode, FAMILIES["encode"], "encode")


def check_embed(embed):
    vocab, d = 11, 4  # vocab != d, so a column lookup or a missing transpose shows
    weight = randn(vocab, d, seed=0).requires_grad_()
    first = torch.tensor([3, 0, 2, 3, 1])  # ids < d: a column lookup runs, and shows itself by its shape
    ids = torch.tensor([[3, 0, 10, 3, 7], [1, 1, 9, 2, 5]])
    def own_lookup():
        return own_work(embed, "embed",
                        en="embed's rules say: not allowed: F.embedding (nn.Embedding calls it), nor the course's utils. "
                           "Pick the rows yourself: weight[token_ids], or a one-hot product.",
                        zh="embed 的规则是：不允许使用 F.embedding（nn.Embedding 也调用它），也不能用课程的 utils。"
                           "请自己选取行：weight[token_ids]，或 one-hot 乘积。")
    with own_lookup():
        single = call(embed, first, weight, name="embed")
    expect_tensor(single, "embed's output", "embed 的输出")
    expect(tuple(single.shape) == (5, d),
           "embed of T ids with a (vocab, d) weight must give (T, d): pick rows of the weight, not columns.",
           "对 T 个 id 使用 (vocab, d) 的权重，embed 应得到 (T, d)：取权重的行，而不是列。",
           f"shape {tuple(single.shape)}, expected (5, {d})")
    expect_close(single, weight.detach()[first],
                 "Row t of embed's output must be row ids[t] of the weight matrix.",
                 "embed 输出的第 t 行必须是权重矩阵的第 ids[t] 行。")
    with own_lookup():
        batched = call(embed, ids, weight, name="embed")
    expect_close(batched, weight.detach()[ids],
                 "embed must accept a batch of id sequences (B, T) and return (B, T, d).",
                 "embed 必须接受一批 id 序列 (B, T) 并返回 (B, T, d)。")
    expect(batched.dtype == weight.dtype,
           "embed must keep the weight's dtype: a lookup does not convert numbers.",
           "embed 必须保持权重的 dtype：查表不会转换数值类型。", f"got {batched.dtype}")
    expect(batched.requires_grad,
           "embed's output lost the gradient: build it from tensor operations so the weight can learn.",
           "embed 的输出丢失了梯度：请用张量运算构造它，这样权重才能被训练。")
    with own_lookup():
        same_as_reference(embed, utils.embeddings.embed, FAMILIES["embed"], "embed", grads=True)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
