"""Issue 36: notebook 02 solutions that the declared input spaces catch (WRONG: dtypes, layouts, sizes past
the hidden tests' constants) or that the rules allow (RIGHT: float32 inside, cast back)."""
import math

import torch
import torch.nn.functional as F

from autograder.tests.zoo.nb02 import v1_class, v2_class


def project_view(x, W_q, W_k, W_v):  # .view needs contiguous memory: crashes on x laid out with gaps
    flat = x.view(-1, x.shape[-1])
    return tuple((flat @ W).view(*x.shape[:-1], W.shape[-1]) for W in (W_q, W_k, W_v))


def project_float32_cast_back(x, W_q, W_k, W_v):
    return tuple((x.float() @ W.float()).to(x.dtype) for W in (W_q, W_k, W_v))


def v1_softmax_float32():
    """float32-only: softmax(..., dtype=torch.float32) times values of another dtype crashes (float64, bfloat16)."""
    class V1(v1_class()):
        def forward(self, x):
            q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
            return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1, dtype=torch.float32) @ v
    return V1


def v1_scale_three():
    """sqrt(3) hard-coded: the hidden tests' first d_out."""
    class V1(v1_class()):
        def forward(self, x):
            q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
            return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(3), dim=-1) @ v
    return V1


def v1_float32_cast_back():
    class V1(v1_class()):
        def forward(self, x):
            q, k, v = (x.float() @ W.float() for W in (self.W_query, self.W_key, self.W_value))
            return (torch.softmax(q @ k.mT / math.sqrt(k.shape[-1]), dim=-1) @ v).to(x.dtype)
    return V1


def v2_view_tokens():
    """Flattens the tokens with .view: crashes on inputs laid out with gaps."""
    class V2(v2_class()):
        def forward(self, x):
            flat = x.view(-1, x.shape[-1])
            q, k, v = (layer(flat).view(*x.shape[:-1], -1) for layer in (self.W_query, self.W_key, self.W_value))
            return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
    return V2


def v2_weights_float32():
    """float32-only: F.linear with the weights cast to float32 crashes on a module moved to float64 or bfloat16."""
    class V2(v2_class()):
        def forward(self, x):
            q, k, v = (F.linear(x, layer.weight.float(), layer.bias) for layer in (self.W_query, self.W_key, self.W_value))
            return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v
    return V2


def v2_softmax_float32_cast_back():
    class V2(v2_class()):
        def forward(self, x):
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            weights = torch.softmax((q @ k.transpose(-2, -1)).float() / math.sqrt(k.shape[-1]), dim=-1)
            return weights.to(v.dtype) @ v
    return V2


WRONG = {"project_qkv": {}, "SelfAttentionV1": {}, "SelfAttentionV2": {}}
WRONG["project_qkv"][".view on x laid out with gaps"] = (project_view, "crashed")
WRONG["SelfAttentionV1"].update({"softmax with dtype=torch.float32 (crashes in float64 and bfloat16)": (v1_softmax_float32(), "combines tensors of two dtypes"),
                                 "scale sqrt(3) hard-coded": (v1_scale_three(), "differs from the course's")})
WRONG["SelfAttentionV2"].update({".view on inputs laid out with gaps": (v2_view_tokens(), "crashed"),
                                 "weights cast to float32 (crashes in float64 and bfloat16)": (v2_weights_float32(), "combines tensors of two dtypes")})
RIGHT = {"project_qkv": {"float32, cast back": project_float32_cast_back},
         "SelfAttentionV1": {"float32, cast back": v1_float32_cast_back()},
         "SelfAttentionV2": {"softmax in float32, cast back": v2_softmax_float32_cast_back()}}
