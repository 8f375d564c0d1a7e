"""Notebook 00's contracts and input families: texts to encode, ids and weights to embed."""
import torch

from autograder.checks import generator, randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Forbid, Raises
from autograder.checks.core.space import Space

_LOOKUP = ("it is the lookup this exercise builds; `nn.Embedding` calls it", "它就是本练习要构造的查表；`nn.Embedding` 也调用它")
CONTRACTS = rules.register("00", [
    Contract("encode", dtypes=(), dtype=("the result is a Python list of ints", "结果是由 int 组成的 Python 列表"), device="none",
             preconditions=(("the text holds no special token such as `<|endoftext|>`", "文本中不含 `<|endoftext|>` 这样的特殊词元"),)),
    Contract("embed", forbids=(Forbid("torch.nn.functional.embedding", *_LOOKUP),
                               Forbid("torch.embedding", "the same lookup under another name", "换了个名字的同一个查表")),
             raises=(Raises("IndexError", "an id is `vocab_size` or more (past the vocabulary)", "某个 id 大于等于 `vocab_size`（超出词表）"),),
             preconditions=(("the ids are a `torch.long` tensor with no negative id", "id 是不含负数的 `torch.long` 张量"),),
             dtypes=("float32", "float64", "bfloat16"),
             dtype=("the output has the weight's dtype", "输出与权重的 dtype 相同")),
])


# The input spaces --------------------------------------------------------------------------
_TEXTS = {  # value regimes of encode: what BPE does with each kind of text
    "words": "Your journey starts with one step, and attention follows it ",
    "whitespace": "  two  leading spaces,\ta tab\nand a newline \n\n ",
    "digits": "tokenization of 12345 and 3.14159 (or 2**10 = 1024)! ",
    "CJK": "注意力就是你所需要的。词元与嵌入，",
    "emoji and mixed": "line one 🙂 Ünïcödé ñ — «ok» 注意 ",
}
_LENGTHS = {"empty": 0, "one character": 1, "a sentence": 40, "2,000 characters": 2000}


def _text(point, seed):
    base = _TEXTS[point["values"]]
    start = int(torch.randint(len(base), (1,), generator=generator(seed)))  # another cut for every seed
    text = (base * (2 + _LENGTHS[point["shape"]] // len(base)))[start:start + _LENGTHS[point["shape"]]]
    return (text,), {}


# (ids shape, vocab_size, d): batch items that differ, V = d (a column lookup has the right shape), a vocabulary past any constant
_EMBED_SHAPES = {"T=1, V=2, d=1": ((1,), 2, 1), "T=5, V=11, d=4": ((5,), 11, 4), "B2,T4, V=7, d=7": ((2, 4), 7, 7),
                 "B2,H3,T4, V=300, d=3": ((2, 3, 4), 300, 3)}


def _embed(point, seed):
    shape, vocab, d = _EMBED_SHAPES[point["shape"]]
    ids = torch.randint(vocab, shape, generator=generator(seed))
    if point["values"] == "one id repeated":
        ids = torch.full(shape, int(ids.flatten()[0]))
    elif point["values"] == "first and last ids":
        ids = torch.where(torch.arange(ids.numel()).view(shape) % 2 == 0, 0, vocab - 1)
    bad = {"none": None, "id = vocab_size": vocab, "id far past": vocab + 1000}[point["bad"]]
    if bad is not None:
        ids = ids.clone()
        ids.view(-1)[-1] = bad  # the last position: a check of the first id only misses it
    return (ids, randn(vocab, d, seed=seed + 1)), {}


SPACES = {
    "encode": Space({"shape": tuple(_LENGTHS), "values": tuple(_TEXTS)}, _text,
                    valid=lambda p: p["shape"] != "empty" or p["values"] == "words"),
    "embed": Space({"shape": tuple(_EMBED_SHAPES), "values": ("random", "one id repeated", "first and last ids"),
                    "bad": ("none", "id = vocab_size", "id far past"), "dtype": CONTRACTS["embed"].dtypes,
                    "layout": ("contiguous", "column-major", "strided", "mixed")}, _embed),
}


def _ids(*rows):
    return torch.tensor(rows)


FAMILIES = {
    "encode": Family([
        Probe("edges", "one character", lambda: (("x",), {}), "一个字符"),
        Probe("extreme", "a long text of repeated words", lambda: (("attention " * 200,), {}), "由重复单词组成的长文本"),
        Probe("batch", "newlines, emoji and mixed scripts", lambda: (("line one\nline two 🙂 注意力 Ünïcödé",), {}),
              "换行、表情符号与混合文字"),
    ], compares=("values",), space=SPACES["encode"]),
    "embed": Family([
        Probe("batch", "two id sequences that differ", lambda: ((_ids([3, 0, 10, 3], [1, 9, 2, 5]), randn(11, 4, seed=1)), {}),
              "两个不同的 id 序列"),
        Probe("edges", "one id, the last of the vocabulary, repeated", lambda: ((_ids(10, 10), randn(11, 4, seed=2)), {}),
              "同一个 id（词表的最后一个）重复出现"),
        Probe("edges", "an id past the end of the vocabulary, an error", lambda: ((_ids([4, 11]), randn(11, 4, seed=5)), {}),
              "超出词表末尾的 id，应当报错"),
        Probe("dtype", "a float64 weight", lambda: ((_ids([4, 2]), randn(11, 4, seed=3).double()), {}), "float64 权重"),
        Probe("dtype", "a bfloat16 weight", lambda: ((_ids([4, 2]), randn(11, 4, seed=4).bfloat16()), {}), "bfloat16 权重"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads"), space=SPACES["embed"]),
}
