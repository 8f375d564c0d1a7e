"""Solutions of notebook 14 that grading must reject (WRONG) or accept (RIGHT)."""
import math
from functools import partial

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


def softmax_two_passes(x, block_size):
    m = x.amax(dim=-1, keepdim=True)  # a full-row maximum first: not online
    l = sum(torch.exp(x[..., s:s + block_size] - m).sum(dim=-1, keepdim=True) for s in range(0, x.shape[-1], block_size))
    return torch.exp(x - m) / l


def softmax_logaddexp(x, block_size):
    lse = x.new_full(x.shape[:-1], NEG_INF)  # a running log-sum-exp is the same state as (m, l)
    for start in range(0, x.shape[-1], block_size):
        lse = torch.logaddexp(lse, torch.logsumexp(x[..., start:start + block_size], dim=-1))
    return torch.exp(x - lse[..., None])


def softmax_padded_blocks(x, block_size):
    n = x.shape[-1]
    padded = F.pad(x, (0, -n % block_size), value=NEG_INF)
    blocks = padded.reshape(*x.shape[:-1], -1, block_size)  # (..., n_blocks, block)
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for b in range(blocks.shape[-2]):
        block_max = blocks[..., b, :].max(dim=-1).values
        m_new = torch.max(m, block_max)
        safe = m_new.masked_fill(m_new == NEG_INF, 0.0)
        l = l * torch.exp(m - safe) + torch.exp(blocks[..., b, :] - safe.unsqueeze(-1)).sum(-1)
        m = m_new
    return torch.exp(x - m.masked_fill(m == NEG_INF, 0.0).unsqueeze(-1)) / l.unsqueeze(-1)


# flash_attention_forward -----------------------------------------------------------------
def _mask(i0, i1, j0, j1, offset, device=None):
    return torch.arange(j0, j1, device=device)[None, :] > torch.arange(i0, i1, device=device)[:, None] + offset


