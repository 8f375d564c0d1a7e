"""Notebook 00's input families: texts to encode, ids and weights to embed."""
import torch

from autograder.checks import randn
from autograder.checks.harness import Family, Probe


def _ids(*rows):
    return torch.tensor(rows)


FAMILIES = {
    "encode": Family([
        Probe("edges", "one character", lambda: (("x",), {}), "一个字符"),
        Probe("extreme", "a long text of repeated words", lambda: (("attention " * 200,), {}), "由重复单词组成的长文本"),
        Probe("batch", "newlines, emoji and mixed scripts", lambda: (("line one\nline two 🙂 注意力 Ünïcödé",), {}),
              "换行、表情符号与混合文字"),
    ], compares=("values",)),
    "embed": Family([
        Probe("batch", "two id sequences that differ", lambda: ((_ids([3, 0, 10, 3], [1, 9, 2, 5]), randn(11, 4, seed=1)), {}),
              "两个不同的 id 序列"),
        Probe("edges", "one id, the last of the vocabulary, repeated", lambda: ((_ids(10, 10), randn(11, 4, seed=2)), {}),
              "同一个 id（词表的最后一个）重复出现"),
        Probe("edges", "an id past the end of the vocabulary, an error", lambda: ((_ids([4, 11]), randn(11, 4, seed=5)), {}),
              "超出词表末尾的 id，应当报错"),
        Probe("dtype", "a float64 weight", lambda: ((_ids([4, 2]), randn(11, 4, seed=3).double()), {}), "float64 权重"),
        Probe("dtype", "a bfloat16 weight", lambda: ((_ids([4, 2]), randn(11, 4, seed=4).bfloat16()), {}), "bfloat16 权重"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads")),
}
