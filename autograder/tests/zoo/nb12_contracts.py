"""Solutions of notebook 12 for its declared contracts and input spaces (issues 35, 36), merged into
nb12's WRONG and RIGHT: torch.rms_norm (declared not allowed), an eps of 1e-5 written into forward,
a view of a non-contiguous input, the caller's modules switched to train(); and right solutions the
rules allow: F.layer_norm (allowed: it subtracts a mean, so it does not do RMSNorm's job alone) on
[x, -x], whose mean is 0 and whose variance is mean(x**2), and float64 arithmetic cast back."""
import torch
import torch.nn.functional as F
from torch import nn

from autograder.tests.zoo.nb12 import MiniDeepSeek, RMSNorm, mtp_forward


class NormTorchFunction(RMSNorm):  # torch.rms_norm: F.rms_norm's operation, declared not allowed too
    def forward(self, x):
        return torch.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


class NormEps5InForward(RMSNorm):  # 1e-5 written into forward: the default 1e-6 and a given eps both ignored
    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight).to(x.dtype)


class NormView(RMSNorm):  # view(-1, dim) needs a contiguous x
    def forward(self, x):
        rows = x.float().view(-1, x.shape[-1])
        y = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return y.view(x.shape).to(x.dtype)


class NormLayerNormOfPair(RMSNorm):  # right: LayerNorm of [x, -x] is x / sqrt(mean(x**2) + eps) on its first half
    def forward(self, x):
        x32 = x.float()
        pair = torch.cat([x32, -x32], dim=-1)
        y = F.layer_norm(pair, (pair.shape[-1],), eps=self.eps)[..., :x.shape[-1]]
        return (y * self.weight.float()).to(x.dtype)


class NormFloat64(RMSNorm):  # right: float64 arithmetic, cast back to x's dtype
    def forward(self, x):
        x64 = x.double()
        return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.double()).to(x.dtype)


class ModelFlatView(MiniDeepSeek):  # the ids flattened with view(-1): a non-contiguous (B, T) refuses it
    def forward(self, tokens, start_pos=0, absorb=False):
        B, T = tokens.shape
        x = self.embed(tokens.view(-1)).view(B, T, -1)
        for layer in self.layers:
            x = layer(x, start_pos, absorb)
        return self.head(self.norm(x))


def mtp_forward_train(model, mtp_modules, tokens):  # leaves the caller's model and modules in train()
    model.train()
    mtp_modules.train()
    return mtp_forward(model, mtp_modules, tokens)


WRONG = {
    "RMSNorm": {
        "torch.rms_norm": (NormTorchFunction, "do not allow F.rms_norm, torch.rms_norm"),
        "eps 1e-5 written into forward": (NormEps5InForward, "ignores the eps"),
        "view of a non-contiguous x": (NormView, "crashed"),
    },
    "MiniDeepSeek": {"the ids flattened with view": (ModelFlatView, "crashed")},
    # the caller's modules left in train mode / 调用者的模块被留在 train 模式
    "mtp_forward": {"switches the model and modules to train mode": (mtp_forward_train, "left model in another mode")},
}

RIGHT = {
    "RMSNorm": {"F.layer_norm of [x, -x]": NormLayerNormOfPair, "float64 arithmetic, cast back": NormFloat64},
}
