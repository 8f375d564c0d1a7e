"""Hidden checks of notebook 14, FlashAttention: exact attention in tiles.

Ground truth is PyTorch's own: F.scaled_dot_product_attention (with a bottom-right causal mask)
and autograd. Shapes are never square (T_q != T_k, d != d_v, batch and heads whose items differ)
and block sizes do not divide T. When a value is wrong, it is compared with what the usual
mistakes compute (a running sum or accumulator not rescaled, a division inside the loop, the
log-sum-exp without the maximum, top-left causal alignment, a partly masked tile skipped, D from
P, dV from unnormalised probabilities) so that the message names the mistake.

Memory is graded by watching: a torch function mode (`_Watch`) sees the result of every torch call
the learner's code makes and records the largest storage created. It is not a TorchDispatchMode,
whose first use imports torch._dynamo (a second of every submit). Rules, from the contract:
- no intermediate larger than one (block_q, block_k) tile of every batch item and head, unless it
  is no larger than an input or an output;
- online_softmax makes no reduction (max, sum, softmax, ...) over more than block_size entries of a row;
- a causal forward skips the tiles above the diagonal: it creates markedly fewer numbers than the
  same call without the mask.
torch.autograd.gradcheck imports sympy, so FlashAttention's float64 check compares directional
derivatives with central differences itself.
"""
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import utils.flash_attention as ref
from autograder.checks import call, expect, expect_close, expect_known, expect_tensor, fail, forbid, own_work, randn

NEG_INF = float("-inf")
_SDPA = [(F, "scaled_dot_product_attention")]
_REDUCTIONS = {"amax", "max", "sum", "logsumexp", "softmax", "log_softmax", "mean", "cumsum", "cummax",
               "sort", "topk", "nansum", "aminmax", "argmax", "norm", "prod", "kthvalue", "amin", "min"}


class _Watch(TorchFunctionMode):
    """Sees every torch call of the learner's code: the largest storage created, the total number
    of elements created, and (for online_softmax, rows of `row_ndim` dims) the first reduction
    over more than `block_size` entries of a row."""

    def __init__(self, row_ndim=None, block_size=None):
        super().__init__()
        self.row_ndim, self.block_size = row_ndim, block_size
        self.largest, self.largest_shape, self.created, self.full_row = 0, None, 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.row_ndim is not None and self.full_row is None:
            self._look_for_full_row(func, args, kwargs)
        result = func(*args, **kwargs)
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                self.created += t.numel()
                size = t.untyped_storage().nbytes() if t.device.type != "meta" else t.numel() * t.element_size()
                if size > self.largest:
                    self.largest, self.largest_shape = size, tuple(t.shape)
        return result

    def _look_for_full_row(self, func, args, kwargs):
        name = getattr(func, "__name__", "")
        if name not in _REDUCTIONS or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0:
            return
        x = args[0]
        if name in ("max", "min") and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return  # elementwise max of two tensors
        dim = args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else kwargs.get("dim")
        dims = range(x.dim()) if dim is None else (dim if isinstance(dim, (tuple, list)) else (dim,))
        if (x.dim() == self.row_ndim and x.shape[-1] > self.block_size
                and any(int(d) % x.dim() == x.dim() - 1 for d in dims)):
            self.full_row = f"{name} over a tensor of shape {tuple(x.shape)}"


def _nbytes(*tensors):
    return max(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _expect_tiles(watch, limit, who, bq, bk):
    expect(watch.largest <= limit,
           f"{who} created an intermediate of shape {watch.largest_shape}, larger than one (block_q, block_k) = ({bq}, {bk}) "
           "tile and than every input and output: compute the scores, probabilities and masks one tile at a time, never for all keys or all queries at once.",
           f"{who} 创建了形状为 {watch.largest_shape} 的中间张量，比一个 (block_q, block_k) = ({bq}, {bk}) 的分块以及任何输入和输出都大："
           "请一次只计算一个分块的分数、概率和掩码，不要一次对所有键或所有查询计算。",
           f"{watch.largest} bytes, at most {limit} allowed")


# online_softmax --------------------------------------------------------------------------
def _online_variant(x, block_size, rescale=True):
    m, l = x.new_full(x.shape[:-1], NEG_INF), x.new_zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - shift) if rescale else torch.ones_like(l)
        l = l * alpha + torch.exp(block - shift[..., None]).sum(-1)
        m = m_new
    return torch.exp(x - torch.where(torch.isinf(m), torch.zeros_like(m), m)[..., None]) / l[..., None]


