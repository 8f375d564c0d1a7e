# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Tokens and embeddings · 词元与嵌入
#
# Welcome to **Attention, from the dot product to DeepSeek**. Every notebook of this course is a short
# story told in small cells: a little prose, a little code, a picture, a check. This first one does
# two things: it shows how the course works, and it turns text into the vectors that every later
# notebook feeds to attention.
#
# 欢迎来到 **注意力：从点积到 DeepSeek**。本课程的每个笔记本都是一个由小单元格讲述的短故事：一点文字、一点代码、一张图、一个检查。
# 第一个笔记本做两件事：介绍课程的使用方式，并把文本变成之后每个笔记本都要送入注意力机制的向量。

# %% [markdown]
# ## How the course works · 课程如何进行
#
# - **Run a cell** with `Shift+Enter`. Run the cells from the top: later cells use what earlier ones define.
# - **Exercises** are code cells that contain `raise NotImplementedError()`. Replace that line with your
#   code and keep the `def` line as it is: the graders call the function by its name.
# - Each exercise is followed by a **visible test cell**. Run it: silence or a ✓ means it passed, and an
#   `AssertionError` says in one sentence what is wrong. Test cells are locked.
# - **Hidden tests** check more cases (other shapes, large values, edge cases) when your notebook is graded.
# - **Your own work, and what you may reuse.** Each exercise has a reference implementation in the
#   course's `utils/` folder. Handing that in is the one shortcut the graders refuse: calling it,
#   importing it under another name, wrapping it (`functools.partial`, a lambda, a decorator) or
#   subclassing it, and the feedback names what was handed in. Reusing what an *earlier* notebook
#   built is fine: in notebook 04 you may extend notebook 02's `SelfAttentionV2` by subclassing it and
#   writing your own `forward`, in 05 notebook 04's `CausalSelfAttention`, in 07 notebook 06's
#   `MultiHeadAttention`. Where a library function would do an exercise's whole job (`torch.softmax`
#   in notebook 01), the exercise says so; where it would not (`F.scaled_dot_product_attention` in
#   notebook 07, which teaches the cache, not the softmax), it is allowed.
# - The **Validate** button in the toolbar runs the whole notebook and all visible tests.
# - To get a grade, run `make submit NB=course/00_tokens_and_embeddings.ipynb` in a terminal, in the
#   course's top folder (the one with the `Makefile`; JupyterLab's File → New → Terminal opens in
#   `course/`, so type `cd ..` first). You get a score per exercise, a reason for every lost point,
#   and an HTML feedback file. Your notebook is only read, never changed.
#
# - 用 `Shift+Enter` **运行单元格**。请从上往下运行：后面的单元格会用到前面定义的内容。
# - **练习** 是包含 `raise NotImplementedError()` 的代码单元格。把这一行换成你的代码，并保持 `def` 这一行不变：评分程序按名字调用你的函数。
# - 每个练习后面都有一个 **可见测试单元格**。运行它：没有报错或显示 ✓ 表示通过；`AssertionError` 会用一句话说明哪里错了。测试单元格是锁定的。
# - 评分时，**隐藏测试** 会检查更多情况（其他形状、很大的数值、边界情况）。
# - **自己的工作，以及可以复用的东西。** 每个练习在课程的 `utils/` 文件夹里都有一个参考实现。把它交上来是评分程序唯一拒绝的捷径：调用它、换个名字导入它、包装它（`functools.partial`、lambda、装饰器）或者继承它，反馈都会指出交上来的是什么。复用 *之前* 笔记本已经构建的东西是可以的：在笔记本 04 中，你可以通过继承并编写自己的 `forward` 来扩展笔记本 02 的 `SelfAttentionV2`，在 05 中扩展笔记本 04 的 `CausalSelfAttention`，在 07 中扩展笔记本 06 的 `MultiHeadAttention`。如果某个库函数会完成练习的全部工作（笔记本 01 中的 `torch.softmax`），练习会说明不能用；如果不会（笔记本 07 中的 `F.scaled_dot_product_attention`，它教的是缓存，而不是 softmax），就可以用。
# - 工具栏中的 **Validate** 按钮会运行整个笔记本和所有可见测试。
# - 想要得到分数，在终端中、于课程的顶层目录（有 `Makefile` 的那个目录；JupyterLab 的 File → New → Terminal 打开在 `course/` 中，所以先输入 `cd ..`）运行 `make submit NB=course/00_tokens_and_embeddings.ipynb`。你会看到每个练习的得分、每个失分的原因，以及一个 HTML 反馈文件。你的笔记本只会被读取，不会被修改。

