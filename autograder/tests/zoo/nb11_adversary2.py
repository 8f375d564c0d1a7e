"""Solutions of notebook 11 written as an adversarial learner would, second round (merged into nb11's
WRONG and RIGHT): a wrong default block size, inputs changed in place, scales per input column,
and right solutions written differently (a ragged last dimension padded is one: a precondition)."""
import torch, math
import torch.nn.functional as F
from torch import nn
import utils.quantize as R
FP8 = torch.float8_e4m3fn

def absmax_item_scale(x, dim=None):  # a python float scale when dim is None
    x = x.float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp(min=1e-12) / 127
    q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return q, (scale.item() if dim is None else scale)
def absmax_uint8(x, dim=None):  # offset to 0..254 in uint8
    x = x.float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp(min=1e-12) / 127
    return (torch.round(x / scale).clamp(-127, 127) + 127).to(torch.uint8), scale
def absmax_amax_unsqueeze(x, dim=None):  # right: amax without keepdim, then unsqueeze; clamp to [-128, 127]
    x = x.float()
    amax = x.abs().max() if dim is None else x.abs().amax(dim=dim).unsqueeze(dim)
    scale = torch.where(amax > 0, amax, torch.ones_like(amax)) / 127
    return torch.round(x / scale).clamp(-128, 127).to(torch.int8), scale
def deq_squeeze(q, scale):  # squeezes the scale: (out, 1) -> (out,) broadcasts along the wrong axis
    return q.float() * scale.squeeze()
def deq_mul_float32(q, scale):  # right: torch.mul with a float scale tensor
    return torch.mul(q.to(torch.float32), scale.to(torch.float32))
def _blocks(w, b):
    n, k = w.shape
    return -(-n // b), -(-k // b)
def fp8q(mistake=None):
    def fp8_block_quantize(w, block_size=128):
        n, k = w.shape; nb, kb = _blocks(w, block_size)
        wf = w.float()
        if mistake == "in place":
            wf = w if w.dtype == torch.float32 else wf
        scale = torch.empty(nb, kb, device=w.device)
        for i in range(nb):
            for j in range(kb):
                scale[i, j] = wf[i*block_size:(i+1)*block_size, j*block_size:(j+1)*block_size].abs().amax().clamp(min=1e-12) / 448
        full = scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
        if mistake == "in place":
            wf.div_(full); out = wf.clamp(-448, 448).to(FP8)
        elif mistake == "no clamp":
            out = (wf / full).to(FP8)
        elif mistake == "scale per 128 whatever block_size":
            return fp8q()(w, 128)  # blocks of 128 whatever block_size
        else:
            out = (wf / full).clamp(-448, 448).to(FP8)
        return out, scale
    return fp8_block_quantize
def fp8d_default64(w_fp8, scale, block_size=64):  # wrong default block size
    n, k = w_fp8.shape
    return w_fp8.float() * scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
def fp8d_index(w_fp8, scale, block_size=128):  # right: index the scale by row // b, col // b
    n, k = w_fp8.shape
    r = torch.arange(n, device=w_fp8.device) // block_size; c = torch.arange(k, device=w_fp8.device) // block_size
    return w_fp8.float() * scale[r[:, None], c[None, :]]
def act_pads(x, block_size=128):  # right: pads a ragged last dimension (a precondition the caller keeps) instead of refusing it
    k = x.shape[-1]; pad = (-k) % block_size
    xp = F.pad(x.float(), (0, pad))
    tiles = xp.unflatten(-1, (-1, block_size))
    scale = tiles.abs().amax(-1).clamp(min=1e-12) / 448
    return (tiles / scale[..., None]).clamp(-448, 448).to(FP8).flatten(-2)[..., :k], scale
def act_keepdim(x, block_size=128):  # scale (..., K/b, 1)
    k = x.shape[-1]
    if k % block_size: raise ValueError(k)
    tiles = x.float().unflatten(-1, (-1, block_size))
    scale = tiles.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return (tiles / scale).clamp(-448, 448).to(FP8).flatten(-2), scale
def act_view2d(x, block_size=128):  # right: through a 2-D view
    k = x.shape[-1]
    if k % block_size: raise ValueError(f"{k} % {block_size}")
    t = x.float().reshape(-1, block_size)
    s = t.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return (t / s).clamp(-448, 448).to(FP8).reshape(x.shape), s.reshape(*x.shape[:-1], k // block_size)
def int8_cls(mistake=None):
    class Int8WeightOnlyLinear(nn.Module):
        def __init__(self, in_features, out_features, bias=True, device=None):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
            self.register_buffer("scale", torch.ones(out_features, device=device))
            self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)
        @classmethod
        def from_linear(cls, linear):
            layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device=linear.weight.device)
            w = linear.weight.detach().float()
            if mistake == "per input column":
                amax = w.abs().amax(0, keepdim=True).clamp(min=1e-12) / 127
                layer.weight.copy_(torch.round(w / amax).clamp(-127, 127).to(torch.int8))
                layer.register_buffer("scale", amax.squeeze(0))
            else:
                amax = w.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127
                layer.weight.copy_(torch.round(w / amax).clamp(-127, 127).to(torch.int8))
                layer.scale.copy_(amax.squeeze(1))
            if linear.bias is not None:
                if mistake == "bias a parameter":
                    del layer._buffers["bias"]; layer.bias = nn.Parameter(linear.bias.detach().clone())
                else:
                    layer.bias.copy_(linear.bias.detach())
            return layer
        def forward(self, x):
            if mistake == "per input column":
                y = (x * self.scale.to(x.dtype)) @ self.weight.to(x.dtype).T
            else:
                x2 = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()  # right: int8pack on any leading dims
                y = torch._weight_int8pack_mm(x2, self.weight, self.scale.to(torch.bfloat16)).to(x.dtype).unflatten(0, x.shape[:-1])
            if self.bias is not None:
                y = y + self.bias.to(x.dtype)
            return y
    return Int8WeightOnlyLinear
