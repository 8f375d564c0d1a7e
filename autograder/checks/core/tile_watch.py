"""Watching what tiled code creates: no intermediate larger than a tile, no reduction over a whole row.

Notebook 14's exercises promise memory, not only values: FlashAttention never holds a (T_q, T_k)
matrix, and an online softmax never reduces a whole row at once. Values cannot show either, so
the checks watch the learner's code run. `TileWatch` is a torch function mode: it sees the result
of every torch call (operators and Tensor methods included) and records the largest tensor
created, counting the whole storage behind a view. It is not a TorchDispatchMode, whose first use
imports torch._dynamo (a second of every submit).

    with TileWatch(row_ndim=x.dim(), block_size=8) as watch:
        online_softmax(x, 8)
    watch.full_row       # None, or "amax over a tensor of shape (2, 3, 37)"
    watch.largest        # elements of the largest tensor created (its storage, for a view)
    watch.largest_shape  # its shape

A causal pass must skip the tiles entirely above the diagonal. `work_of` counts the arithmetic of
one call with `cost.MatmulCost` (multiply-adds of matrix products and elementwise
multiplications), so a causal call can be compared with the same call without the mask.

Sizes are counted in elements, not bytes: a tile is a number of scores, and a float64 copy of an
input is no larger than the input.
"""
import torch
from torch.overrides import TorchFunctionMode

from autograder.checks import expect
from autograder.checks.core.cost import MatmulCost

# Reductions that combine the entries of a row: online_softmax may apply them to one block only.
REDUCTIONS = {"amax", "max", "sum", "logsumexp", "softmax", "log_softmax", "mean", "cumsum", "cummax",
              "sort", "topk", "nansum", "aminmax", "argmax", "norm", "prod", "kthvalue", "amin", "min"}
# Products that sum over the last dimension of their first operand: a row's sum as exp(x) @ ones.
CONTRACTIONS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "dot", "inner", "einsum", "tensordot", "vdot"}


class TileWatch(TorchFunctionMode):
    """The largest tensor created inside the block and, for rows of `row_ndim` dims, the first
    reduction over more than `block_size` entries of a row."""

    def __init__(self, row_ndim=None, block_size=None):
        super().__init__()
        self.row_ndim, self.block_size = row_ndim, block_size
        self.largest, self.largest_shape, self.full_row = 0, None, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.row_ndim is not None and self.full_row is None:
            self._look_for_full_row(func, args, kwargs)
        result = func(*args, **kwargs)
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                size = t.numel() if t.device.type == "meta" else t.untyped_storage().nbytes() // t.element_size()
                if size > self.largest:
                    self.largest, self.largest_shape = size, tuple(t.shape)
        return result

    def _look_for_full_row(self, func, args, kwargs):
        name = getattr(func, "__name__", "")
        if name in CONTRACTIONS:
            wide = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] > self.block_size]
            if wide:
                self.full_row = f"{name} over a tensor of shape {tuple(wide[0].shape)} (a sum through a product)"
            return
        if name not in REDUCTIONS or not args or not isinstance(args[0], torch.Tensor) or args[0].dim() == 0:
            return
        x = args[0]
        if name in ("max", "min") and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return  # the elementwise max of two tensors
        dim = args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else kwargs.get("dim")
        dims = range(x.dim()) if dim is None else (dim if isinstance(dim, (tuple, list)) else (dim,))
        if (x.dim() == self.row_ndim and x.shape[-1] > self.block_size
                and any(int(d) % x.dim() == x.dim() - 1 for d in dims)):
            self.full_row = f"{name} over a tensor of shape {tuple(x.shape)}"


def elements(*tensors) -> int:
    """The number of elements of the largest of `tensors`."""
    return max(t.numel() for t in tensors if isinstance(t, torch.Tensor))


def expect_tiles(watch, limit, who, bq, bk):
    """Nothing created inside `watch` may hold more than `limit` elements (one tile of every
    batch item and head, or an input or output, whichever is larger)."""
    expect(watch.largest <= limit,
           f"{who} created an intermediate of shape {watch.largest_shape}, larger than one (block_q, block_k) = ({bq}, {bk}) "
           "tile of every head and than every input and output: compute the scores, probabilities and masks one tile at a time, "
           "and slice the inputs as they are (no padded copy).",
           f"{who} 创建了形状为 {watch.largest_shape} 的中间张量，比每个头的一个 (block_q, block_k) = ({bq}, {bk}) 分块以及任何输入和输出都大："
           "请一次只计算一个分块的分数、概率和掩码，并直接对输入切片（不要构造填充后的副本）。",
           f"{watch.largest} elements, at most {limit} allowed")


def work_of(fn, *args, **kwargs):
    """(result, multiply-adds + multiplications) of one call: what skipping tiles saves."""
    with MatmulCost() as cost:
        result = fn(*args, **kwargs)
    return result, cost.macs + cost.muls


def expect_skips(causal_work, full_work, who, setting):
    """A causal call must do markedly less arithmetic than the same call without the mask."""
    expect(causal_work < 0.8 * full_work,
           f"With causal=True {who} did as much arithmetic as without the mask: skip the tiles entirely above the diagonal (every key after every query), they contribute nothing.",
           f"causal=True 时 {who} 做的运算和不加掩码时一样多：请跳过完全位于对角线之上的分块（所有键都在所有查询之后），它们没有任何贡献。",
           f"{setting}: {causal_work} multiplications causal, {full_work} without the mask")