# %% [markdown]
# ### How grading works · 评分如何进行
#
# Every exercise ends with a **Rules** block: what grading checks for that exercise beyond "the same
# numbers as the course's reference" (a library call that is not allowed, an input that must raise,
# the dtypes graded). A rule that can cost a mark is written there or below, and nowhere else. A
# failing check quotes the rule it applies and says how to comply. The rules below hold for every
# exercise.
#
# 每个练习的最后都有一个 **规则（Rules）** 区块：除了“与课程参考实现的结果相同”之外，评分对这个练习还检查什么（不允许使用的库函数、
# 必须报错的输入、评分所用的 dtype）。会扣分的规则只写在那里或下面，不会写在别处。未通过的检查会引用它所依据的规则，并说明如何满足它。
# 下面的规则对每个练习都成立。
#
# <!-- rules: general -->
#
# - **Same numbers as the course's.** Your code runs beside the course's reference on a family of inputs (sizes, values, dtypes, layouts and flags the exercise allows); outputs, shapes, dtypes and every gradient are compared.
# - **Inputs unchanged.** Do not change an argument in place (`x /= s`, `x.add_(...)`), unless the exercise's rules say it does; a module argument keeps its `train()`/`eval()` mode.
# - **Device.** Outputs stay on the inputs' device, and a tensor you create is made there: `torch.arange(T, device=x.device)`, `torch.ones(T, T, dtype=torch.bool, device=x.device)`. Grading runs your code with inputs that report a GPU, so a tensor left on the CPU shows.
# - **dtype and precision.** The output has the input's dtype unless the exercise says otherwise. float32 is the precision graded: a float64 input is graded at float32's tolerance (computing in float32 and casting back is fine), a bfloat16 input at bfloat16's; the dtypes graded are the ones the exercise's rules list.
# - **New results, no memory of earlier calls.** Every call returns new tensors (no cache of results), an output does not share memory with an input unless the course's does (a copy is a copy), and a module called twice answers the second call as if the first had not happened, unless keeping something is its job (a cache).
# - **Bad input.** Where an exercise's rules say it raises an error, it must raise that error; what they call a precondition is never graded.
# - **Your own work.** Handing in the course's reference from `utils/` is refused (an alias, a wrapper or a subclass of it too); a library function is allowed unless the exercise's rules name it. Reusing a class of an earlier notebook is fine.
# - **A mistake costs marks once.** While an exercise is graded, the earlier exercises of its notebook that it calls are the course's versions, visible tests included, unless its rules say it calls your own.
#
# - **与课程的结果相同。** 你的代码与课程的参考实现在一族输入上并排运行（练习允许的大小、数值、dtype、内存布局和选项）；比较输出、形状、dtype 以及每一个梯度。
# - **输入保持不变。** 不要原地修改参数（`x /= s`、`x.add_(...)`），除非练习的规则说明它会这样做；模块参数保持它的 `train()`/`eval()` 模式。
# - **设备。** 输出留在输入所在的设备上，你新建的张量也要建在那里：`torch.arange(T, device=x.device)`、`torch.ones(T, T, dtype=torch.bool, device=x.device)`。评分时你的代码会在报告自己位于 GPU 上的输入上运行，所以留在 CPU 上的张量会被发现。
# - **dtype 与精度。** 除非练习另有说明，输出与输入的 dtype 相同。评分的精度是 float32：float64 输入按 float32 的容差评分（用 float32 计算再转换回来是可以的），bfloat16 输入按 bfloat16 的容差评分；评分所用的 dtype 就是练习规则中列出的那些。
# - **新的结果，不记得之前的调用。** 每次调用返回新的张量（不缓存结果）；除非课程的实现如此，输出不与输入共享内存（复制就是复制）；模块被调用两次时，第二次的回答与第一次调用没有发生过一样，除非保存东西正是它的任务（缓存）。
# - **错误的输入。** 练习的规则说明会抛出某个错误时，必须抛出那个错误；规则中称为前提条件的情况不会被评分。
# - **自己的工作。** 交上 `utils/` 中课程的参考实现会被拒绝（它的别名、包装或子类也一样）；库函数都可以用，除非练习的规则点名不允许。复用之前笔记本中的类是可以的。
# - **一个错误只扣一次分。** 评某个练习时，它调用的本笔记本中较早的练习会换成课程的版本（可见测试也一样），除非它的规则说明调用的是你自己的。
#
# <!-- /rules -->