Int8WeightOnlyLinear = R.Int8WeightOnlyLinear  # the course's layer: these entries grade quantize_model_ alone


def qm_skip_str(model, skip=()):  # a string skip matched by substring: "head" in "blocks.0.head2"
    for name, module in list(model.named_modules()):
        for cn, child in list(module.named_children()):
            full = f"{name}.{cn}" if name else cn
            if isinstance(child, nn.Linear) and not any(s in full for s in skip):
                setattr(module, cn, Int8WeightOnlyLinear.from_linear(child))
    return model
def qm_get_submodule(model, skip=()):  # right: names first, then get_submodule of the parent
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in skip]
    for n in names:
        parent, _, child = n.rpartition(".")
        p = model.get_submodule(parent)
        setattr(p, child, Int8WeightOnlyLinear.from_linear(getattr(p, child)))
    return model

WRONG = {
    "absmax_quantize": {
        "a Python float scale when dim is None": (absmax_item_scale, "should be a torch.Tensor"),
        "uint8, offset by 127": (absmax_uint8, "torch.int8"),
    },
    "dequantize": {"scale squeezed": (deq_squeeze, "crashed")},
    "fp8_block_quantize": {
        "divides w in place": (fp8q("in place"), "changed its input w in place"),
        "blocks of 128 whatever block_size": (fp8q("scale per 128 whatever block_size"), "do not cover the ragged edge"),
    },
    # the default block size is DeepSeek-V3's 128 / 默认块大小是 DeepSeek-V3 的 128
    "fp8_block_dequantize": {"default block_size 64": (fp8d_default64, "crashed")},
    "fp8_activation_quantize": {"scale with keepdim": (act_keepdim, "(..., K // block_size)")},
    "Int8WeightOnlyLinear": {"one scale per input column": (int8_cls("per input column"), "one floating-point scale per output channel")},
    "quantize_model_": {"skip matched as a substring": (qm_skip_str, "FULL dotted name")},
}

RIGHT = {
    "absmax_quantize": {"amax, unsqueeze, clamp to [-128, 127]": absmax_amax_unsqueeze},
    "dequantize": {"torch.mul in float32": deq_mul_float32},
    "fp8_block_quantize": {"a scale per block in a loop": fp8q()},
    "fp8_block_dequantize": {"scale indexed by row // b, column // b": fp8d_index},
    # K not a multiple of block_size is a precondition (its contract): padding it is more general, and right
    "fp8_activation_quantize": {"through a 2-D view": act_view2d, "pads a ragged last dimension": act_pads},
    "Int8WeightOnlyLinear": {"int8pack, unflatten": int8_cls()},
    "quantize_model_": {"names first, then get_submodule": qm_get_submodule},
}
