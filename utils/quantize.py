"""Quantized inference (notebook 11): absmax int8, DeepSeek-V3's block-wise FP8, group-wise intN,
an int8 weight-only linear, and an int8 KV cache. The W8A8 layer (int8 activations too) is
`utils.w8a8`.

    .venv/bin/python -m utils.bench_quantize    # full-size decode speed, memory and accuracy

Conventions (CURRICULUM.md in the repository root, section 11):
- absmax int8 is symmetric: scale = amax / 127, q = round(x / scale) clamped to [-127, 127],
  x ~ q * scale. With `dim`, the amax is taken along `dim` (kept, for broadcasting): for a weight
  (out, in), `dim=-1` gives one scale per output channel, shape (out, 1).
- An all-zero slice would make x / scale = 0 / 0 = NaN: amax is clamped to at least AMAX_FLOOR
  (1e-4, the floor of DeepSeek's current `act_quant`: DeepSeek-V3's `inference/kernel.py` since
  the V3.1 update, DeepSeek-V3.2-Exp's kernel), so such a slice gets q = 0 and x_hat = 0. The
  floor changes no scale of a slice whose amax is at least 1e-4.
- FP8 e4m3 (`torch.float8_e4m3fn`) has a largest finite value of 448. DeepSeek-V3 stores weights
  in 128 x 128 blocks, each with its scale `weight_scale_inv` = amax / 448, so that
  dequantized block = fp8 block * scale (DeepSeek-V3 `inference/kernel.py`, `weight_dequant`).
  Activations get one scale per token per 128 channels (`act_quant`).
- Int8WeightOnlyLinear calls `torch._weight_int8pack_mm(x_bf16, w_int8, scale_bf16)`, PyTorch's
  int8 weight-only matmul: the int8 weight is read as is, never expanded into a float copy of the
  whole matrix, but each weight is widened to float and multiplied in float, so on a CPU the
  kernel is bound by that arithmetic rather than by the bytes it reads. Where torch has no such
  kernel for the layer's device, the layer computes (x @ q^T) * scale, which widens the weight.
- Every function follows the device of its input; `from_linear` builds the layer where the
  nn.Linear lives.
"""
import torch
from torch import nn

INT8_MAX = 127
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0          # torch.finfo(torch.float8_e4m3fn).max
AMAX_FLOOR = 1e-4        # an all-zero slice gets this amax instead of 0, and no 0 / 0 (DeepSeek's act_quant)