# %%
import torch
import matplotlib.pyplot as plt

from utils.tokenizer import gpt2_encoding

print("torch", torch.__version__)

# %% [markdown]
# ## From text to token ids · 从文本到词元 id
#
# A language model never sees letters. It sees **token ids**: integers that each stand for a piece of
# text. GPT-2 uses *byte-pair encoding* (BPE): start from the 256 possible bytes and repeatedly merge
# the most frequent adjacent pair into a new token, 50,000 times. Frequent words become one token;
# rare words are spelled with several pieces; no text is ever out of vocabulary, because any byte is
# a token.
#
# 语言模型从来看不到字母，它看到的是 **词元 id**：每个整数代表一段文本。GPT-2 使用 *字节对编码*（BPE）：从 256 个可能的字节出发，反复把最常见的相邻字节对合并成一个新词元，共合并 50,000 次。常见的词成为一个词元；罕见的词由几个片段拼出；任何文本都不会超出词表，因为每个字节本身就是一个词元。
#
# The course ships GPT-2's vocabulary files and checks them by sha256, so the tokenizer works offline.
#
# 本课程自带 GPT-2 的词表文件并用 sha256 校验，因此分词器可以离线工作。

# %%
tokenizer = gpt2_encoding()
print("vocabulary size:", tokenizer.n_vocab)
sentence = "Your journey starts with one step"
ids = tokenizer.encode(sentence)
print(ids)
print([tokenizer.decode([i]) for i in ids])


# %% [markdown]
# Notice the spaces: GPT-2 keeps a word's leading space inside its token (`' journey'`), so the text
# can be rebuilt exactly from the pieces.
#
# 注意空格：GPT-2 把单词前面的空格保留在词元里（`' journey'`），因此可以从这些片段精确地还原文本。

# %% [markdown]
# ### Exercise 1 · `encode` · 练习 1
#
# Write `encode(text)` that returns the GPT-2 token ids of `text` as a Python list of ints, using the
# `tokenizer` object above (its `.encode` method). Keep the text as it is: no lower-casing, no
# stripping, no extra end-of-text token.
#
# 编写 `encode(text)`：用上面的 `tokenizer` 对象（它的 `.encode` 方法）返回 `text` 的 GPT-2 词元 id，类型为由 int 组成的 Python 列表。保持文本原样：不转小写、不去空格、不额外添加文本结束词元。
#
# <!-- rules: encode -->
#
# #### Rules that grading checks · 评分检查的规则 (`encode`)
#
# - Not graded (the caller guarantees it): the text holds no special token such as `<|endoftext|>`.
# - dtype: the result is a Python list of ints.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：文本中不含 `<|endoftext|>` 这样的特殊词元。
# - dtype：结果是由 int 组成的 Python 列表。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "encode", "locked": false, "schema_version": 3, "solution": true, "task": false}
def encode(text: str) -> list[int]:
    """GPT-2 BPE token ids of `text`."""
    ### BEGIN SOLUTION
    return tokenizer.encode(text)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_encode", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

ids = encode("Hello, world")
expect(ids == [15496, 11, 995], f"encode('Hello, world') should be [15496, 11, 995], got {ids}: use GPT-2's BPE tokenizer.",
       f"encode('Hello, world') 应为 [15496, 11, 995]，实际为 {ids}：请使用 GPT-2 的 BPE 分词器。")
print("✓ encode")

# %% nbgrader={"grade": true, "grade_id": "test_encode_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb00
nb00.check_encode(encode)
### END HIDDEN TESTS

