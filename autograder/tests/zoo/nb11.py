"""Solutions of notebook 11 that grading must reject (WRONG) or accept (RIGHT)."""
import functools

import torch
import torch.nn.functional as F
from torch import nn

FP8 = torch.float8_e4m3fn


# absmax_quantize -------------------------------------------------------------------------
def absmax(mistake=None):
    def absmax_quantize(x, dim=None):
        x = x if mistake in ("bfloat16", "no clamp") else x.float()
        a = x.abs() if mistake != "max" else x
        if mistake == "mean":
            amax = a.mean() if dim is None else a.mean(dim=dim, keepdim=True)
        else:
            amax = a.amax() if dim is None else a.amax(dim=dim, keepdim=True)
        if mistake == "wrong axis" and dim is not None:
            amax = a.amax(dim=1 - dim if dim >= 0 else 0, keepdim=True)
        if mistake != "no guard":
            amax = amax.clamp(min=1e-4)
        scale = amax / (128 if mistake == "128" else 127)
        if mistake == "bfloat16":  # a float32 scale, but a 0-d one: x / scale stays bfloat16
            scale = scale.float()
            r = x / scale
        else:
            r = (x / scale) if mistake == "no clamp" else (x.float() / scale.float())
        r = r.trunc() if mistake == "trunc" else r.round()
        if mistake != "no clamp":
            r = r.clamp(-127, 127)
        if mistake == "inverse":
            scale = 1 / scale
        return r.to(torch.int8), (scale.squeeze(dim) if mistake == "no keepdim" and dim is not None else scale)
    return absmax_quantize


def absmax_in_place(x, dim=None):  # right values, but x /= scale divides the caller's float32 tensor
    amax = (x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)).float().clamp(min=1e-4)
    scale = amax / 127
    x = x.float()  # no copy when x is float32 already
    x /= scale
    return x.round().clamp(-127, 127).to(torch.int8), scale


def absmax_multiply(x, dim=None):  # multiply by 127 / amax, clamp with torch.clamp, 0-d via max()
    amax = x.detach().float().abs().max() if dim is None else x.float().abs().max(dim=dim, keepdim=True).values
    amax = torch.where(amax == 0, torch.ones_like(amax), amax)  # another guard of the all-zero slice
    q = torch.clamp(torch.round(x.float() * (127.0 / amax)), min=-127, max=127).to(torch.int8)
    return q, amax / 127.0


def absmax_where(x, dim=None):  # float64 arithmetic, scale kept as float64, torch.where clamp
    xd = x.double()
    amax = xd.abs().amax(dim=() if dim is None else dim, keepdim=dim is not None) + 1e-30  # a tiny epsilon guards 0 / 0
    r = torch.round(xd / (amax / 127))
    r = torch.where(r > 127, torch.full_like(r, 127), torch.where(r < -127, torch.full_like(r, -127), r))
    return r.to(torch.int8), amax / 127


# dequantize ------------------------------------------------------------------------------
def deq_divide(q, scale):
    return q.float() / scale


def deq_int(q, scale):
    return (q * scale).to(torch.int32)


def deq_over_127(q, scale):
    return q.float() * scale / 127


def deq_flat_scale(q, scale):
    return q.float() * scale.flatten()[0]


def deq_bf16(q, scale):
    return q.to(torch.bfloat16) * scale.to(torch.bfloat16)


def deq_mul(q, scale):
    return q.to(scale.dtype) * scale


def deq_torch_mul(q, scale):
    return torch.mul(q.double(), scale.double()).float()