def _softmax_input():
    x = randn(2, 3, 37, seed=141) * 4  # N = 37: no block size below divides it
    x[0, 0] += 1000.0  # large scores: exp overflows without the running maximum
    x[1, 1] -= 1000.0
    x[0, 1, torch.arange(37) % 3 == 0] = NEG_INF  # -inf entries get weight 0
    x[1, 2, :20] = NEG_INF  # a row whose first blocks are all -inf
    x[1, 0] = torch.linspace(-3.0, 6.0, 37)  # increasing: the maximum changes in every block
    return x


def check_online_softmax(online_softmax):
    x = _softmax_input()
    x_copy = x.clone()
    tiny = torch.tensor([1000.0, 1001.0])
    results, watches = {}, {}
    with own_work(online_softmax, "online_softmax"):
        for block in (8, 5, 1, 64):
            watches[block] = _Watch(row_ndim=x.dim(), block_size=block)
            with watches[block]:
                results[block] = call(online_softmax, x, block, name="online_softmax")
        pair = call(online_softmax, tiny, 1, name="online_softmax")
        strided = call(online_softmax, x.transpose(0, 1).contiguous().transpose(0, 1), 8, name="online_softmax")
        double = call(online_softmax, x.double(), 8, name="online_softmax")
    for block, result in results.items():
        expect_tensor(result, "online_softmax's result", "online_softmax 的结果")
        expect(result.shape == x.shape, "online_softmax must return a tensor of the shape of x.",
               "online_softmax 必须返回与 x 形状相同的张量。", f"block_size {block}: shape {tuple(result.shape)}, expected {tuple(x.shape)}")
    expect(torch.equal(x, x_copy), "online_softmax changed its input in place: leave x as it is.",
           "online_softmax 原地修改了输入：请保持 x 不变。")
    for block in (8, 5, 1):
        found = watches[block].full_row
        expect(found is None,
               f"online_softmax reduced more than block_size entries of a row at once ({found}, block_size {block}): keep a running maximum and a running sum, one block of block_size entries at a time.",
               f"online_softmax 一次对一行中多于 block_size 个元素做了归约（{found}，block_size 为 {block}）：请保持一个运行最大值和一个运行和，每次只处理 block_size 个元素。")
    expected = torch.softmax(x, dim=-1)
    for block in (8, 5, 1):
        mistakes = [(_online_variant(x, block, rescale=False),
                     "The running sum was not rescaled when the maximum grew: multiply it by exp(m_old - m_new) before adding the new block's exp(x - m_new).",
                     "最大值变大时运行和没有重新缩放：在加上新块的 exp(x - m_new) 之前，先把它乘以 exp(m_old - m_new)。")]
        if not torch.isfinite(results[block].detach()).all():
            fail("online_softmax gives NaN or inf on rows with scores near 1000 or with -inf entries: subtract the running maximum inside exp, and keep a row that has seen only -inf at sum 0 (no -inf - (-inf)).",
                 "在分数接近 1000 或含 -inf 的行上，online_softmax 得到了 NaN 或 inf：在 exp 里减去运行最大值，并让只见过 -inf 的行的和保持为 0（不要计算 -inf - (-inf)）。",
                 f"block_size {block}")
        expect_known(results[block], expected, mistakes,
                     f"online_softmax differs from torch.softmax with block_size {block}: after the pass over the blocks, return exp(x - m) / l with the final maximum m and sum l.",
                     f"block_size 为 {block} 时 online_softmax 与 torch.softmax 不同：遍历完所有块后，用最终的最大值 m 和总和 l 返回 exp(x - m) / l。")
    expect_close(results[64], expected,
                 "online_softmax is wrong when block_size is larger than the row: the one block is the whole row.",
                 "当 block_size 大于行长时 online_softmax 不对：唯一的块就是整行。")
    expect_close(strided, expected, "online_softmax is wrong on a non-contiguous x (a transposed view): index blocks with x[..., start:stop], not view().",
                 "online_softmax 在非连续的 x（转置视图）上不对：用 x[..., start:stop] 取块，不要用 view()。")
    expect(bool((results[8].detach()[x == NEG_INF] == 0).all()),
           "Entries equal to -inf must get weight exactly 0.", "等于 -inf 的元素的权重必须恰好为 0。")
    expect_close(pair, torch.tensor([1 / (1 + math.e), math.e / (1 + math.e)]),
                 "online_softmax([1000, 1001], 1) must be [1/(1+e), e/(1+e)]: exp(1000) overflows unless you subtract the running maximum.",
                 "online_softmax([1000, 1001], 1) 必须是 [1/(1+e), e/(1+e)]：不减去运行最大值时 exp(1000) 会溢出。")
    expect(isinstance(double, torch.Tensor) and double.dtype == torch.float64,
           "online_softmax must keep the dtype of x: create the running maximum and sum with x.new_full / x.new_zeros.",
           "online_softmax 必须保持 x 的 dtype：用 x.new_full / x.new_zeros 创建运行最大值和运行和。",
           f"float64 input gave {getattr(double, 'dtype', type(double).__name__)}")


