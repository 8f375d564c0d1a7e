"""Solutions of notebook 14 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F

import utils.flash_attention as ref

NEG_INF = float("-inf")


# online_softmax --------------------------------------------------------------------------
def _online(x, block_size, rescale=True, guard=True, subtract=True):
    m, l = x.new_full(x.shape[:-1], NEG_INF), x.new_zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1)) if subtract else torch.zeros_like(m)
        shift = torch.where(torch.isinf(m_new), 0.0, m_new) if guard else m_new
        l = l * (torch.exp(m - shift) if rescale else 1.0) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    shift = torch.where(torch.isinf(m), 0.0, m) if guard else m
    return torch.exp(x - shift[..., None]) / l[..., None]


def softmax_sum_not_rescaled(x, block_size):
    return _online(x, block_size, rescale=False)


def softmax_no_maximum(x, block_size):
    return _online(x, block_size, subtract=False)


def softmax_inf_minus_inf(x, block_size):
    return _online(x, block_size, guard=False)


def softmax_two_passes(x, block_size):
    m = x.amax(dim=-1, keepdim=True)  # a full-row maximum first: not online
    l = sum(torch.exp(x[..., s:s + block_size] - m).sum(dim=-1, keepdim=True) for s in range(0, x.shape[-1], block_size))
    return torch.exp(x - m) / l


def softmax_fixed_blocks(x, block_size):
    return _online(x, 8)  # block_size ignored: blocks of 8 whatever the caller asks


def softmax_torch(x, block_size):
    return torch.softmax(x, dim=-1)


def softmax_logaddexp(x, block_size):
    lse = x.new_full(x.shape[:-1], NEG_INF)  # a running log-sum-exp is the same state as (m, l)
    for start in range(0, x.shape[-1], block_size):
        lse = torch.logaddexp(lse, torch.logsumexp(x[..., start:start + block_size], dim=-1))
    return torch.exp(x - lse[..., None])


def softmax_padded_blocks(x, block_size):
    n = x.shape[-1]
    padded = F.pad(x, (0, -n % block_size), value=NEG_INF)
    blocks = padded.reshape(*x.shape[:-1], -1, block_size)  # (..., n_blocks, block)
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for b in range(blocks.shape[-2]):
        block_max = blocks[..., b, :].max(dim=-1).values
        m_new = torch.max(m, block_max)
        safe = m_new.masked_fill(m_new == NEG_INF, 0.0)
        l = l * torch.exp(m - safe) + torch.exp(blocks[..., b, :] - safe.unsqueeze(-1)).sum(-1)
        m = m_new
    return torch.exp(x - m.masked_fill(m == NEG_INF, 0.0).unsqueeze(-1)) / l.unsqueeze(-1)


# flash_attention_forward -----------------------------------------------------------------
def _mask(i0, i1, j0, j1, offset):
    return torch.arange(j0, j1)[None, :] > torch.arange(i0, i1)[:, None] + offset


def _forward(q, k, v, causal=False, block_q=64, block_k=64, rescale_l=True, rescale_acc=True, divide_inside=False,
             lse_max=True, top_left=False, skip="right", mask=True):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1 / math.sqrt(q.shape[-1]), 0 if top_left else T_k - T_q
    outs, lses = [], []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i = q[..., i0:i1, :]
        m = torch.full(q_i.shape[:-1], NEG_INF, dtype=q.dtype)
        l = torch.zeros(q_i.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            if causal and skip == "right" and j0 > i1 - 1 + offset:
                continue
            if causal and skip == "partial" and j1 - 1 > i0 + offset:
                continue
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal and mask:
                s = s.masked_fill(_mask(i0, i1, j0, j1, offset), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = (alpha * l if rescale_l else l) + p.sum(dim=-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v[..., j0:j1, :]
            if divide_inside:
                acc = acc / l[..., None]
            m = m_new
        outs.append(acc if divide_inside else acc / l[..., None])
        lses.append(m + torch.log(l) if lse_max else torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def forward_sum_not_rescaled(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, rescale_l=False)


def forward_acc_not_rescaled(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, rescale_acc=False)


def forward_divides_inside(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, divide_inside=True)


def forward_lse_without_max(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, lse_max=False)


def forward_top_left(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, top_left=True)


def forward_skips_partial_tiles(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, skip="partial")


def forward_no_skip(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, skip="never")


def forward_diagonal_unmasked(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal, block_q, block_k, mask=False)


def forward_ignores_block_sizes(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal)  # always tiles of 64 x 64


def forward_lse_keepdim(q, k, v, causal=False, block_q=64, block_k=64):
    out, lse = _forward(q, k, v, causal, block_q, block_k)
    return out, lse[..., None]


def forward_full_softmax(q, k, v, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # the whole (T_q, T_k) matrix
    if causal:
        s = s.masked_fill(_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2]), NEG_INF)
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def forward_sdpa(q, k, v, causal=False, block_q=64, block_k=64):
    out = F.scaled_dot_product_attention(q, k, v)
    return out, out.sum(-1)


def forward_calls_utils(q, k, v, causal=False, block_q=64, block_k=64):
    return ref.flash_attention_forward(q, k, v, causal, block_q, block_k)


def forward_keys_outside(q, k, v, causal=False, block_q=64, block_k=64):
    """FlashAttention-1's loop order: key blocks outside, with m, l and the output kept for every
    query (the output's size) and the output kept normalised (multiplied back by the old sum)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    offset = T_k - T_q
    m = q.new_full(q.shape[:-1], NEG_INF)
    l = q.new_zeros(q.shape[:-1])
    o = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            if causal and j0 > i1 - 1 + offset:
                continue
            s = torch.einsum("...id,...jd->...ij", q[..., i0:i1, :], k[..., j0:j1, :]) / math.sqrt(q.shape[-1])
            if causal:
                s = torch.where(_mask(i0, i1, j0, j1, offset), NEG_INF, s)
            m_old, l_old = m[..., i0:i1], l[..., i0:i1]
            m_new = torch.maximum(m_old, s.max(dim=-1).values)
            p = torch.exp(s - m_new.unsqueeze(-1))
            l_new = torch.exp(m_old - m_new) * l_old + p.sum(-1)
            o[..., i0:i1, :] = ((torch.exp(m_old - m_new) * l_old).unsqueeze(-1) * o[..., i0:i1, :]
                                + torch.einsum("...ij,...jd->...id", p, v[..., j0:j1, :])) / l_new.unsqueeze(-1)
            m[..., i0:i1], l[..., i0:i1] = m_new, l_new
    return o, m + l.log()


def forward_per_head(q, k, v, causal=False, block_q=64, block_k=64):
    """One (batch item, head) at a time, 2-d tiles."""
    B, H = q.shape[:2]
    outs, lses = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype), torch.empty(q.shape[:-1], dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            outs[b, h], lses[b, h] = _forward(q[b, h], k[b, h], v[b, h], causal, block_q, block_k)
    return outs, lses


# flash_attention_backward ----------------------------------------------------------------
def _backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64, d_from_p=False, p_for_dv="lse",
              scale_grads=True, use_causal=True):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1 / math.sqrt(q.shape[-1]), T_k - T_q
    causal = causal and use_causal
    D = (grad_out * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            if causal and j0 > i1 - 1 + offset:
                continue
            s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(_mask(i0, i1, j0, j1, offset), NEG_INF)
            p = torch.exp(s - lse[..., i0:i1, None])
            p_v = p if p_for_dv == "lse" else torch.exp(s)
            dv[..., j0:j1, :] += p_v.transpose(-2, -1) @ grad_out[..., i0:i1, :]
            dp = grad_out[..., i0:i1, :] @ v[..., j0:j1, :].transpose(-2, -1)
            D_i = (p * dp).sum(-1) if d_from_p else D[..., i0:i1]
            ds = p * (dp - D_i[..., None])
            c = scale if scale_grads else 1.0
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * c
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * c
    return dq, dk, dv


def backward_d_from_p(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, d_from_p=True)


def backward_dv_unnormalised(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, p_for_dv="exp")


def backward_no_scale(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, scale_grads=False)


def backward_ignores_causal(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, use_causal=False)


def backward_ignores_block_sizes(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal)  # always tiles of 64 x 64


def backward_full_p(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2]), NEG_INF)
    p = torch.exp(s - lse[..., None])  # the whole probability matrix
    ds = p * (grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(-1, keepdim=True))
    return ds @ k / math.sqrt(q.shape[-1]), ds.transpose(-2, -1) @ q / math.sqrt(q.shape[-1]), p.transpose(-2, -1) @ grad_out