# %% [markdown]
# ### What BPE does with words it has never seen · BPE 如何处理没见过的词
#
# A made-up word is cut into known pieces, and decoding the ids gives back the exact text. Chinese
# characters often need more than one token each (the cell counts them), because GPT-2 learned its
# merges mostly on English text.
#
# 一个编造的词会被切成已知的片段，把 id 解码又能精确还原原文。中文字符常常每个需要不止一个词元（下面的单元格会数出来），因为 GPT-2 主要是在英文文本上学习合并规则的。

# %%
for text in ["Akwirw ier", "unbelievable", "注意力机制"]:
    ids = encode(text)
    pieces = [tokenizer.decode_single_token_bytes(i) for i in ids]
    print(f"{text!r}: {len(text)} characters -> {len(ids)} tokens {ids}")
    print("   pieces (bytes):", pieces)
    assert tokenizer.decode(ids) == text

# %% [markdown]
# ## From token ids to vectors · 从词元 id 到向量
#
# Attention works on vectors, so every id is turned into a row of a **weight matrix** `W` of shape
# `(vocab_size, d)`: token `i` becomes `W[i]`. That is all an embedding layer does. The rows start
# random and are learned during training, so tokens used alike end up with similar vectors.
#
# 注意力作用于向量，所以每个 id 都被换成一个 **权重矩阵** `W`（形状为 `(vocab_size, d)`）的一行：词元 `i` 变成 `W[i]`。嵌入层做的就只是这件事。这些行一开始是随机的，在训练中被学习，于是用法相近的词元会得到相近的向量。
#
# Looking up row `i` is the same as multiplying the one-hot vector of `i` by `W`: an embedding is a
# linear layer whose input happens to be one-hot, computed without the wasteful multiplication.
#
# 取出第 `i` 行，等于用 `i` 的 one-hot 向量去乘 `W`：嵌入就是一个输入恰好为 one-hot 的线性层，只是省掉了浪费的乘法。

# %%
vocab_size, d = 6, 3
weight = torch.arange(vocab_size * d, dtype=torch.float32).reshape(vocab_size, d) / 10
print(weight)