# flash_attention_forward -----------------------------------------------------------------
def _forward_variant(q, k, v, causal, bq, bk, rescale_l=True, rescale_acc=True, divide_inside=False,
                     top_left=False, skip_partial=False, mask_tiles=True):
    """The tiled forward with one switch per known mistake (all defaults: the right one)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1.0 / math.sqrt(q.shape[-1]), 0 if top_left else T_k - T_q
    outs, lses = [], []
    for i0 in range(0, T_q, bq):
        i1 = min(i0 + bq, T_q)
        q_i = q[..., i0:i1, :]
        m, l = q.new_full(q_i.shape[:-1], NEG_INF), q.new_zeros(q_i.shape[:-1])
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])
        for j0 in range(0, T_k, bk):
            j1 = min(j0 + bk, T_k)
            if causal and (j0 > i1 - 1 + offset or (skip_partial and j1 - 1 > i0 + offset)):
                continue
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal and mask_tiles:
                s = s.masked_fill(ref._tile_mask(i0, i1, j0, j1, offset, q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = (alpha if rescale_l else 1.0) * l + p.sum(-1)
            acc = (alpha[..., None] if rescale_acc else 1.0) * acc + p @ v[..., j0:j1, :]
            if divide_inside:
                acc = acc / l[..., None]
            m = m_new
        outs.append(acc if divide_inside else acc / l[..., None])
        lses.append(m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def _sdpa(q, k, v, causal, top_left=False):
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    T_q, T_k = q.shape[-2], k.shape[-2]
    allowed = ~ref._tile_mask(0, T_q, 0, T_k, 0 if top_left else T_k - T_q, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _lse(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(ref._tile_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2], q.device), NEG_INF)
    return torch.logsumexp(s, dim=-1)


def _heads_layout(B, H, T, d, seed):
    """(B, H, T, d) as split heads give it: a non-contiguous view of (B, T, H, d)."""
    return randn(B, T, H, d, seed=seed).transpose(1, 2)


def _pair(result, who, out_shape, lse_shape):
    expect(isinstance(result, tuple) and len(result) == 2,
           f"{who} must return a pair (out, lse).", f"{who} 必须返回一对 (out, lse)。", f"got {type(result).__name__}")
    out, lse = result
    expect_tensor(out, "out", "out")
    expect_tensor(lse, "lse", "lse")
    expect(tuple(out.shape) == out_shape,
           "out must have shape (B, H, T_q, d_v): one output per query, as wide as the values.",
           "out 的形状必须是 (B, H, T_q, d_v)：每个查询一个输出，宽度与值向量相同。",
           f"shape {tuple(out.shape)}, expected {out_shape}")
    expect(tuple(lse.shape) == lse_shape,
           "lse must have shape (B, H, T_q): one log-sum-exp per query (no trailing dimension of 1).",
           "lse 的形状必须是 (B, H, T_q)：每个查询一个 log-sum-exp（末尾不要有大小为 1 的维度）。",
           f"shape {tuple(lse.shape)}, expected {lse_shape}")
    return out.detach(), lse.detach()


def _forward_mistakes(q, k, v, causal, bq, bk):
    cases = [(dict(rescale_l=False), "The running sum l was not rescaled when the maximum grew: l = exp(m_old - m_new) * l + rowsum(P).",
              "最大值变大时运行和 l 没有重新缩放：l = exp(m_old - m_new) * l + rowsum(P)。"),
             (dict(rescale_acc=False), "The output accumulator was not rescaled when the maximum grew: acc = exp(m_old - m_new) * acc + P @ V.",
              "最大值变大时输出累加器没有重新缩放：acc = exp(m_old - m_new) * acc + P @ V。"),
             (dict(divide_inside=True), "The accumulator was divided by the running sum inside the loop over key tiles: divide once, after the last tile (or multiply back by the old sum).",
              "累加器在遍历键分块的循环内被运行和除了：应在最后一个分块之后只除一次（或者先乘回旧的和）。")]
    if causal:
        cases += [(dict(top_left=True), "The causal mask is top-left aligned: with T_q < T_k the queries are the last T_q positions, so query i sees key j iff j <= i + (T_k - T_q).",
                   "因果掩码是左上对齐的：T_q < T_k 时查询是最后 T_q 个位置，所以查询 i 当且仅当 j <= i + (T_k - T_q) 时能看到键 j。"),
                  (dict(skip_partial=True), "A tile only partly above the diagonal was skipped: skip a tile only when its first key comes after its last query; mask the others.",
                   "一个只有部分在对角线之上的分块被跳过了：只有当分块的第一个键在其最后一个查询之后时才跳过；其他分块要加掩码。"),
                  (dict(mask_tiles=False), "The tiles on the diagonal were not masked: keys after a query must get -inf inside the tile too.",
                   "对角线上的分块没有加掩码：在分块内部，查询之后的键也必须设为 -inf。")]
    return [(_forward_variant(q, k, v, causal, bq, bk, **flags)[0], en, zh) for flags, en, zh in cases]


def check_flash_attention_forward(flash_attention_forward):
    fn, who = flash_attention_forward, "flash_attention_forward"
    B, H, T_q, T_k, d, d_v = 2, 3, 13, 29, 8, 5
    q, k, v = _heads_layout(B, H, T_q, d, 142), _heads_layout(B, H, T_k, d, 143), _heads_layout(B, H, T_k, d_v, 144)
    q = q * torch.linspace(0.5, 6.0, T_q)[:, None]  # growing scores: the maximum changes from tile to tile
    copies = [t.clone() for t in (q, k, v)]
    sq, sk, sv = randn(1, 2, 48, 4, seed=145), randn(1, 2, 80, 4, seed=146), randn(1, 2, 80, 3, seed=147)
    eq = randn(1, 1, 64, 4, seed=148)
    runs, watches = {}, {}
    en = f"This exercise asks you to write {who} yourself, tile by tile, not to call F.scaled_dot_product_attention or the course's reference in utils."
    zh = f"本练习要求你逐个分块自己实现 {who}，而不是调用 F.scaled_dot_product_attention 或 utils 中课程的参考实现。"
    with own_work(fn, who, extra=_SDPA, en=en, zh=zh):
        for causal in (False, True):
            runs[causal] = _pair(call(fn, q, k, v, causal=causal, block_q=4, block_k=7, name=who),
                                 who, (B, H, T_q, d_v), (B, H, T_q))
        default = _pair(call(fn, q, k, v, True, name=who), who, (B, H, T_q, d_v), (B, H, T_q))
        big = _pair(call(fn, q * 30, k, v, causal=True, block_q=5, block_k=6, name=who), who, (B, H, T_q, d_v), (B, H, T_q))
        double = call(fn, q.double(), k.double(), v.double(), causal=True, block_q=4, block_k=7, name=who)
        decode = _pair(call(fn, q[..., -1:, :], k, v, causal=True, block_q=4, block_k=7, name=who), who, (B, H, 1, d_v), (B, H, 1))
        for name, causal, args in (("tiles", True, (sq, sk, sv)), ("full", False, (eq, eq, eq)), ("skip", True, (eq, eq, eq))):
            watches[name] = _Watch()
            with watches[name]:
                runs[name] = call(fn, *args, causal=causal, block_q=8, block_k=16 if name == "tiles" else 8, name=who)
    expect(all(torch.equal(a, b) for a, b in zip((q, k, v), copies)), f"{who} changed q, k or v in place: leave the inputs as they are.",
           f"{who} 原地修改了 q、k 或 v：请保持输入不变。")
    for causal, (out, lse) in ((c, runs[c]) for c in (False, True)):
        expect_known(out, _sdpa(q, k, v, causal), lambda: _forward_mistakes(q, k, v, causal, 4, 7),
                     f"out differs from F.scaled_dot_product_attention (causal={causal}, block_q=4, block_k=7, T_q=13, T_k=29): check the running maximum, the rescaling and the final division.",
                     f"out 与 F.scaled_dot_product_attention 不同（causal={causal}，block_q=4，block_k=7，T_q=13，T_k=29）：请检查运行最大值、重新缩放和最后的除法。")
        right_lse = _lse(q, k, causal)
        expect_known(lse, right_lse, lambda: [(right_lse - _running_max(q, k, causal),
                                               "lse is missing the maximum: the log-sum-exp is m + log(l), because l sums exp(s - m).",
                                               "lse 缺少最大值：log-sum-exp 是 m + log(l)，因为 l 累加的是 exp(s - m)。")],
                     f"lse differs from torch.logsumexp of the scaled scores (causal={causal}): lse = m + log(l) for each query, over the keys it sees.",
                     f"lse 与缩放后分数的 torch.logsumexp 不同（causal={causal}）：对每个查询，在它能看到的键上 lse = m + log(l)。")
    expect_close(decode[0], _sdpa(q[..., -1:, :], k, v, True),
                 "With one query (a decoding step, T_q = 1) and causal=True, the query is the last position and sees every key.",
                 "只有一个查询（解码的一步，T_q = 1）且 causal=True 时，这个查询是最后一个位置，能看到所有的键。")
    expect_close(_pair(runs["skip"], who, (1, 1, 64, 4), (1, 1, 64))[0], _sdpa(eq, eq, eq, True),
                 "With T_q = T_k = 64, blocks of 8 and causal=True, out differs from causal attention: mask the tiles on the diagonal.",
                 "T_q = T_k = 64、块大小为 8 且 causal=True 时，out 与因果注意力不同：请给对角线上的分块加掩码。")
    expect_close(default[0], _sdpa(q, k, v, True),
                 f"{who} is wrong with its default block sizes (64, 64), larger than T: a block may hold fewer rows than block_q.",
                 f"{who} 在默认分块大小 (64, 64) 下不对（比 T 还大）：一个分块的行数可能少于 block_q。")
    expect(bool(torch.isfinite(big[0]).all() and torch.isfinite(big[1]).all()),
           "Scores in the hundreds give NaN or inf: subtract the running maximum inside exp.",
           "分数达到几百时出现了 NaN 或 inf：请在 exp 里减去运行最大值。")
    expect_close(big[0], _sdpa(q * 30, k, v, True), "With large scores out is wrong: keep the running maximum and rescale.",
                 "分数很大时 out 不对：请保持运行最大值并重新缩放。", atol=1e-4)
    expect(isinstance(double, tuple) and len(double) == 2 and all(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in double),
           f"{who} must keep the dtype of its inputs: create m, l and the accumulator with q.new_zeros / q.new_full.",
           f"{who} 必须保持输入的 dtype：用 q.new_zeros / q.new_full 创建 m、l 和累加器。")
    _expect_tiles(watches["tiles"], max(_nbytes(sq, sk, sv), 2 * 8 * 16 * 4), who, 8, 16)
    full, skip = watches["full"].created, watches["skip"].created
    expect(skip < 0.95 * full,
           "With causal=True your forward created as many numbers as without the mask: skip the tiles entirely above the diagonal (every key after every query), they contribute nothing.",
           "causal=True 时你的前向计算创建的数和不加掩码时一样多：请跳过完全位于对角线之上的分块（所有键都在所有查询之后），它们没有任何贡献。",
           f"T_q = T_k = 64, blocks 8: {skip} elements causal, {full} without the mask; skipping 28 of the 64 tiles leaves about 60 %")


def _running_max(q, k, causal):
    """Each query's maximum scaled score over the keys it sees (what lse = log(l) leaves out)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(ref._tile_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2], q.device), NEG_INF)
    return s.amax(-1)