def _forward(q, k, v, causal=False, block_q=64, block_k=64, rescale_l=True, rescale_acc=True, divide_inside=False,
             lse="m + log l", top_left=False, skip="right", mask=">", scale="d", lse_dtype=None, offset_sign=1,
             key_order=1, guard=True):
    """The tiled forward, with one switch per mistake (all defaults: right)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = {"d": q.shape[-1] ** -0.5, "d_v": v.shape[-1] ** -0.5, "1/d": 1 / q.shape[-1], "none": 1.0}[scale]
    offset = 0 if top_left else offset_sign * (T_k - T_q)
    outs, lses = [], []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i = q[..., i0:i1, :]
        m = torch.full(q_i.shape[:-1], NEG_INF, dtype=q.dtype, device=q.device)
        l = torch.zeros(q_i.shape[:-1], dtype=q.dtype, device=q.device)
        acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in list(range(0, T_k, block_k))[::key_order]:
            j1 = min(j0 + block_k, T_k)
            if causal and skip == "right" and j0 > i1 - 1 + offset:
                continue
            if causal and skip == "partial" and j1 - 1 > i0 + offset:
                continue
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal and mask:
                cols, rows = torch.arange(j0, j1, device=q.device)[None, :], torch.arange(i0, i1, device=q.device)[:, None] + offset
                s = s.masked_fill({">": cols > rows, ">=": cols >= rows, "<": cols < rows}[mask], NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = torch.where(torch.isinf(m_new), 0.0, m_new) if guard else m_new  # a whole row may be masked so far
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(m - shift)
            l = (alpha * l if rescale_l else l) + p.sum(dim=-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v[..., j0:j1, :]
            if divide_inside:
                acc = acc / l[..., None]
            m = m_new
        outs.append(acc if divide_inside else acc / l[..., None])
        lses.append({"m + log l": m + torch.log(l), "log l": torch.log(l), "m": m}[lse])
    out, lse = torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
    return out, lse if lse_dtype is None else lse.to(lse_dtype)


def forward_lse_keepdim(q, k, v, causal=False, block_q=64, block_k=64):
    out, lse = _forward(q, k, v, causal, block_q, block_k)
    return out, lse[..., None]


def forward_lse_unscaled(q, k, v, causal=False, block_q=64, block_k=64):
    out, _ = _forward(q, k, v, causal, block_q, block_k)
    _, lse = _forward(q * q.shape[-1] ** 0.5, k, v, causal, block_q, block_k)  # the scores without 1/sqrt(d)
    return out, lse


def forward_ignores_block_sizes(q, k, v, causal=False, block_q=64, block_k=64):
    return _forward(q, k, v, causal)  # always tiles of 64 x 64


def forward_full_softmax(q, k, v, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # the whole (T_q, T_k) matrix
    if causal:
        s = s.masked_fill(_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2], device=s.device), NEG_INF)
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
                s = torch.where(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF, s)
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
    outs, lses = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device), torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for b in range(B):
        for h in range(H):
            outs[b, h], lses[b, h] = _forward(q[b, h], k[b, h], v[b, h], causal, block_q, block_k)
    return outs, lses


def forward_running_lse(q, k, v, causal=False, block_q=64, block_k=64):
    """A running log-sum-exp per query instead of (m, l), the output kept normalised, keys read
    through a transposed view, torch.where for the mask and a break at the diagonal."""
    k_t, offset = k.transpose(-2, -1), k.shape[-2] - q.shape[-2]  # (B, H, d, T_k), a view
    out, lse_all = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device), torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for i0 in range(0, q.shape[-2], block_q):
        i1 = min(i0 + block_q, q.shape[-2])
        lse = torch.full(q.shape[:-2] + (i1 - i0,), NEG_INF, dtype=q.dtype, device=q.device)
        o = torch.zeros(*lse.shape, v.shape[-1], dtype=q.dtype, device=q.device)
        for j0 in range(0, k.shape[-2], block_k):
            if causal and j0 > i1 - 1 + offset:
                break
            j1 = min(j0 + block_k, k.shape[-2])
            s = torch.matmul(q[..., i0:i1, :], k_t[..., j0:j1]) / math.sqrt(q.shape[-1])
            if causal:
                s = torch.where(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF, s)
            tile = torch.logsumexp(s, dim=-1)
            new = torch.logaddexp(lse, tile)
            o = (torch.exp(lse - new)[..., None] * o
                 + torch.exp(tile - new)[..., None] * (torch.softmax(s, dim=-1).nan_to_num(0.0) @ v[..., j0:j1, :]))
            lse = new
        out[..., i0:i1, :], lse_all[..., i0:i1] = o, lse
    return out, lse_all


def forward_in_float64(q, k, v, causal=False, block_q=64, block_k=64):
    out, lse = _forward(q.double(), k.double(), v.double(), causal, block_q, block_k)  # input-sized copies
    return out.to(q.dtype), lse.to(q.dtype)


def forward_in_float32(q, k, v, causal=False, block_q=64, block_k=64):  # float32 whatever the inputs, cast back
    out, lse = _forward(q.float(), k.float(), v.float(), causal, block_q, block_k)
    return out.to(q.dtype), lse.to(q.dtype)


# flash_attention_backward ----------------------------------------------------------------
def _backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64, D="dO * O", p_for_dv="lse",
              scale="d", use_causal=True, skip=True, p="exp(s - lse)"):
    """The tiled backward, with one switch per mistake (all defaults: right)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    s_scale, offset = 1 / math.sqrt(q.shape[-1]), T_k - T_q
    scale = {"d": s_scale, "d_v": v.shape[-1] ** -0.5, "none": 1.0}[scale]
    causal = causal and use_causal
    D_all = (grad_out * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            if causal and skip and j0 > i1 - 1 + offset:
                continue
            s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * s_scale
            if causal:
                s = s.masked_fill(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF)
            P = torch.exp(s - lse[..., i0:i1, None]) if p == "exp(s - lse)" else torch.softmax(s, -1).nan_to_num(0.0)
            dv[..., j0:j1, :] += (P if p_for_dv == "lse" else torch.exp(s)).transpose(-2, -1) @ grad_out[..., i0:i1, :]
            dp = grad_out[..., i0:i1, :] @ v[..., j0:j1, :].transpose(-2, -1)
            D_i = {"dO * O": D_all[..., i0:i1], "P * dP": (P * dp).sum(-1), "none": 0.0 * D_all[..., i0:i1]}[D]
            ds = P * (dp - D_i[..., None])
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * scale
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * scale
    return dq, dk, dv


def backward_ignores_block_sizes(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    return _backward(q, k, v, out, lse, grad_out, causal)  # always tiles of 64 x 64


def backward_full_p(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(_mask(0, q.shape[-2], 0, k.shape[-2], k.shape[-2] - q.shape[-2], device=s.device), NEG_INF)
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
            if causal and j0 > i1 - 1 + offset:
                break  # this tile and the later ones are above the diagonal
            s = torch.einsum("...id,...jd->...ij", q[..., i0:i1, :], k[..., j0:j1, :]) * scale
            if causal:
                s = torch.where(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF, s)
            p = (s - lse[..., i0:i1].unsqueeze(-1)).exp()
            dp = torch.einsum("...id,...jd->...ij", grad_out[..., i0:i1, :], v[..., j0:j1, :])
            ds = p * (dp - D[..., i0:i1].unsqueeze(-1))
            dv[..., j0:j1, :] += torch.einsum("...ij,...id->...jd", p, grad_out[..., i0:i1, :])
            dq[..., i0:i1, :] += torch.einsum("...ij,...jd->...id", ds, k[..., j0:j1, :]) * scale
            dk[..., j0:j1, :] += torch.einsum("...ij,...id->...jd", ds, q[..., i0:i1, :]) * scale
    return dq, dk, dv


def backward_per_head_in_float64(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    """One (batch item, head) at a time, computed in float64, returned in the inputs' dtype."""
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            one = [t[b, h].double() for t in (q, k, v, out, lse, grad_out)]
            for grad, part in zip(grads, _backward(*one, causal, block_q, block_k)):
                grad[b, h] = part
    return tuple(grads)


# FlashAttention --------------------------------------------------------------------------
def _function(forward_fn=_forward, backward_fn=_backward, save="lse", returns="out", backward_causal=True,
              n_grads=4, dtype=None, keep="ctx"):
    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal=False):
            qc, kc, vc = (t.to(dtype) for t in (q, k, v)) if dtype else (q, k, v)
            out, lse = forward_fn(qc, kc, vc, causal)
            out = out.to(q.dtype)
            if save == "probabilities":
                s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
                ctx.save_for_backward(q, k, v, out, lse, torch.exp(s - lse[..., None]))
            elif keep == "lse on ctx":
                ctx.save_for_backward(q, k, v, out)
                ctx.lse = lse
            else:
                ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal = causal
            if keep == "class":  # shared by every call: the last forward wins
                FlashAttention.kept = (q, k, v, out, lse, causal)
            return (out, lse) if returns == "pair" else out

        @staticmethod
        def backward(ctx, grad_out, *rest):
            if keep == "class":
                *saved, causal = FlashAttention.kept
            elif keep == "lse on ctx":
                saved, causal = (*ctx.saved_tensors, ctx.lse), ctx.causal
            else:
                saved, causal = ctx.saved_tensors[:5], ctx.causal
            grads = backward_fn(*saved, grad_out, causal and backward_causal)
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


def _forward_with(**mistake):
    return partial(_forward, **mistake)


def _backward_with(**mistake):
    return partial(_backward, **mistake)


# Caught by the families of checks/harness.py --------------------------------------------------
def softmax_float32_state(x, block_size):
    """The running maximum and sum made in float32 whatever x's dtype: a bfloat16 x comes back float32."""
    m = torch.full(x.shape[:-1], NEG_INF, device=x.device)
    l = torch.zeros(x.shape[:-1], device=x.device)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = m_new.masked_fill(m_new == NEG_INF, 0.0)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - m.masked_fill(m == NEG_INF, 0.0)[..., None]) / l[..., None]


def softmax_float32_cast_back(x, block_size):  # computed in float32, cast back (Llama, Hugging Face)
    return softmax_padded_blocks(x.float(), block_size).to(x.dtype)


def forward_tile_max(q, k, v, causal=False, block_q=64, block_k=64):
    """One maximum per tile, shared by every row, batch item and head: right while their scores are close."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    offset, scale = T_k - T_q, 1.0 / math.sqrt(q.shape[-1])
    out, lse = q.new_zeros(*q.shape[:-1], v.shape[-1]), q.new_zeros(q.shape[:-1])
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        m = q.new_full((*q.shape[:-2], i1 - i0), NEG_INF)
        l, o = torch.zeros_like(m), q.new_zeros(*q.shape[:-2], i1 - i0, v.shape[-1])
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            if causal and j0 > i1 - 1 + offset:
                break
            s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF)
            m_new = torch.maximum(m, s.max())  # one number for the whole tile
            p, c = torch.exp(s - m_new[..., None]), torch.exp(m - m_new)
            l, o, m = c * l + p.sum(-1), c[..., None] * o + p @ v[..., j0:j1, :], m_new
        out[..., i0:i1, :], lse[..., i0:i1] = o / l[..., None], m + l.log()
    return out, lse


def backward_exp_over_exp(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
    """P = exp(s) / exp(lse): the same number while the scores are small, inf / inf past exp's range."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    offset, scale = T_k - T_q, 1.0 / math.sqrt(q.shape[-1])
    D = (grad_out * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i, g_i = q[..., i0:i1, :], grad_out[..., i0:i1, :]
        for j0 in range(0, T_k, block_k):
            j1 = min(j0 + block_k, T_k)
            if causal and j0 > i1 - 1 + offset:
                break
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(_mask(i0, i1, j0, j1, offset, device=s.device), NEG_INF)
            p = torch.exp(s) / torch.exp(lse[..., i0:i1, None])
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ g_i
            ds = p * (g_i @ v[..., j0:j1, :].transpose(-2, -1) - D[..., i0:i1, None])
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * scale
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q_i * scale
    return dq, dk, dv


def backward_in_float32(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):  # float32, cast back
    grads = _backward(*(t.float() for t in (q, k, v, out, lse, grad_out)), causal, block_q, block_k)
    return tuple(g.to(q.dtype) for g in grads)

WRONG = {
    "online_softmax": {
        "running sum not rescaled": (partial(_online, rescale=False), "running sum was not rescaled"),
        "no maximum subtracted": (partial(_online, subtract=False), "NaN or inf"),
        "-inf - (-inf) on a row of -inf": (partial(_online, guard=False), "NaN or inf"),
        "full-row maximum first": (softmax_two_passes, "more than block_size entries of a row at once"),
        "ignores block_size": (lambda x, block_size: _online(x, 8), "more than block_size entries of a row at once"),
        "torch.softmax": (lambda x, block_size: torch.softmax(x, dim=-1), "more than block_size entries of a row at once"),
        "calls utils": (lambda x, block_size: ref.online_softmax(x, block_size), "yourself"),
        "running state in float32 whatever the dtype": (softmax_float32_state, "must follow its input's dtype (torch.bfloat16)"),
    },
    "flash_attention_forward": {
        "running sum not rescaled": (_forward_with(rescale_l=False), "running sum l was not rescaled"),
        "one maximum per tile for every row and head": (forward_tile_max, "Scores in the hundreds give NaN or inf"),
        "accumulator not rescaled": (_forward_with(rescale_acc=False), "output accumulator was not rescaled"),
        "divides by the sum inside the loop": (_forward_with(divide_inside=True), "inside the loop"),
        "scores not scaled": (_forward_with(scale="none"), "multiplied by 1/sqrt(d)"),
        "scores scaled by 1/d": (_forward_with(scale="1/d"), "multiplied by 1/sqrt(d)"),
        "scores scaled by 1/sqrt(d_v)": (_forward_with(scale="d_v"), "multiplied by 1/sqrt(d)"),
        "lse without the maximum": (_forward_with(lse="log l"), "lse is missing the maximum"),
        "lse is the maximum only": (_forward_with(lse="m"), "lse is only the running maximum"),
        "lse of unscaled scores": (forward_lse_unscaled, "unscaled scores"),
        "lse returned in float32": (_forward_with(lse_dtype=torch.float32), "lse torch.float32"),
        "causal top-left when T_q != T_k": (_forward_with(top_left=True), "top-left aligned"),
        "skips a tile partly above the diagonal": (_forward_with(skip="partial"), "only partly above the diagonal"),
        "diagonal tiles not masked": (_forward_with(mask=False), "were not masked"),
        "mask blocks the query's own key": (_forward_with(mask=">="), "must see its own position"),
        "mask reversed": (_forward_with(mask="<"), "lets a query see later keys"),
        "causal offset T_q - T_k": (_forward_with(offset_sign=-1), "some outputs are NaN"),
        "key tiles from the last, no -inf guard": (_forward_with(key_order=-1, guard=False), "some outputs are NaN"),
        "no tile skipped": (_forward_with(skip="never"), "skip the tiles entirely above the diagonal"),
        "lse with keepdim": (forward_lse_keepdim, "no trailing dimension of 1"),
        "ignores block_q and block_k": (forward_ignores_block_sizes, "larger than one (block_q, block_k)"),
        "full softmax materialised": (forward_full_softmax, "larger than one (block_q, block_k)"),
        "F.scaled_dot_product_attention": (forward_sdpa, "yourself"),
        "calls utils": (forward_calls_utils, "yourself"),
    },
    "flash_attention_backward": {
        "P as exp(s) / exp(lse)": (backward_exp_over_exp, "on scores near 100"),
        "D from P": (_backward_with(D="P * dP"), "D was computed from one tile"),
        "D left out": (_backward_with(D="none"), "D was left out"),
        "P normalised within the tile": (_backward_with(p="softmax(s)"), "normalised within each tile"),
        "dV from unnormalised probabilities": (_backward_with(p_for_dv="exp"), "unnormalised probabilities"),
        "no 1/sqrt(d) in dQ and dK": (_backward_with(scale="none"), "need the factor 1/sqrt(d)"),
        "1/sqrt(d_v) in dQ and dK": (_backward_with(scale="d_v"), "need the factor 1/sqrt(d)"),
        "causal ignored": (_backward_with(use_causal=False), "causal=True"),
        "no tile skipped": (_backward_with(skip=False), "skip the tiles entirely above the diagonal"),
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
        "backward through naive autograd": (_function(backward_fn=_naive_backward), "FlashAttention.backward created"),
        "forward with the full softmax": (_function(forward_fn=forward_full_softmax), "FlashAttention.forward created"),
        "forward with blocks of 128": (_function(forward_fn=partial(_forward, block_q=128, block_k=128)), "FlashAttention.forward created"),
        "computes in float32": (_function(dtype=torch.float32), "finite differences"),
        "keeps causal and tensors on the class": (_function(keep="class"), "a later call of forward"),
        "an nn.Module": (FlashAttentionModule, "must subclass torch.autograd.Function"),
        "no default for causal": (FlashAttentionNoDefault, "default causal=False"),
        "calls utils": (FlashAttentionCallsUtils, "yourself"),
    },
}

RIGHT = {
    "online_softmax": {"running log-sum-exp": softmax_logaddexp, "padded blocks, torch.max": softmax_padded_blocks,
                       "in float32, cast back": softmax_float32_cast_back},
    "flash_attention_forward": {"key blocks outside, normalised output, einsum": forward_keys_outside,
                                "one head at a time": forward_per_head,
                                "running log-sum-exp, transposed k, break at the diagonal": forward_running_lse,
                                "computed in float64": forward_in_float64,
                                "computed in float32, cast back": forward_in_float32,
                                "key tiles from the last, -inf guarded": _forward_with(key_order=-1)},
    "flash_attention_backward": {"query blocks outside, einsum": backward_queries_outside,
                                 "one head at a time, in float64": backward_per_head_in_float64,
                                 "computed in float32, cast back": backward_in_float32},
    "FlashAttention": {"zoo forward and backward": _function(),
                       "einsum kernels, FA-1 loop order": _function(forward_keys_outside, backward_queries_outside),
                       "lse kept as a ctx attribute, running log-sum-exp": _function(forward_running_lse, keep="lse on ctx")},
}

from autograder.tests.zoo import nb14_adversary2  # noqa: E402

for _exercise, _entries in nb14_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb14_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)
