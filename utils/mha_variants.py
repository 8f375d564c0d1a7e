"""Other ways to compute the same multi-head attention, built from one MultiHeadAttention's
weights so that all of them give the same output (notebook 06 compares them for speed).
"""
import torch
import torch.nn.functional as F
from torch import nn

from utils.multihead import MultiHeadAttention, MultiHeadAttentionWrapper


@torch.no_grad()
def wrapper_from(mha: MultiHeadAttention, context_length: int) -> MultiHeadAttentionWrapper:
    """A wrapper whose head h holds rows h*hd:(h+1)*hd of mha's projections (no biases)."""
    hd, H = mha.head_dim, mha.num_heads
    with torch.device(mha.out_proj.weight.device):  # built where mha lives
        wrapper = MultiHeadAttentionWrapper(mha.W_query.in_features, hd, context_length, 0.0, H)
    for h, head in enumerate(wrapper.heads):
        for name in ("W_query", "W_key", "W_value"):
            getattr(head, name).weight.copy_(getattr(mha, name).weight[h * hd:(h + 1) * hd])
    return wrapper


@torch.no_grad()
def torch_mha_from(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """PyTorch's nn.MultiheadAttention with mha's weights (its q/k/v live in one in_proj_weight)."""
    d = mha.out_proj.in_features
    if mha.W_query.in_features != d:
        raise ValueError("nn.MultiheadAttention needs d_in == d_out")
    with torch.device(mha.out_proj.weight.device):
        torch_mha = nn.MultiheadAttention(d, mha.num_heads, bias=True, batch_first=True)
    torch_mha.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
    torch_mha.in_proj_bias.zero_()
    torch_mha.out_proj.weight.copy_(mha.out_proj.weight)
    torch_mha.out_proj.bias.copy_(mha.out_proj.bias)
    return torch_mha


def torch_mha_forward(torch_mha: nn.MultiheadAttention, x):
    T = x.shape[1]
    # For nn.MultiheadAttention a boolean True also means "may not attend".
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    return torch_mha(x, x, x, attn_mask=mask, need_weights=False)[0]


def einsum_forward(mha: MultiHeadAttention, x):
    """Every step as one einsum over named axes: b batch, t/s tokens, h heads, d head_dim."""
    B, T, _ = x.shape
    H, hd = mha.num_heads, mha.head_dim
    W = [getattr(mha, n).weight.view(H, hd, -1) for n in ("W_query", "W_key", "W_value")]
    q, k, v = (torch.einsum("bti,hdi->bhtd", x, w) for w in W)
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / hd**0.5
    weights = torch.softmax(scores.masked_fill(mha.mask[:T, :T], float("-inf")), dim=-1)
    context = torch.einsum("bhts,bhsd->bthd", weights, v).reshape(B, T, H * hd)
    return mha.out_proj(context)


def sdpa_forward(mha: MultiHeadAttention, x):
    """The same module with PyTorch's fused scaled_dot_product_attention (is_causal: T_q == T_k)."""
    B, T, _ = x.shape
    H, hd = mha.num_heads, mha.head_dim
    q, k, v = (getattr(mha, n)(x).view(B, T, H, hd).transpose(1, 2) for n in ("W_query", "W_key", "W_value"))
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return mha.out_proj(context.transpose(1, 2).reshape(B, T, H * hd))


def all_variants(mha: MultiHeadAttention, context_length: int) -> dict:
    """name -> function of x, all computing mha(x) (dropout off)."""
    wrapper, torch_mha = wrapper_from(mha, context_length), torch_mha_from(mha)
    return {
        "wrapper of heads": lambda x: mha.out_proj(wrapper(x)),
        "MultiHeadAttention": mha,
        "einsum": lambda x: einsum_forward(mha, x),
        "F.scaled_dot_product_attention": lambda x: sdpa_forward(mha, x),
        "nn.MultiheadAttention": lambda x: torch_mha_forward(torch_mha, x),
    }