# fp8_block_quantize ----------------------------------------------------------------------
def _padded_amax(w, b, in_dtype=False):
    n, k = w.shape
    nb, kb = -(-n // b), -(-k // b)
    p = F.pad(w.abs() if in_dtype else w.abs().float(), (0, kb * b - k, 0, nb * b - n))
    return p.reshape(nb, b, kb, b).amax(dim=(1, 3))


def fp8_quant(mistake=None):
    def fp8_block_quantize(w, block_size=128):
        n, k = w.shape
        b = block_size
        if mistake == "ragged":
            w = w[: n // b * b, : k // b * b]
        amax = _padded_amax(w, b, in_dtype=mistake == "bfloat16")
        if mistake == "per tensor":
            amax = torch.full_like(amax, float(w.abs().max()))
        if mistake != "no guard":
            amax = amax.clamp(min=1e-4)
        scale = amax / (127.0 if mistake == "127" else 448.0)
        full = scale.repeat_interleave(b, 0)[: w.shape[0]].repeat_interleave(b, 1)[:, : w.shape[1]]
        q = (w / full).clamp(-448, 448).to(FP8)
        if mistake == "ragged":
            q = F.pad(q.float(), (0, k - w.shape[1], 0, n - w.shape[0])).to(FP8)
        return q, (1 / scale if mistake == "inverse" else scale)
    return fp8_block_quantize


def fp8_quant_loops(w, block_size=128, on_cpu=False):  # block by block, slicing handles the ragged edge
    n, k = w.shape
    rows, cols = range(0, n, block_size), range(0, k, block_size)
    device = None if on_cpu else w.device  # on_cpu: right values, results left on the CPU
    scale = torch.empty(len(rows), len(cols), device=device)
    q = torch.empty(n, k, dtype=FP8, device=device)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            block = w[r:r + block_size, c:c + block_size].float()
            scale[i, j] = block.abs().max() / 448
            q[r:r + block_size, c:c + block_size] = (block / scale[i, j]).nan_to_num(0.0).to(FP8)  # 0 / 0 -> 0
    return q, scale


# fp8_block_dequantize --------------------------------------------------------------------
def fp8_deq(mistake=None):
    def fp8_block_dequantize(w_fp8, scale, block_size=128):
        n, k = w_fp8.shape
        if mistake == "tile":
            full = scale.repeat(block_size, block_size)[:n, :k]
        else:
            full = scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
        return w_fp8.float() / full if mistake == "divide" else w_fp8.float() * full
    return fp8_block_dequantize


def fp8_deq_kron(w_fp8, scale, block_size=128):
    n, k = w_fp8.shape
    full = torch.kron(scale, torch.ones(block_size, block_size, device=scale.device))[:n, :k]
    return w_fp8.to(torch.float32) * full


def fp8_deq_loops(w_fp8, scale, block_size=128):
    out = w_fp8.float()
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            out[i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size] *= scale[i, j]
    return out


# fp8_activation_quantize -----------------------------------------------------------------
def fp8_act(mistake=None):
    def fp8_activation_quantize(x, block_size=128):
        tiles = (x if mistake == "bfloat16" else x.float()).unflatten(-1, (-1, block_size))  # (..., K/b, b)
        if mistake == "per tensor":
            amax = tiles.abs().amax().expand(tiles.shape[:-1])
        elif mistake == "per token":
            amax = tiles.abs().amax(dim=(-2, -1))[..., None]
        elif mistake == "shared by the batch" and x.dim() > 2:  # one scale per position and block, over all batch items
            amax = tiles.abs().amax(dim=(0, -1), keepdim=True).squeeze(-1).expand(tiles.shape[:-1])
        else:
            amax = tiles.abs().amax(dim=-1)
        if mistake != "no guard":
            amax = amax.clamp(min=1e-4)
        scale = amax / (127.0 if mistake == "127" else 448.0)
        if mistake == "per tensor":
            scale = scale.flatten()[:1]
        full = scale.unsqueeze(-1) if mistake != "per tensor" else scale
        q = (tiles / full).clamp(-448, 448).to(FP8).flatten(-2)
        return q, (1 / scale if mistake == "inverse" else scale)
    return fp8_activation_quantize


def fp8_act_view(x, block_size=128):
    shape = x.shape
    flat = x.reshape(-1, shape[-1] // block_size, block_size).float()
    scale = torch.maximum(flat.abs().max(dim=-1, keepdim=True).values, torch.tensor(1e-6)) / 448
    return (flat / scale).to(FP8).reshape(shape), scale.squeeze(-1).reshape(*shape[:-1], -1)


# Int8WeightOnlyLinear --------------------------------------------------------------------
FLOAT_COPIES = {}


def int8_linear(mistake=None, scale_shape="flat"):
    class Int8Linear(nn.Module):
        def __init__(self, in_features, out_features, bias=True):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.register_buffer("w_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
            self.register_buffer("scale", torch.ones(out_features, 1) if scale_shape == "column" else torch.ones(out_features))
            self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

        @classmethod
        def from_linear(cls, linear):
            FLOAT_COPIES.clear()  # one mistake's copies must not leak into the next candidate's check
            layer = cls(linear.in_features, linear.out_features, linear.bias is not None)
            w = linear.weight.detach()
            amax = w.abs().amax() if mistake == "per tensor" else w.abs().amax(dim=1)
            scale = (amax / 127).expand(w.shape[0])
            with torch.no_grad():
                layer.w_int8.copy_(torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
                layer.scale.copy_(scale.reshape(layer.scale.shape))
                if linear.bias is not None:
                    layer.bias.copy_(linear.bias.detach())
            if mistake == "keeps float":
                layer.register_buffer("w_float", w.clone())
            elif mistake == "float copy in a list":  # out of sight of parameters() and buffers()
                layer.cache = [w.clone()]
            elif mistake == "plain attribute":  # not a buffer: state_dict and .to() miss it
                q = layer._buffers.pop("w_int8")
                layer.w_int8 = q
            elif mistake == "reads the linear":  # a closure over the float layer, used by forward
                layer.source = lambda: linear
            elif mistake == "float copy in a global":  # a module-level dict, out of the layer's sight
                FLOAT_COPIES[id(layer)] = w.clone()
            return layer

        def forward(self, x):
            s = self.scale.reshape(-1)
            if mistake == "casts its scale":  # the buffer itself becomes bfloat16 at the first call
                self.scale = self.scale.bfloat16()
                s = self.scale.reshape(-1)
            if mistake == "reads the linear":
                y = F.linear(x, self.source().weight)
            elif mistake == "float copy in a global":
                y = F.linear(x, FLOAT_COPIES[id(self)])
            elif mistake == "view":  # view() needs a contiguous input
                y = torch._weight_int8pack_mm(x.view(-1, self.in_features).bfloat16(), self.w_int8, s.bfloat16())
                y = y.to(x.dtype).view(*x.shape[:-1], self.out_features)
            elif mistake == "row loop":  # exact, never a big float tensor, but one small matmul per row
                xs = x.reshape(-1, self.in_features)
                y = torch.stack([xs @ self.w_int8[i].to(x.dtype) * s[i] for i in range(self.out_features)], dim=-1)
                y = y.reshape(*x.shape[:-1], self.out_features)
            elif mistake == "dequantize to":  # one expression, no .float(): still a float weight per call
                y = F.linear(x, self.w_int8.to(x.dtype) * s.unsqueeze(1))
            elif mistake == "dequantize buffer":  # a float buffer made once, refilled in place at every call
                if not hasattr(self, "_w"):
                    self._w = torch.empty(self.out_features, self.in_features)
                y = F.linear(x, self._w.copy_(self.w_int8).mul_(s[:, None]))
            elif mistake in ("dequantize", "keeps float"):
                w = self.w_int8.float() * s[:, None] if mistake == "dequantize" else self.w_float
                y = F.linear(x, w)
            else:  # the kernel reads each row of A in one piece: contiguous
                y = torch._weight_int8pack_mm(x.reshape(-1, self.in_features).bfloat16().contiguous(), self.w_int8, s.bfloat16())
                y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
            if self.bias is not None and mistake != "no bias":  # a float32 bias makes a bfloat16 input's output float32
                y = y + (self.bias if mistake == "float32 bias" else self.bias.to(y.dtype))
            return y
    return Int8Linear


class Int8Flatten(nn.Module):
    """Another layout: codes as `qweight`, scales (out, 1) kept in bfloat16 (the kernel's dtype),
    the bias a buffer; flatten / unflatten in place of reshape."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.ones(out_features, 1, dtype=torch.bfloat16))
        self.register_buffer("b", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear):
        out_features, in_features = linear.weight.shape
        layer = cls(in_features, out_features, linear.bias is not None)
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-4) / 127
        layer.qweight.copy_(torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8))
        layer.scales.copy_(scale)
        if linear.bias is not None:
            layer.b.copy_(linear.bias.detach())
        return layer

    def forward(self, x):
        y = torch._weight_int8pack_mm(x.flatten(0, -2).to(torch.bfloat16).contiguous(), self.qweight, self.scales.flatten())
        y = y.unflatten(0, x.shape[:-1]).to(x.dtype)
        return y if self.b is None else y + self.b.to(x.dtype)


# An exercise that uses an earlier one is graded with the course's version of it: these
# notebooks' later classes call a broken absmax_quantize / Int8WeightOnlyLinear and still pass.
_NOTEBOOK_SOURCE = """
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
        q, scale = absmax_quantize(linear.weight.detach(), dim=-1)
        layer.weight.copy_(q)
        layer.scale.copy_(scale.squeeze(-1))
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach())
        return layer

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = torch._weight_int8pack_mm(x2, self.weight, self.scale.to(torch.bfloat16)).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize_model_(model, skip=()):
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full_name = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and full_name not in skip:
                setattr(module, child_name, Int8WeightOnlyLinear.from_linear(child))
    return model
"""


def notebook_with(**earlier):
    """The notebook's Int8WeightOnlyLinear and quantize_model_, defined over the given earlier answers."""
    namespace = {"__name__": "__main__", "torch": torch, "nn": nn, **earlier}
    exec(compile(_NOTEBOOK_SOURCE, "<notebook 11>", "exec"), namespace)
    return namespace


def over_broken_int8():
    """quantize_model_ of a notebook whose Int8WeightOnlyLinear drops the bias."""
    namespace = notebook_with(absmax_quantize=absmax())
    namespace["Int8WeightOnlyLinear"] = int8_linear("no bias")
    return namespace["quantize_model_"]


# quantize_model_ -------------------------------------------------------------------------
Int8Linear = int8_linear()


def qm_child_name(model, skip=()):  # compares the child's own name, not the dotted one
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name not in skip:
                setattr(module, child_name, Int8Linear.from_linear(child))
    return model


def qm_top_level(model, skip=()):
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear) and name not in skip:
            setattr(model, name, Int8Linear.from_linear(child))
    return model


def qm_ignores_skip(model, skip=()):
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8Linear.from_linear(child))
    return model


def qm_no_skip_param(model):
    return qm_ignores_skip(model)


def qm_copy(model, skip=()):
    import copy
    return qm_named(copy.deepcopy(model), skip)


def qm_returns_none(model, skip=()):
    qm_named(model, skip)


def qm_named(model, skip=()):
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and name not in skip:
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, Int8Linear.from_linear(module))
    return model


def qm_prefix(model, skip=()):  # skip=("blocks.1",) would keep every linear under blocks.1: the contract names linears
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and not any(full.startswith(s) for s in skip):
                setattr(module, child_name, Int8Linear.from_linear(child))
    return model


def qm_first_linear_device(model, skip=()):  # the device of the first nn.Linear: a model without one crashes
    device = next(m for m in model.modules() if isinstance(m, nn.Linear)).weight.device
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and full not in skip:
                setattr(module, child_name, Int8Linear.from_linear(child).to(device))
    return model


def qm_modules_dict(model, skip=(), prefix=""):  # through each module's _modules dict, depth first
    for name, child in list(model._modules.items()):
        full = prefix + name
        if type(child) is nn.Linear and full not in set(skip):
            model._modules[name] = Int8Linear.from_linear(child)
        elif child is not None:
            qm_modules_dict(child, skip, full + ".")
    return model


def qm_recursive(model, skip=(), prefix=""):
    for name, child in model.named_children():
        full = prefix + name
        if isinstance(child, nn.Linear):
            if full not in skip:
                model.add_module(name, Int8Linear.from_linear(child))
        else:
            qm_recursive(child, skip, full + ".")
    return model


WRONG = {
    "absmax_quantize": {
        # it divides the caller's tensor in place / 它原地除了调用者的张量
        "divides x in place": (absmax_in_place, "changed its input x in place"),
        "max not abs": (absmax("max"), "ABSOLUTE"),
        "mean": (absmax("mean"), "mean"),
        "trunc": (absmax("trunc"), "truncation"),
        "no clamp": (absmax("no clamp"), "clamp"),
        "wrong axis": (absmax("wrong axis"), "wrong axis"),
        "no keepdim": (absmax("no keepdim"), "broadcasting"),
        "divide by 128": (absmax("128"), "not / 128"),
        "inverse scale": (absmax("inverse"), "inverted"),
        "zero slice 0 / 0": (absmax("no guard"), "all-zero"),
        "bfloat16 arithmetic": (absmax("bfloat16"), "bfloat16"),
    },
    "dequantize": {
        "divide": (deq_divide, "multiply"),
        "integers": (deq_int, "floating-point"),
        "over 127": (deq_over_127, "127 again"),
        "first scale only": (deq_flat_scale, "broadcast"),
        "bfloat16 result": (deq_bf16, "float32"),
    },
    "fp8_block_quantize": {
        "127": (fp8_quant("127"), "448"),
        "results made on the CPU": (functools.partial(fp8_quant_loops, on_cpu=True), "another device"),
        "inverse": (fp8_quant("inverse"), "inverse"),
        "ragged": (fp8_quant("ragged"), "ragged"),
        "per tensor": (fp8_quant("per tensor"), "each block"),
        "zero block 0 / 0": (fp8_quant("no guard"), "all-zero block"),
        "bfloat16 scale": (fp8_quant("bfloat16"), "bfloat16"),
    },
    "fp8_block_dequantize": {
        "divide": (fp8_deq("divide"), "divides"),
        "tile": (fp8_deq("tile"), "ITS block"),
    },
    "fp8_activation_quantize": {
        "scales shared by the batch's items": (fp8_act("shared by the batch"), "over that token's block"),
        "per tensor": (fp8_act("per tensor"), "whole tensor"),
        "per token": (fp8_act("per token"), "per token AND per block"),
        "127": (fp8_act("127"), "448"),
        "inverse": (fp8_act("inverse"), "inverse"),
        "padding token 0 / 0": (fp8_act("no guard"), "padding token"),
        "bfloat16 scale": (fp8_act("bfloat16"), "bfloat16"),
    },
    "Int8WeightOnlyLinear": {
        "dequantize every call": (int8_linear("dequantize"), "whole weight at every call"),
        "dequantize with .to": (int8_linear("dequantize to"), "whole weight at every call"),
        "dequantize into a buffer": (int8_linear("dequantize buffer"), "whole weight at every call"),
        "python loop over rows": (int8_linear("row loop"), "Python loops"),
        "keeps float weight": (int8_linear("keeps float"), "floating-point copy"),
        "no bias": (int8_linear("no bias"), "bias is dropped"),
        "per tensor": (int8_linear("per tensor"), "one scale for the whole weight"),
        "float copy in a list": (int8_linear("float copy in a list"), "floating-point copy"),
        "int8 weight not a buffer": (int8_linear("plain attribute"), "register_buffer"),
        "reads the nn.Linear it came from": (int8_linear("reads the linear"), "still reads the nn.Linear"),
        "float copy in a global dict": (int8_linear("float copy in a global"), "outside the layer"),
        "view on a non-contiguous input": (int8_linear("view"), "crashed"),
        "casts its scale buffer": (int8_linear("casts its scale"), "changes the layer's buffers"),
        "bias added in float32": (int8_linear("float32 bias"), "must return the input's dtype"),
    },
    "quantize_model_": {
        "top level only": (qm_top_level, "nested"),
        "ignores skip": (qm_ignores_skip, "output head"),
        "no skip parameter": (qm_no_skip_param, "skip="),
        "copy": (qm_copy, "in place"),
        "returns None": (qm_returns_none, "in place"),
        "child name against skip": (qm_child_name, "FULL dotted name"),
        "skip as a prefix": (qm_prefix, "FULL dotted name"),
        "device of the first nn.Linear": (qm_first_linear_device, "crashed"),
    },
}

RIGHT = {
    "absmax_quantize": {"multiply": absmax_multiply, "float64": absmax_where},
    "dequantize": {"to scale dtype": deq_mul, "torch.mul float64": deq_torch_mul},
    "fp8_block_quantize": {"pad and reshape": fp8_quant(), "loops": fp8_quant_loops},
    "fp8_block_dequantize": {"repeat_interleave": fp8_deq(), "kron": fp8_deq_kron, "loops": fp8_deq_loops},
    "fp8_activation_quantize": {"unflatten": fp8_act(), "reshape": fp8_act_view},
    "Int8WeightOnlyLinear": {"int8pack flat scale": int8_linear(), "column scale": int8_linear(scale_shape="column"),
                             "bfloat16 scales, flatten": Int8Flatten,
                             "over a wrong absmax_quantize": notebook_with(absmax_quantize=absmax("trunc"))["Int8WeightOnlyLinear"]},
    "quantize_model_": {"named_modules": qm_named, "recursive": qm_recursive, "_modules dict": qm_modules_dict,
                        "over a wrong Int8WeightOnlyLinear": over_broken_int8()},
}

from autograder.tests.zoo import nb11_adversary2  # noqa: E402

for _exercise, _entries in nb11_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb11_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)

from autograder.tests.zoo import nb11_contracts  # noqa: E402

for _exercise, _entries in nb11_contracts.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb11_contracts.RIGHT.items():
    RIGHT[_exercise].update(_entries)