def backward_autograd(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        o, _ = _forward(*leaves, causal, block_q, block_k)
        return torch.autograd.grad(o, leaves, grad_out)


def backward_calls_utils(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return ref.flash_attention_backward(q, k, v, out, lse, grad_out, causal, block_q, block_k)


def backward_queries_outside(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    """Query blocks outside, key blocks inside, einsum: the same sums in another order."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = q.shape[-1] ** -0.5, T_k - T_q
    D = torch.einsum("...id,...id->...i", grad_out, out)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            s = torch.einsum("...id,...jd->...ij", q[..., i0:i1, :], k[..., j0:j1, :]) * scale
            if causal:
                s = torch.where(_mask(i0, i1, j0, j1, offset), NEG_INF, s)
            p = (s - lse[..., i0:i1].unsqueeze(-1)).exp()
            dp = torch.einsum("...id,...jd->...ij", grad_out[..., i0:i1, :], v[..., j0:j1, :])
            ds = p * (dp - D[..., i0:i1].unsqueeze(-1))
            dv[..., j0:j1, :] += torch.einsum("...ij,...id->...jd", p, grad_out[..., i0:i1, :])
            dq[..., i0:i1, :] += torch.einsum("...ij,...jd->...id", ds, k[..., j0:j1, :]) * scale
            dk[..., j0:j1, :] += torch.einsum("...ij,...id->...jd", ds, q[..., i0:i1, :]) * scale
    return dq, dk, dv


# FlashAttention --------------------------------------------------------------------------
def _function(forward_fn=_forward, backward_fn=_backward, save="lse", returns="out", backward_causal=True,
              n_grads=4, dtype=None):
    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal=False):
            qc, kc, vc = (t.to(dtype) for t in (q, k, v)) if dtype else (q, k, v)
            out, lse = forward_fn(qc, kc, vc, causal)
            out = out.to(q.dtype)
            if save == "probabilities":
                s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                ctx.save_for_backward(q, k, v, out, lse, torch.exp(s - lse[..., None]))
            else:
                ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal = causal
            return (out, lse) if returns == "pair" else out

        @staticmethod
        def backward(ctx, grad_out, *rest):
            q, k, v, out, lse = ctx.saved_tensors[:5]
            grads = backward_fn(q, k, v, out, lse, grad_out, ctx.causal and backward_causal)
            return (*grads, None)[:n_grads]

    return FlashAttention


def _naive_backward(q, k, v, out, lse, grad_out, causal=False):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        o, _ = forward_full_softmax(*leaves, causal)
        return torch.autograd.grad(o, leaves, grad_out)


class FlashAttentionModule(torch.nn.Module):
    def forward(self, q, k, v, causal=False):
        return _forward(q, k, v, causal)[0]


class FlashAttentionNoDefault(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):  # the contract's causal=False default is missing
        out, lse = _forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return (*_backward(*ctx.saved_tensors, grad_out, ctx.causal), None)


class FlashAttentionCallsUtils(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = ref.flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return (*ref.flash_attention_backward(*ctx.saved_tensors, grad_out, ctx.causal), None)


WRONG = {
    "online_softmax": {
        "running sum not rescaled": (softmax_sum_not_rescaled, "running sum was not rescaled"),
        "no maximum subtracted": (softmax_no_maximum, "NaN or inf"),
        "-inf - (-inf) on a row of -inf": (softmax_inf_minus_inf, "NaN or inf"),
        "full-row maximum first": (softmax_two_passes, "more than block_size entries of a row at once"),
        "ignores block_size": (softmax_fixed_blocks, "more than block_size entries of a row at once"),
        "torch.softmax": (softmax_torch, "more than block_size entries of a row at once"),
        "calls utils": (lambda x, block_size: ref.online_softmax(x, block_size), "yourself"),
    },
    "flash_attention_forward": {
        "running sum not rescaled": (forward_sum_not_rescaled, "running sum l was not rescaled"),
        "accumulator not rescaled": (forward_acc_not_rescaled, "output accumulator was not rescaled"),
        "divides by the sum inside the loop": (forward_divides_inside, "inside the loop"),
        "lse without the maximum": (forward_lse_without_max, "lse is missing the maximum"),
        "causal top-left when T_q != T_k": (forward_top_left, "top-left aligned"),
        "skips a tile partly above the diagonal": (forward_skips_partial_tiles, "only partly above the diagonal"),
        "diagonal tiles not masked": (forward_diagonal_unmasked, "were not masked"),
        "no tile skipped": (forward_no_skip, "skip the tiles entirely above the diagonal"),
        "lse with keepdim": (forward_lse_keepdim, "no trailing dimension of 1"),
        "ignores block_q and block_k": (forward_ignores_block_sizes, "larger than one (block_q, block_k)"),
        "full softmax materialised": (forward_full_softmax, "larger than one (block_q, block_k)"),
        "F.scaled_dot_product_attention": (forward_sdpa, "yourself"),
        "calls utils": (forward_calls_utils, "yourself"),
    },
    "flash_attention_backward": {
        "D from P": (backward_d_from_p, "D was computed from one tile"),
        "dV from unnormalised probabilities": (backward_dv_unnormalised, "unnormalised probabilities"),
        "no 1/sqrt(d) in dQ and dK": (backward_no_scale, "miss the factor 1/sqrt(d)"),
        "causal ignored": (backward_ignores_causal, "causal=True"),
        "ignores block_q and block_k": (backward_ignores_block_sizes, "larger than one (block_q, block_k)"),
        "full probability matrix": (backward_full_p, "larger than one (block_q, block_k)"),
        "autograd through the forward": (backward_autograd, "yourself"),
        "calls utils": (backward_calls_utils, "yourself"),
    },
    "FlashAttention": {
        "saves the probabilities": (_function(save="probabilities"), "(T_q, T_k) tensor"),
        "forward returns (out, lse)": (_function(returns="pair"), "forward returns out only"),
        "backward ignores causal": (_function(backward_causal=False), "causal=True"),
        "backward returns three gradients": (_function(n_grads=3), "one gradient per input of forward"),
        "backward through naive autograd": (_function(backward_fn=_naive_backward), "larger than one (block_q, block_k)"),
        "computes in float32": (_function(dtype=torch.float32), "finite differences"),
        "an nn.Module": (FlashAttentionModule, "must subclass torch.autograd.Function"),
        "no default for causal": (FlashAttentionNoDefault, "default causal=False"),
        "calls utils": (FlashAttentionCallsUtils, "yourself"),
    },
}

RIGHT = {
    "online_softmax": {"running log-sum-exp": softmax_logaddexp, "padded blocks, torch.max": softmax_padded_blocks},
    "flash_attention_forward": {"key blocks outside, normalised output, einsum": forward_keys_outside,
                                "one head at a time": forward_per_head},
    "flash_attention_backward": {"query blocks outside, einsum": backward_queries_outside},
    "FlashAttention": {"zoo forward and backward": _function(),
                       "einsum kernels, FA-1 loop order": _function(forward_keys_outside, backward_queries_outside)},
}
