"""The builders of notebook 11's input spaces (nb11/contract.py): value regimes, shapes, the
int8 layer's linears and quantize_model_'s models, one point at a time.

Value regimes keep every slice's, block's and tile's amax above 1e-4 (the floor of the all-zero
guard, where every guard gives the same scale): "tiny" puts every magnitude between 3e-4 and 1e-3,
so that a scale off by 1e-4 / 127 is off by a tenth, "near the floor" between 1.1e-4 and 1.9e-4 (a
floor of 2e-4 in place of the text's 1e-4 shows); the others keep magnitudes of at least 1e-2.
"""
import torch
from torch import nn

import utils.quantize as ref
from autograder.checks import generator, randn
from autograder.checks.nb11 import int8_layers as il

DIM_SHAPES = {"5x7": (5, 7), "3x2x16": (3, 2, 16), "64": (64,), "2x1x8": (2, 1, 8)}
MATRICES = {"70x130": (70, 130), "130x70": (130, 70), "5x3": (5, 3), "64x96": (64, 96), "200x300": (200, 300)}
ACTIVATIONS = {"2x3x64": (2, 3, 64), "4x96": (4, 96), "1x256": (1, 256), "2x2x384": (2, 2, 384)}
# in_features (a multiple of 16: the contract's precondition), out_features, the shape of x
LAYERS = {"32->24, x (2, 3, 32)": (32, 24, (2, 3, 32)), "64->8, x (1, 64)": (64, 8, (1, 64)),
          "16->40, x (2, 1, 2, 16)": (16, 40, (2, 1, 2, 16)), "128->72, x (3, 128)": (128, 72, (3, 128))}


def values(kind: str, shape, seed: int) -> torch.Tensor:
    """A tensor of one value regime (see the module's docstring)."""
    x = randn(*shape, seed=seed) * 1.5
    x = torch.where(x >= 0, 1.0, -1.0) * x.abs().clamp(min=1e-2)
    if kind == "negative peak":  # each row's largest magnitude is a negative number: max(x) is not max |x|
        at = x.abs().argmax(-1, keepdim=True)
        x = x.scatter(-1, at, -1.5 * x.abs().gather(-1, at))
    elif kind == "one-signed":  # every value negative
        x = -x.abs()
    elif kind == "thousands":
        x = x * 2000.0
    elif kind in ("tiny", "near the floor"):
        low, high = (3e-4, 1e-3) if kind == "tiny" else (1.1e-4, 1.9e-4)
        magnitude = low + (high - low) * torch.rand(*shape, generator=generator(seed + 1))
        x = torch.where(x >= 0, 1.0, -1.0) * magnitude
    return x


def dim_fits(point) -> bool:
    dim, shape = point["arguments:dim"], DIM_SHAPES[point["shape"]]
    return dim is None or -len(shape) <= dim < len(shape)


def _dim(point) -> dict:
    return {} if point["arguments:dim"] is None else {"dim": point["arguments:dim"]}


def absmax_point(point, seed):
    return (values(point["values"], DIM_SHAPES[point["shape"]], seed),), _dim(point)


def dequantize_point(point, seed):
    x = values(point["values"], DIM_SHAPES[point["shape"]], seed)
    return ref.absmax_quantize(x, **_dim(point)), {}


def _block(point) -> dict:
    return {} if point["blocks"] is None else {"block_size": point["blocks"]}


def fp8_weight_point(point, seed):
    return (values(point["values"], MATRICES[point["shape"]], seed),), _block(point)


def fp8_packed_point(point, seed):
    w = values(point["values"], MATRICES[point["shape"]], seed)
    return ref.fp8_block_quantize(w, point["blocks"] or 128), _block(point)


def tiles_fit(point) -> bool:  # the contract's precondition: K is a multiple of block_size
    return ACTIVATIONS[point["shape"]][-1] % (point["blocks"] or 128) == 0


def fp8_activation_point(point, seed):
    shape, b = ACTIVATIONS[point["shape"]], point["blocks"] or 128
    kind = point["values"]
    x = values("normal" if kind == "one loud tile" else kind, shape, seed)
    if kind == "one loud tile":  # the first token's first tile is 40 times louder than the rest
        x[(0,) * (len(shape) - 1)][:b] *= 40.0
    return (x,), _block(point)


# Int8WeightOnlyLinear: run as from_linear(linear)(x) (int8_views.built_and_run) ----------------
def int8_layer(d_in, d_out, bias, seed, shape, loud_row=None, quiet_channel=False, scale=1.0):
    """(nn.Linear whose output channel 1 is 50 times louder than the others, x)."""
    linear = il.make_linear(d_in, d_out, bias, seed)
    if quiet_channel:  # channel 0's amax between 1e-4 and 1e-3: its scale shows a floor added to amax
        with torch.no_grad():
            linear.weight[0] *= 1e-3
    x = randn(*shape, seed=seed + 1) * scale
    if loud_row is not None:
        x.view(-1, d_in)[loud_row] *= 10.0
    return (linear, x), {}


def int8_point(point, seed):
    d_in, d_out, shape = LAYERS[point["shape"]]
    kind = point["values"]
    return int8_layer(d_in, d_out, point["flag:bias"], seed, shape, loud_row=0 if kind == "one loud input row" else None,
                      quiet_channel=kind == "one quiet output channel")


# quantize_model_'s models ---------------------------------------------------------------------
class _NoLinear(nn.Module):
    """Nothing to quantize: a norm and an activation."""
    d_in = 16

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(x))


class _Deep(nn.Module):
    """Linears three levels down (a Sequential in a Sequential in a ModuleList), one without a bias,
    and a `blocks.1.0` as in the probe model."""
    d_in = 16

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 16, bias=False))),
                                     nn.Sequential(nn.Linear(16, 16), nn.Tanh())])
        self.head = nn.Linear(16, 8)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def _seeded(model, seed):
    g = generator(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.dim() > 1 else 4) + (1.0 if "norm.weight" in name else 0.0))
    return model.eval()


MODELS = {"the probe model": il.probe_model, "a model with no nn.Linear": lambda seed: _seeded(_NoLinear(), seed),
          "linears three levels down": lambda seed: _seeded(_Deep(), seed)}


def model_point(point, seed):
    skip = point["arguments:skip"]
    return (MODELS[point["shape"]](seed),), ({"skip": skip} if skip else {})
