"""W8A8: int8 weights AND int8 activations, on fbgemm's kernels (notebook 11).

    .venv/bin/python -m utils.bench_quantize    # decode speed: float32, weight-only int8, W8A8

A weight-only int8 layer (utils.quantize.Int8WeightOnlyLinear, `torch._weight_int8pack_mm`)
reads 1 byte per weight but widens every weight to float and multiplies in float: on a CPU
core that arithmetic can take as long as reading the bytes. W8A8 quantizes the activations too, then
multiplies int8 by int8 and adds the products in int32, which x86 does many at a time: AVX2's
`vpmaddubsw` multiplies 32 pairs of bytes per instruction, AVX-512 VNNI's `vpdpbusd` 64 pairs,
accumulated straight into int32. The float result is int32 sum * activation scale * weight scale.

`W8A8Linear` runs fbgemm, PyTorch's x86 int8 backend: `torch.ops.quantized.linear_prepack`
packs the int8 weight (one scale per output channel) once, and `torch.ops.quantized.
linear_dynamic` quantizes the activations at every call (one scale and zero point per call,
computed from that call's input: "dynamic"), multiplies in int8 and returns float32.
PyTorch marks its quantized tensor types deprecated in favour of torchao
(pytorch/pytorch#184982); they are still the fast int8 path on x86 CPUs of the pinned torch, and
the deprecation warning is silenced where the packed weight is built.

fbgemm runs on x86 CPUs only: a W8A8Linear lives on the CPU, and building one from a layer on
another device, or calling it on a tensor there, raises a ValueError that says so.
"""
import warnings

import torch
from torch import nn

from utils.quantize import AMAX_FLOOR, Int8WeightOnlyLinear


def reduce_range() -> bool:
    """True where activations must keep 7 bits: without VNNI, fbgemm multiplies uint8 activations
    by int8 weights with `vpmaddubsw`, which adds each pair of products into a saturating int16
    (2 * 255 * 127 > 32767); VNNI's `vpdpbusd` adds them straight into int32."""
    return not torch.cpu._is_vnni_supported()


def _require_cpu(t: torch.Tensor, what: str):
    if t.device.type != "cpu":
        raise ValueError(f"W8A8Linear runs on fbgemm, PyTorch's int8 backend for x86 CPUs, so it is CPU-only; "
                         f"{what} is on {t.device}. On another device use utils.quantize.Int8WeightOnlyLinear, "
                         f"or move the model to the CPU first")


def _pack(q: torch.Tensor, scale: torch.Tensor):
    """fbgemm's prepacked weight from int8 q (out, in) and one float scale per output channel."""
    _require_cpu(q, "the int8 weight")
    zero_points = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qweight = torch._make_per_channel_quantized_tensor(q, scale.double(), zero_points, 0)
    return torch.ops.quantized.linear_prepack(qweight, None)


class W8A8Linear(nn.Module):
    """y = x W^T + b with W int8 (per output channel) and x quantized to 8 bits at every call.

    The int8 weight and its scales are buffers (what state_dict and `weight_bytes` count); the
    matmul reads fbgemm's packed copy of them, built by `from_linear` (RAM holds both).
    fbgemm takes one activation scale per call; for several tokens at once, each token (row) is
    first divided by its own amax and its output multiplied back, so every token gets its own
    scale, as in DeepSeek-V3's per-token tiles. Decoding (one token) skips that step.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        cpu = torch.device("cpu")                                                 # fbgemm's only device
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=cpu))
        self.register_buffer("scale", torch.ones(out_features, device=cpu))                    # (out,)
        self.register_buffer("bias", torch.zeros(out_features, device=cpu) if bias else None)
        self.reduce_range = reduce_range()
        self._packed = None                                                     # built by pack()

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "W8A8Linear":
        _require_cpu(linear.weight, "the nn.Linear to quantize")
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        # the weights and scales of notebook 11's weight-only layer: only the forward differs
        layer.load_state_dict(Int8WeightOnlyLinear.from_linear(linear).state_dict())
        return layer.pack()

    def pack(self) -> "W8A8Linear":
        """Rebuild fbgemm's packed weight from the buffers (after loading a state_dict)."""
        self._packed = _pack(self.weight, self.scale)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _require_cpu(x, "the input")
        if self._packed is None:
            self.pack()
        x = x.float()
        if x.shape[:-1].numel() <= 1:                                          # one token
            y = torch.ops.quantized.linear_dynamic(x, self._packed, self.reduce_range)
        else:                                                                  # a scale per token
            amax = x.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)   # (..., 1)
            y = torch.ops.quantized.linear_dynamic(x / amax, self._packed, self.reduce_range) * amax
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, W8A8 (fbgemm)"