# absmax int8 -----------------------------------------------------------------------------
def absmax_quantize(x: torch.Tensor, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8: (q int8 like x, scale float). scale is a 0-d tensor, or has x's shape with
    size 1 along `dim` (one scale per slice along `dim`). Computed in float32: in bfloat16,
    x / scale keeps 8 significant bits and rounds to the wrong integer (even to 128)."""
    x = x.float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp(min=AMAX_FLOOR) / INT8_MAX
    q = torch.round(x / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale


# block-wise FP8 (DeepSeek-V3) ------------------------------------------------------------
def _blocks(n: int, block_size: int) -> int:
    return -(-n // block_size)  # ceil: a ragged edge still gets its own block


def _expand(scale: torch.Tensor, shape, block_size: int) -> torch.Tensor:
    """(ceil(N/b), ceil(K/b)) -> (N, K): every element gets the scale of its block."""
    n, k = shape
    return scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]


def fp8_block_quantize(w: torch.Tensor, block_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """w (N, K) -> (w_fp8 (N, K) float8_e4m3fn, scale (ceil(N/b), ceil(K/b)) float32).

    scale is DeepSeek-V3's `weight_scale_inv`: amax of the block / 448, so w ~ w_fp8 * scale.
    """
    n, k = w.shape
    nb, kb = _blocks(n, block_size), _blocks(k, block_size)
    padded = w.float().new_zeros(nb * block_size, kb * block_size)
    padded[:n, :k] = w.float().abs()
    amax = padded.view(nb, block_size, kb, block_size).amax(dim=(1, 3))   # (nb, kb)
    scale = amax.clamp(min=AMAX_FLOOR) / FP8_MAX
    w_fp8 = (w.float() / _expand(scale, (n, k), block_size)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return w_fp8, scale


def fp8_block_dequantize(w_fp8: torch.Tensor, scale: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    return w_fp8.float() * _expand(scale, w_fp8.shape, block_size)


def fp8_activation_quantize(x: torch.Tensor, block_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) -> (x_fp8 (..., K), scale (..., K / b)): one scale per token per block of channels."""
    k = x.shape[-1]
    if k % block_size:
        raise ValueError(f"the last dimension ({k}) must be a multiple of block_size ({block_size}), as in DeepSeek-V3's act_quant")
    tiles = x.float().unflatten(-1, (k // block_size, block_size))     # (..., K/b, b)
    scale = tiles.abs().amax(dim=-1).clamp(min=AMAX_FLOOR) / FP8_MAX    # (..., K/b); a zero tile: no 0 / 0
    x_fp8 = (tiles / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return x_fp8.flatten(-2), scale


def fp8_activation_dequantize(x_fp8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    b = x_fp8.shape[-1] // scale.shape[-1]
    return (x_fp8.float().unflatten(-1, (-1, b)) * scale.unsqueeze(-1)).flatten(-2)


def fp8_e4m3_grid(device=None) -> torch.Tensor:
    """Every finite value float8_e4m3fn can hold, sorted (253 distinct numbers, 0 counted once)."""
    every = torch.arange(256, dtype=torch.uint8, device=device).view(FP8).float()
    return torch.unique(every[every.isfinite()])


# int8 weight-only linear -----------------------------------------------------------------
def has_int8pack_mm(device) -> bool:
    """Whether torch has a `_weight_int8pack_mm` kernel for this device (the CPU does; others vary)."""
    key = {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta", "mps": "MPS", "xpu": "XPU"}.get(torch.device(device).type)
    return key is not None and torch._C._dispatch_has_kernel_for_dispatch_key("aten::_weight_int8pack_mm", key)


class Int8WeightOnlyLinear(nn.Module):
    """y = x W^T + b with W stored as int8 (out, in) and one float scale per output channel.

    The forward runs `torch._weight_int8pack_mm` on bfloat16 activations when in_features is a
    multiple of 16 (on AVX-512 that kernel steps K by 16: other sizes crash it or give wrong numbers
    without an error) on a device torch has it for; otherwise it computes (x @ q^T) * scale, which
    is exact but slow.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("scale", torch.ones(out_features, device=device))                    # (out,)
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8WeightOnlyLinear":
        """The layer, built where `linear` lives."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device=linear.weight.device)
        q, scale = absmax_quantize(linear.weight.detach(), dim=-1)             # (out, in), (out, 1)
        layer.weight.copy_(q)
        layer.scale.copy_(scale.squeeze(-1))
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)                                    # (M, in)
        # AVX-512 steps K by 16: K = 24 or 40 gives wrong numbers, no error
        if self.in_features % 16 == 0 and has_int8pack_mm(x.device):
            y = torch._weight_int8pack_mm(x2.to(torch.bfloat16).contiguous(), self.weight,
                                          self.scale.to(torch.bfloat16)).to(x.dtype)
        else:
            y = (x2 @ self.weight.to(x.dtype).T) * self.scale.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, int8"


def quantize_model_(model: nn.Module, skip: tuple[str, ...] = (), layer=None) -> nn.Module:
    """Replace every nn.Linear of `model` in place by `layer.from_linear(linear)`
    (Int8WeightOnlyLinear by default; utils.w8a8.W8A8Linear is the other), except those whose
    name in model.named_modules() is in `skip` (for example skip=("out_head",)). Returns model."""
    layer = layer or Int8WeightOnlyLinear
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and full not in skip:
                setattr(module, child_name, layer.from_linear(child))
    return model


# what rounding costs: group-wise intN and weights replaced by their round trip ------------
def group_roundtrip(w: torch.Tensor, bits: int = 4, group_size: int | None = 128) -> torch.Tensor:
    """w (out, in) quantized to symmetric `bits`-bit integers and back, one scale per
    `group_size` consecutive input features of each row (a group longer than the row is the
    row); group_size=None: one scale for the whole tensor."""
    qmax = 2 ** (bits - 1) - 1                      # int4: [-7, 7], like absmax int8's [-127, 127]
    w = w.float()
    if group_size is None:
        groups = w.reshape(1, 1, -1)
    else:
        g = min(group_size, w.shape[-1])
        if w.shape[-1] % g:
            raise ValueError(f"in_features ({w.shape[-1]}) must be a multiple of group_size ({g})")
        groups = w.unflatten(-1, (-1, g))                                       # (out, in / g, g)
    scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR) / qmax
    return (torch.round(groups / scale).clamp(-qmax, qmax) * scale).reshape(w.shape)


def roundtrip_weights_(model: nn.Module, roundtrip) -> nn.Module:
    """Every nn.Linear's weight replaced, in place, by roundtrip(weight) (quantize, then
    dequantize): the outputs of a model that computes with exactly those rounded weights."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(roundtrip(module.weight))
    return model


# sizes and the int8 KV cache ------------------------------------------------------------
def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's state_dict (int8 weights count 1 byte each, caches registered as
    non-persistent buffers do not count); shared tensors once."""
    seen, total = set(), 0
    for t in model.state_dict().values():
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def quantize_kv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys or values (B, H, T, hd) -> int8 with one scale per token and head, (B, H, T, 1)."""
    return absmax_quantize(x, dim=-1)


class Int8KVCache:
    """utils.kv_cache.KVCache's interface with keys and values stored as int8, one scale per
    token and head: 1 byte per element plus 4 per head vector, instead of 4 (float32).

    It saves memory, not decode bandwidth: `update` dequantizes the whole cache at every step and
    attention then reads float32 keys and values, more bytes than a float32 cache. Serving
    kernels dequantize inside attention, tile by tile, so only the int8 bytes cross memory."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.max_seq_len, self.dtype = max_seq_len, dtype
        shape = (batch_size, num_kv_heads, max_seq_len, head_dim)
        self.k = torch.zeros(shape, dtype=torch.int8, device=device)
        self.v = torch.zeros_like(self.k)
        self.k_scale = torch.zeros(*shape[:-1], 1, device=device)   # (B, H_kv, max_seq_len, 1)
        self.v_scale = torch.zeros_like(self.k_scale)
        self.seq_len = 0

    def update(self, k_new, v_new):  # (B, H_kv, T_new, hd) twice -> dequantized (B, H_kv, seq_len, hd) twice
        start, end = self.seq_len, self.seq_len + k_new.shape[2]
        if end > self.max_seq_len:
            raise ValueError(f"cache holds max_seq_len={self.max_seq_len} positions, {end} requested")
        self.k[:, :, start:end], self.k_scale[:, :, start:end] = quantize_kv(k_new)
        self.v[:, :, start:end], self.v_scale[:, :, start:end] = quantize_kv(v_new)
        self.seq_len = end
        k = dequantize(self.k[:, :, :end], self.k_scale[:, :, :end]).to(self.dtype)
        v = dequantize(self.v[:, :, :end], self.v_scale[:, :, :end]).to(self.dtype)
        return k, v

    def reset(self):
        self.seq_len = 0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v, self.k_scale, self.v_scale))