# flash_attention_backward ----------------------------------------------------------------
_AUTOGRAD = [(torch.autograd, "grad"), (torch.autograd, "backward"), (torch.Tensor, "backward")]


def _autograd_grads(q, k, v, g, causal):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        (_sdpa(*leaves, causal) * g).sum().backward()  # backward(g) would import sympy (its shape check)
    return [t.grad for t in leaves]


def _backward_variant(q, k, v, out, lse, g, causal, bq, bk, d_from_p=False, unnormalised_dv=False, no_scale=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1.0 / math.sqrt(q.shape[-1]), T_k - T_q
    D = (g * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, bk):
        j1 = min(j0 + bk, T_k)
        for i0 in range(0, T_q, bq):
            i1 = min(i0 + bq, T_q)
            s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(ref._tile_mask(i0, i1, j0, j1, offset, q.device), NEG_INF)
            p = torch.exp(s - lse[..., i0:i1, None])
            dv[..., j0:j1, :] += (torch.exp(s) if unnormalised_dv else p).transpose(-2, -1) @ g[..., i0:i1, :]
            dp = g[..., i0:i1, :] @ v[..., j0:j1, :].transpose(-2, -1)
            D_i = (p * dp).sum(-1) if d_from_p else D[..., i0:i1]
            ds = p * (dp - D_i[..., None])
            c = 1.0 if no_scale else scale
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * c
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * c
    return dq, dk, dv


_BACKWARD_MISTAKES = [
    (dict(d_from_p=True), "D was computed from one tile's P * dP: D = rowsum(dO * O) over the whole row, computed once before the loops.",
     "D 是由一个分块的 P * dP 算出的：D = rowsum(dO * O)，对整行计算，在循环之前算一次。"),
    (dict(unnormalised_dv=True), "dV was accumulated with unnormalised probabilities exp(s): recompute P = exp(s - lse) and add Pᵀ @ dO.",
     "dV 是用未归一化的概率 exp(s) 累加的：请重新计算 P = exp(s - lse)，再加上 Pᵀ @ dO。"),
    (dict(no_scale=True), "dQ and dK miss the factor 1/sqrt(d): the scores are q · k / sqrt(d), so dQ = dS @ K / sqrt(d) and dK = dSᵀ @ Q / sqrt(d).",
     "dQ 和 dK 缺少因子 1/sqrt(d)：分数是 q · k / sqrt(d)，所以 dQ = dS @ K / sqrt(d)，dK = dSᵀ @ Q / sqrt(d)。"),
]


def check_flash_attention_backward(flash_attention_backward):
    fn, who = flash_attention_backward, "flash_attention_backward"
    B, H, T_q, T_k, d, d_v = 2, 3, 13, 29, 8, 5
    q, k, v = _heads_layout(B, H, T_q, d, 150), _heads_layout(B, H, T_k, d, 151), _heads_layout(B, H, T_k, d_v, 152)
    g = randn(B, H, T_q, d_v, seed=153)
    sq, sk, sv, sg = randn(1, 2, 48, 4, seed=154), randn(1, 2, 80, 4, seed=155), randn(1, 2, 80, 3, seed=156), randn(1, 2, 48, 3, seed=157)
    saved = {causal: ref.flash_attention_forward(q, k, v, causal, 64, 64) for causal in (False, True)}
    small = ref.flash_attention_forward(sq, sk, sv, True, 64, 64)
    runs = {}
    en = f"This exercise asks you to write {who} yourself from lse (recomputing each tile), not to call autograd, F.scaled_dot_product_attention or the course's reference in utils."
    zh = f"本练习要求你根据 lse 自己实现 {who}（重新计算每个分块），而不是调用 autograd、F.scaled_dot_product_attention 或 utils 中课程的参考实现。"
    watch = _Watch()
    copies = [t.clone() for t in (q, k, v, g, *saved[True])]
    with own_work(fn, who, extra=[*_SDPA, *_AUTOGRAD], en=en, zh=zh):
        for causal in (False, True):
            out, lse = saved[causal]
            runs[causal] = call(fn, q, k, v, out, lse, g, causal=causal, block_q=4, block_k=7, name=who)
        default = call(fn, q, k, v, *saved[True], g, True, name=who)
        double = call(fn, q.double(), k.double(), v.double(), *(t.double() for t in saved[True]), g.double(), True,
                      block_q=4, block_k=7, name=who)
        with watch:
            call(fn, sq, sk, sv, *small, sg, causal=True, block_q=8, block_k=16, name=who)
    expect(all(torch.equal(a, b) for a, b in zip((q, k, v, g, *saved[True]), copies)),
           f"{who} changed one of its inputs in place (q, k, v, out, lse or grad_out): accumulate into new tensors such as torch.zeros_like(q).",
           f"{who} 原地修改了某个输入（q、k、v、out、lse 或 grad_out）：请累加到新张量中，例如 torch.zeros_like(q)。")
    for causal, result in runs.items():
        expect(isinstance(result, tuple) and len(result) == 3 and all(isinstance(t, torch.Tensor) for t in result),
               f"{who} must return three tensors (dq, dk, dv).", f"{who} 必须返回三个张量 (dq, dk, dv)。")
        expect([tuple(t.shape) for t in result] == [tuple(q.shape), tuple(k.shape), tuple(v.shape)],
               "dq, dk and dv must have the shapes of q, k and v, in that order.",
               "dq、dk 和 dv 的形状必须分别与 q、k 和 v 相同，且按此顺序。",
               f"shapes {[tuple(t.shape) for t in result]}")
        right = _autograd_grads(q, k, v, g, causal)
        out, lse = saved[causal]
        variants = [(_backward_variant(q, k, v, out, lse, g, causal, 4, 7, **flags), en_m, zh_m) for flags, en_m, zh_m in _BACKWARD_MISTAKES]
        for i, (name, ours, expected) in enumerate(zip(("dq", "dk", "dv"), result, right)):
            expect_known(ours, expected, [(grads[i], en_m, zh_m) for grads, en_m, zh_m in variants],
                         f"{name} differs from autograd's (causal={causal}, block_q=4, block_k=7, T_q=13, T_k=29): P = exp(s - lse), dS = P * (dP - D), then dQ += dS K / sqrt(d), dK += dSᵀ Q / sqrt(d), dV += Pᵀ dO.",
                         f"{name} 与 autograd 的结果不同（causal={causal}，block_q=4，block_k=7，T_q=13，T_k=29）：P = exp(s - lse)，dS = P * (dP - D)，然后 dQ += dS K / sqrt(d)，dK += dSᵀ Q / sqrt(d)，dV += Pᵀ dO。",
                         atol=1e-4, rtol=1e-4)
    right = _autograd_grads(q, k, v, g, True)
    for name, ours, expected in zip(("dq", "dk", "dv"), default, right):
        expect_close(ours, expected, f"{who} is wrong with its default block sizes (64, 64), larger than T: {name} differs from autograd's.",
                     f"{who} 在默认分块大小 (64, 64)（比 T 还大）下不对：{name} 与 autograd 的结果不同。", atol=1e-4, rtol=1e-4)
    expect(isinstance(double, tuple) and all(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in double),
           f"{who} must keep the dtype of its inputs: start dq, dk and dv with torch.zeros_like.",
           f"{who} 必须保持输入的 dtype：用 torch.zeros_like 初始化 dq、dk 和 dv。")
    _expect_tiles(watch, max(_nbytes(sq, sk, sv), 2 * 8 * 16 * 4), who, 8, 16)


# FlashAttention --------------------------------------------------------------------------
def _directional_check(apply, inputs, seed):
    """Central differences in float64 along random directions: what gradcheck checks, without sympy."""
    with torch.enable_grad():
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        out = apply(*leaves)
        w = randn(*out.shape, seed=seed).double()
        (out * w).sum().backward()
    worst = 0.0
    for r in range(3):
        u = [randn(*t.shape, seed=seed + 10 * r + i).double() for i, t in enumerate(inputs)]
        eps = 1e-6
        with torch.no_grad():
            plus = (apply(*[t + eps * d for t, d in zip(inputs, u)]) * w).sum()
            minus = (apply(*[t - eps * d for t, d in zip(inputs, u)]) * w).sum()
        numeric = float((plus - minus) / (2 * eps))
        analytic = float(sum((leaf.grad * d).sum() for leaf, d in zip(leaves, u)))
        worst = max(worst, abs(numeric - analytic) / max(1.0, abs(numeric)))
    return worst


def _backward_through_autograd(out, g, who):
    def run():
        try:
            (out * g).sum().backward()
        except RuntimeError as e:
            if "number of gradients" in str(e):
                fail(f"{who}.backward must return one gradient per input of forward, None for causal: (dq, dk, dv, None).",
                     f"{who}.backward 必须为 forward 的每个输入返回一个梯度，causal 对应 None：(dq, dk, dv, None)。", f"RuntimeError: {e}")
            raise

    call(run, name=f"{who}.backward")


def _saved(out):
    node = out.grad_fn
    tensors = list(getattr(node, "saved_tensors", ()) or ())
    tensors += [t for t in vars(node).values() if isinstance(t, torch.Tensor)] if hasattr(node, "__dict__") else []
    return tensors


def check_FlashAttention(FlashAttention):
    who = "FlashAttention"
    en = f"This exercise asks you to write {who} yourself, not to subclass or call the course's reference in utils or F.scaled_dot_product_attention."
    zh = f"本练习要求你自己实现 {who}，而不是继承或调用 utils 中课程的参考实现或 F.scaled_dot_product_attention。"
    extra = [*_SDPA, (ref, "flash_attention_forward"), (ref, "flash_attention_backward")]
    if not (isinstance(FlashAttention, type) and issubclass(FlashAttention, torch.autograd.Function)):
        with own_work(FlashAttention, who, extra=extra, en=en, zh=zh):
            try:
                FlashAttention()  # a wrapper around the course's class is a shortcut, named as such
            except (AssertionError, NotImplementedError):
                raise
            except Exception:
                pass
        fail(f"{who} must subclass torch.autograd.Function, with static methods forward(ctx, q, k, v, causal=False) and backward(ctx, grad_out).",
             f"{who} 必须继承 torch.autograd.Function，带有静态方法 forward(ctx, q, k, v, causal=False) 和 backward(ctx, grad_out)。",
             f"got {FlashAttention!r}")
    B, H, T_q, T_k, d, d_v = 1, 2, 70, 90, 4, 3  # more than one tile of 64
    q, k, v = randn(B, H, T_q, d, seed=160), randn(B, H, T_k, d, seed=161), randn(B, H, T_k, d_v, seed=162)
    g = randn(B, H, T_q, d_v, seed=163)
    lq, lk, lv = randn(1, 1, 200, 4, seed=164), randn(1, 1, 200, 4, seed=165), randn(1, 1, 200, 4, seed=166)
    small = [randn(1, 2, 3, 4, seed=167).double(), randn(1, 2, 5, 4, seed=168).double(), randn(1, 2, 5, 3, seed=169).double()]
    runs, watch, errors = {}, _Watch(), {}
    methods = [getattr(v, "__func__", v) for v in vars(FlashAttention).values() if isinstance(v, (staticmethod, classmethod))]
    with forbid(_SDPA, methods, en, zh), own_work(FlashAttention, who, extra=extra, en=en, zh=zh):
        for causal in (False, True):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            with torch.enable_grad():
                out = call(FlashAttention.apply, *leaves, causal, name=f"{who}.apply")
                expect(isinstance(out, torch.Tensor) and out.grad_fn is not None,
                       f"{who}.apply(q, k, v, causal) must return out, a tensor connected to the graph: forward returns out only, not (out, lse).",
                       f"{who}.apply(q, k, v, causal) 必须返回 out，一个连在计算图上的张量：forward 只返回 out，而不是 (out, lse)。",
                       f"got {type(out).__name__}")
                saved = _saved(out)
                _backward_through_autograd(out, g, who)
            runs[causal] = (out.detach(), [t.grad for t in leaves], saved)
        big = [t.clone().requires_grad_() for t in (lq, lk, lv)]
        with torch.enable_grad():
            out = call(FlashAttention.apply, *big, True, name=f"{who}.apply")
            with watch:  # called directly: the autograd engine runs backward outside this thread's function modes
                call(FlashAttention.backward, out.grad_fn, torch.ones_like(out), name=f"{who}.backward")
        try:
            plain = FlashAttention.apply(q, k, v)
        except TypeError as e:
            fail(f"{who}.apply(q, k, v) must work without causal: give forward the default causal=False.",
                 f"{who}.apply(q, k, v) 在不传 causal 时也必须能用：给 forward 的 causal 加上默认值 False。", f"TypeError: {e}")
        for causal in (False, True):
            errors[causal] = _directional_check(lambda *x: FlashAttention.apply(*x, causal), small, seed=170)
    for causal, (out, grads, saved) in runs.items():
        expect_close(out, _sdpa(q, k, v, causal),
                     f"{who}.apply(q, k, v, causal={causal}) differs from F.scaled_dot_product_attention: forward must return the out of flash_attention_forward.",
                     f"{who}.apply(q, k, v, causal={causal}) 与 F.scaled_dot_product_attention 不同：forward 必须返回 flash_attention_forward 的 out。")
        full = [tuple(t.shape) for t in saved if t.dim() >= 2 and tuple(t.shape[-2:]) == (T_q, T_k)]
        expect(not full,
               f"{who} saves a (T_q, T_k) tensor for backward, the probabilities FlashAttention exists to avoid: save q, k, v, out and lse only.",
               f"{who} 为反向传播保存了 (T_q, T_k) 的张量，而 FlashAttention 正是为了避免保存这些概率：只保存 q、k、v、out 和 lse。",
               f"saved shapes {full}")
        expect(any(t.numel() == B * H * T_q and t.shape[:2] == (B, H) for t in saved),
               f"{who} must save lse (one number per query) with ctx.save_for_backward(q, k, v, out, lse): backward recomputes the probabilities from it.",
               f"{who} 必须用 ctx.save_for_backward(q, k, v, out, lse) 保存 lse（每个查询一个数）：反向传播由它重新计算概率。",
               f"saved shapes {[tuple(t.shape) for t in saved]}")
        right = _autograd_grads(q, k, v, g, causal)
        for name, ours, expected in zip(("q", "k", "v"), grads, right):
            expect(ours is not None, f"{who}.backward gave no gradient for {name}: return (dq, dk, dv, None), one entry per input of forward.",
                   f"{who}.backward 没有给出 {name} 的梯度：返回 (dq, dk, dv, None)，forward 的每个输入对应一项。")
            expect_close(ours, expected,
                         f"The gradient of {name} differs from autograd's (causal={causal}): backward must call flash_attention_backward with the saved tensors and ctx's causal.",
                         f"{name} 的梯度与 autograd 的结果不同（causal={causal}）：backward 必须用保存的张量和 ctx 中的 causal 调用 flash_attention_backward。",
                         atol=1e-4, rtol=1e-4)
    expect(isinstance(plain, torch.Tensor), f"{who}.apply(q, k, v) must work without causal: forward(ctx, q, k, v, causal=False).",
           f"{who}.apply(q, k, v) 在不传 causal 时也必须能用：forward(ctx, q, k, v, causal=False)。")
    expect_close(plain, _sdpa(q, k, v, False), f"{who}.apply(q, k, v) must default to causal=False.",
                 f"{who}.apply(q, k, v) 的默认值必须是 causal=False。")
    _expect_tiles(watch, max(_nbytes(lq, lk, lv), 64 * 64 * 4), f"{who}.backward", 64, 64)
    for causal, error in errors.items():
        expect(error < 1e-5,
               f"In float64 the gradients of {who} disagree with finite differences (causal={causal}), what torch.autograd.gradcheck checks: keep every tensor in the inputs' dtype.",
               f"在 float64 下 {who} 的梯度与有限差分不一致（causal={causal}），而这正是 torch.autograd.gradcheck 检查的：让每个张量保持输入的 dtype。",
               f"largest relative error {error:.2g}")