# %% [markdown]
# ### Exercise 2 · `embed` · 练习 2
#
# Write `embed(token_ids, weight)`: for ids of shape `(..., T)` return the rows of `weight`, shape
# `(..., T, d)`. Use tensor indexing (or a one-hot product); do not call `nn.Embedding` or
# `F.embedding`, which are what you are rebuilding. The result must keep the gradient, so that
# training can change the weight. An id past the vocabulary (`vocab_size` or more) has no row and
# must raise `IndexError`: indexing raises it for you, a one-hot product needs its own check.
#
# 编写 `embed(token_ids, weight)`：对形状为 `(..., T)` 的 id 返回 `weight` 的对应行，形状 `(..., T, d)`。请使用张量索引（或 one-hot 乘积）；不要调用 `nn.Embedding` 或 `F.embedding`，它们正是你要重新实现的东西。结果必须保留梯度，这样训练才能改变权重。超出词表的 id（大于等于 `vocab_size`）没有对应的行，必须抛出 `IndexError`：索引会替你抛出它，one-hot 乘积则需要自己检查。
#
# <!-- rules: embed -->
#
# #### Rules that grading checks · 评分检查的规则 (`embed`)
#
# - Not allowed: `F.embedding` (it is the lookup this exercise builds; `nn.Embedding` calls it); `torch.embedding` (the same lookup under another name).
# - Raises `IndexError` when an id is `vocab_size` or more (past the vocabulary).
# - Not graded (the caller guarantees it): the ids are a `torch.long` tensor with no negative id.
# - Graded in float32, float64 and bfloat16: the output has the weight's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.embedding`（它就是本练习要构造的查表；`nn.Embedding` 也调用它）；`torch.embedding`（换了个名字的同一个查表）。
# - 某个 id 大于等于 `vocab_size`（超出词表）时抛出 `IndexError`。
# - 不评分（由调用者保证）：id 是不含负数的 `torch.long` 张量。
# - 在 float32、float64、bfloat16 下评分：输出与权重的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "embed", "locked": false, "schema_version": 3, "solution": true, "task": false}
def embed(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of `weight` (vocab_size, d) picked by `token_ids` (..., T) -> (..., T, d)."""
    ### BEGIN SOLUTION
    return weight[token_ids]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_embed", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb00

with nb00.as_graded(embed):
    table = torch.arange(18, dtype=torch.float32).reshape(6, 3) / 10
    out = embed(torch.tensor([2, 0, 5]), table)
    expect_close(out, torch.stack([table[2], table[0], table[5]]),
                 "embed must return row ids[t] of the weight for every position t.",
                 "embed 必须为每个位置 t 返回权重的第 ids[t] 行。")
    print("✓ embed")

# %% nbgrader={"grade": true, "grade_id": "test_embed_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb00
nb00.check_embed(embed)
### END HIDDEN TESTS

# %% [markdown]
# Your lookup, PyTorch's `nn.Embedding` with the same weight, and the one-hot product agree exactly:
#
# 你的查表、使用相同权重的 PyTorch `nn.Embedding`，以及 one-hot 乘积，三者结果完全一致：

# %%
ids = torch.tensor([[1, 4, 4], [0, 2, 5]])  # a batch of two sequences
layer = torch.nn.Embedding.from_pretrained(weight)
one_hot = torch.nn.functional.one_hot(ids, vocab_size).float()
print("nn.Embedding equal:", torch.equal(embed(ids, weight), layer(ids)))
print("one-hot product equal:", torch.equal(embed(ids, weight), one_hot @ weight))
print("output shape:", tuple(embed(ids, weight).shape))

# %% [markdown]
# ## The course's running example · 课程的贯穿示例
#
# The next notebooks use the six-token sentence of Raschka's book, with hand-picked 3-d embeddings so
# that every number stays readable. In this hand-picked example, "journey" and "starts" point almost
# the same way and "one" points elsewhere (nothing about how the words are used went into these
# vectors; learned embeddings, as above, are where usage shapes them). In notebook 01 the dot product turns that closeness into attention weights.
#
# 接下来的笔记本使用 Raschka 书中的六词元句子，它的三维嵌入是手工挑选的，使每个数字都易于阅读。在这个手工挑选的例子里，"journey" 和 "starts" 几乎指向同一个方向，"one" 指向别处（这些向量并不包含单词用法的任何信息；像上面那样学习得到的嵌入，才会被用法塑造）。在笔记本 01 中，点积会把这种接近程度变成注意力权重。

# %%
from utils.fixtures import JOURNEY_WORDS, journey_inputs

inputs = journey_inputs()
fig = plt.figure(figsize=(5, 5))
ax = fig.add_subplot(projection="3d")
for word, (x, y, z) in zip(JOURNEY_WORDS, inputs.tolist()):
    ax.quiver(0, 0, 0, x, y, z, arrow_length_ratio=0.08)
    ax.text(x, y, z, word)
ax.set(xlim=(0, 1), ylim=(0, 1), zlim=(0, 1), title="Input embeddings (d = 3)",
       xlabel="feature 0", ylabel="feature 1", zlabel="feature 2")
plt.show()

# %% [markdown]
# ## Submit · 提交
#
# You are done when both visible tests pass. Save the notebook, then in a terminal, in the course's
# top folder (from JupyterLab's terminal: `cd ..`):
#
# ```
# make submit NB=course/00_tokens_and_embeddings.ipynb
# ```
#
# 两个可见测试都通过后就完成了。保存笔记本，然后在终端中、于课程的顶层目录（在 JupyterLab 的终端里先输入 `cd ..`）运行上面的命令。
#
# Every later notebook is submitted the same way, with its own file name after `NB=`.
#
# 之后的每个笔记本都用同样的方式提交，只需把 `NB=` 后面换成它自己的文件名。
#
# Source: S. Raschka, *Build a Large Language Model (From Scratch)*, ch. 2-3 (the example sentence and
# its embeddings); GPT-2's tokenizer files (OpenAI), loaded with `tiktoken`.
#
# 来源：S. Raschka，《从零构建大语言模型》第 2–3 章（示例句子及其嵌入）；GPT-2 的分词器文件（OpenAI），用 `tiktoken` 加载。
