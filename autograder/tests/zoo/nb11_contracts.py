"""Solutions of notebook 11 for its declared contracts and input spaces (issues 35, 36), merged into
nb11's WRONG and RIGHT: a floor added to amax (a scale off by 1e-4 / 127, seen only relative to a
small scale), max without abs on one-signed values, a view of a non-contiguous input, a hard-coded
tile, an activation not made contiguous for the int8 kernel, scales copied with their autograd graph,
float32 whatever the input's dtype, a bias kept by reference, a walk two levels deep; and
right solutions the rules allow: a shorter last tile where K is not a multiple of block_size (more
general than the precondition), blocks' amax by max pooling, slices in a Python loop."""
import torch
import torch.nn.functional as F
from torch import nn

import utils.quantize as R

FP8 = torch.float8_e4m3fn


# absmax_quantize -------------------------------------------------------------------------
def absmax_floor_added(x, dim=None):  # the floor added to amax, not clamped: (amax + 1e-4) / 127
    x = x.float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = (amax + 1e-4) / 127
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale


def absmax_flat_view(x, dim=None):  # the whole tensor's amax through x.view(-1), which a non-contiguous x refuses
    x = x.float()
    amax = x.view(-1).abs().max() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp(min=1e-4) / 127
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale


def absmax_slice_loop(x, dim=None):  # right: one slice at a time, in Python
    x = x.float()
    if dim is None:
        scale = x.abs().max().clamp(min=1e-4) / 127
        return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale
    moved = x.movedim(dim, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    scales = torch.stack([row.abs().max().clamp(min=1e-4) / 127 for row in flat])
    q = torch.stack([torch.round(row / s).clamp(-127, 127) for row, s in zip(flat, scales)]).to(torch.int8)
    q = q.reshape(moved.shape).movedim(-1, dim)
    return q, scales.reshape(*moved.shape[:-1], 1).movedim(-1, dim)


# dequantize ------------------------------------------------------------------------------
def deq_view(q, scale):  # view(-1) needs a contiguous q
    return (q.float().view(-1) * scale.expand_as(q).reshape(-1)).view(q.shape)


# fp8_block_quantize ----------------------------------------------------------------------
def _fp8_blocks(w, b, amax_of):
    n, k = w.shape
    w32 = w.float()
    scale = amax_of(w32, b) / 448
    full = scale.repeat_interleave(b, 0)[:n].repeat_interleave(b, 1)[:, :k]
    return (w32 / full).clamp(-448, 448).to(FP8), scale


def fp8q_floor_added(w, block_size=128):
    def amax(w32, b):
        n, k = w32.shape
        nb, kb = -(-n // b), -(-k // b)
        return F.pad(w32.abs(), (0, kb * b - k, 0, nb * b - n)).reshape(nb, b, kb, b).amax(dim=(1, 3)) + 1e-4
    return _fp8_blocks(w, block_size, amax)


def fp8q_max_not_abs(w, block_size=128):  # the max of w, not of |w|: a block of negative weights gets the floor's scale
    def amax(w32, b):
        n, k = w32.shape
        nb, kb = -(-n // b), -(-k // b)
        padded = F.pad(w32, (0, kb * b - k, 0, nb * b - n), value=float("-inf"))
        return padded.reshape(nb, b, kb, b).amax(dim=(1, 3)).clamp(min=1e-4)
    return _fp8_blocks(w, block_size, amax)


def fp8q_max_pool(w, block_size=128):  # right: each block's amax by max pooling, ceil_mode for the ragged edge
    return _fp8_blocks(w, block_size, lambda w32, b: F.max_pool2d(w32.abs()[None, None], b, b, ceil_mode=True)[0, 0].clamp(min=1e-4))


# fp8_activation_quantize -----------------------------------------------------------------
def act(mistake=None):
    def fp8_activation_quantize(x, block_size=128):
        b = 128 if mistake == "128 whatever block_size" else block_size
        x32 = x.float()
        tiles = x32.unflatten(-1, (-1, b))
        amax = tiles.abs().amax(-1)
        amax = amax + 1e-4 if mistake == "floor added" else amax.clamp(min=1e-4)
        scale = amax / 448
        return (tiles / scale.unsqueeze(-1)).clamp(-448, 448).to(FP8).flatten(-2), scale
    return fp8_activation_quantize


def act_shorter_last_tile(x, block_size=128):  # right, and more general: a last tile of K % block_size channels
    k = x.shape[-1]
    x32 = x.float()
    scales, codes = [], []
    for start in range(0, k, block_size):
        tile = x32[..., start:start + block_size]
        s = tile.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448
        scales.append(s)
        codes.append((tile / s).clamp(-448, 448).to(FP8))
    return torch.cat(codes, -1), torch.cat(scales, -1)


# Int8WeightOnlyLinear --------------------------------------------------------------------
def int8(mistake=None):
    class Int8WeightOnlyLinear(nn.Module):
        def __init__(self, in_features, out_features, bias=True):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
            self.register_buffer("scale", torch.ones(out_features))
            self.register_buffer("bias", torch.zeros(out_features) if bias else None)

        @classmethod
        def from_linear(cls, linear):
            layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
            w = linear.weight.float() if mistake == "no detach" else linear.weight.detach().float()
            amax = w.abs().amax(-1, keepdim=True)
            scale = (amax + 1e-4 if mistake == "floor added" else amax.clamp(min=1e-4)) / 127
            layer.weight.copy_(torch.round(w / scale).clamp(-127, 127).to(torch.int8))
            layer.scale.copy_(scale.squeeze(-1))
            if linear.bias is not None:
                if mistake == "bias by reference":  # detach() shares the nn.Linear's storage: no copy
                    layer.bias = linear.bias.detach()
                else:
                    layer.bias.copy_(linear.bias.detach())
            return layer

        def forward(self, x):
            x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)
            x2 = x2 if mistake == "not contiguous" else x2.contiguous()  # the kernel reads each row of A in one piece
            y = torch._weight_int8pack_mm(x2, self.weight, self.scale.to(torch.bfloat16))
            y = y.float() if mistake == "float32 output" else y.to(x.dtype)
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
            return y.reshape(*x.shape[:-1], self.out_features)
    return Int8WeightOnlyLinear


# quantize_model_ -------------------------------------------------------------------------
def qm_two_levels(model, skip=()):  # the model's children and grandchildren only
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            if name not in skip:
                setattr(model, name, R.Int8WeightOnlyLinear.from_linear(child))
            continue
        for sub, grandchild in list(child.named_children()):
            if isinstance(grandchild, nn.Linear) and f"{name}.{sub}" not in skip:
                setattr(child, sub, R.Int8WeightOnlyLinear.from_linear(grandchild))
    return model


WRONG = {
    "absmax_quantize": {"the floor added to amax": (absmax_floor_added, "a constant added to amax"),
                        "x.view(-1) of a non-contiguous x": (absmax_flat_view, "crashed")},
    "dequantize": {"view of a non-contiguous q": (deq_view, "crashed")},
    "fp8_block_quantize": {
        "the floor added to amax": (fp8q_floor_added, "a constant added to amax"),
        "max of w, not of |w|": (fp8q_max_not_abs, "max of |w|"),
    },
    "fp8_activation_quantize": {
        "the floor added to amax": (act("floor added"), "a constant added to amax"),
        "tiles of 128 whatever block_size": (act("128 whatever block_size"), "crashed"),
    },
    "Int8WeightOnlyLinear": {
        "the floor added to amax": (int8("floor added"), "int8 weight differs from absmax_quantize"),
        "x not made contiguous for the kernel": (int8("not contiguous"), "A must be contiguous"),
        "the scales copied with their graph": (int8("no detach"), "holds an autograd graph"),
        "a float32 output whatever x's dtype": (int8("float32 output"), "must return the input's dtype"),
        "the bias kept by reference": (int8("bias by reference"), "still reads the nn.Linear"),
    },
    "quantize_model_": {"two levels deep only": (qm_two_levels, "nested")},
}

RIGHT = {
    "absmax_quantize": {"a Python loop over the slices": absmax_slice_loop},
    "fp8_block_quantize": {"max pooling with ceil_mode": fp8q_max_pool},
    "fp8_activation_quantize": {"a shorter last tile (K not a multiple of block_size too)": act_shorter_last_tile},
}
