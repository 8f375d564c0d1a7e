"""Solutions of notebook 14 written as an adversarial learner would, second round (merged into nb14's
WRONG and RIGHT): block_q used for the keys too, a ragged last block dropped, a buffer kept across
calls, the tile skip without the causal offset, and right solutions written differently."""
import torch, math
import torch.nn.functional as F
NEG = float("-inf")

def sm(mistake=None):
    def online_softmax(x, block_size):
        n = x.shape[-1]
        m = x.new_full(x.shape[:-1] + (1,), NEG); l = x.new_zeros(x.shape[:-1] + (1,))
        stop = n - block_size + 1 if mistake == "ragged tail dropped" else n
        for s in range(0, max(stop, 1), block_size):
            b = x[..., s:s + block_size]
            m_new = torch.maximum(m, b.amax(-1, keepdim=True))
            safe = torch.where(m_new == NEG, torch.zeros_like(m_new), m_new)
            l = l * torch.exp(m - safe) + torch.exp(b - safe).sum(-1, keepdim=True)
            m = m_new
        safe = torch.where(m == NEG, torch.zeros_like(m), m)
        if mistake == "final pass in place":
            return x.sub_(safe).exp_().div_(l)
        return torch.exp(x - safe) / l
    return online_softmax

def fwd(mistake=None, bq_default=64, bk_default=64):
    def flash_attention_forward(q, k, v, causal=False, block_q=bq_default, block_k=bk_default):
        T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
        if causal and T_q > T_k and mistake != "no refusal":
            raise ValueError("causal needs T_q <= T_k")
        if mistake == "block_q for keys":
            block_k = block_q
        off = T_k - T_q
        out = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device) if mistake == "float32 out" else q.new_zeros(*q.shape[:-1], v.shape[-1])
        lse = q.new_zeros(q.shape[:-1])
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            qi = q[..., i0:i1, :] / math.sqrt(d)
            m = q.new_full(qi.shape[:-1], NEG); l = q.new_zeros(qi.shape[:-1]); acc = q.new_zeros(*qi.shape[:-1], v.shape[-1])
            end = T_k if not causal else (min(T_k, i1) if mistake == "skip ignores the offset" else min(T_k, i1 + off))
            for j0 in range(0, end, block_k):
                j1 = min(j0 + block_k, T_k)
                s = torch.einsum("...id,...jd->...ij", qi, k[..., j0:j1, :])
                if causal:
                    rows = torch.arange(i0, i1, device=q.device)[:, None] + off
                    s = s.masked_fill(torch.arange(j0, j1, device=q.device)[None, :] > rows, NEG)
                m_new = torch.maximum(m, s.amax(-1))
                safe = torch.where(m_new == NEG, torch.zeros_like(m_new), m_new)
                p = torch.exp(s - safe[..., None]); a = torch.exp(m - safe)
                l = a * l + p.sum(-1); acc = a[..., None] * acc + p @ v[..., j0:j1, :]; m = m_new
            out[..., i0:i1, :] = acc / l[..., None]
            lse[..., i0:i1] = m + l.log()
        return out, lse
    return flash_attention_forward

_dq_buf = {}
def bwd(mistake=None):
    def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):
        T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
        if causal and T_q > T_k and mistake != "no refusal":
            raise ValueError("causal needs T_q <= T_k")
        sc, off = d ** -0.5, T_k - T_q
        D = (grad_out * out).sum(-1)
        if mistake == "dq buffer kept across calls":
            dq = _dq_buf.setdefault((tuple(q.shape), q.dtype), torch.zeros_like(q))
        else:
            dq = torch.zeros_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for i0 in range(0, T_q, block_q):  # query blocks outside (FA-1 order), keys inside
            i1 = min(i0 + block_q, T_q)
            for j0 in range(0, T_k, block_k):
                j1 = min(j0 + block_k, T_k)
                if causal and j0 > i1 - 1 + off:
                    break
                s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * sc
                if causal:
                    rows = torch.arange(i0, i1, device=q.device)[:, None] + off
                    s = s.masked_fill(torch.arange(j0, j1, device=q.device)[None, :] > rows, NEG)
                p = torch.exp(s - lse[..., i0:i1, None])
                do = grad_out[..., i0:i1, :]
                dv[..., j0:j1, :] += p.transpose(-2, -1) @ do
                ds = p * (do @ v[..., j0:j1, :].transpose(-2, -1) - D[..., i0:i1, None])
                dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * sc
                dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * sc
        return dq, dk, dv
    return flash_attention_backward

def fa(default_causal=False, fb=(32, 32), bb=(16, 64)):
    f, b = fwd(), bwd()
    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal=default_causal):
            out, lse = f(q, k, v, causal, *fb)
            ctx.save_for_backward(q, k, v, out, lse); ctx.causal = causal
            return out
        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, out, lse = ctx.saved_tensors
            return (*b(q, k, v, out, lse, grad_out, ctx.causal, *bb), None)
    return FlashAttention


def bwd_keys_bq(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64):  # block_q for the keys too
    return bwd()(q, k, v, out, lse, grad_out, causal, block_q, block_q)

WRONG = {
    "online_softmax": {
        "ragged last block dropped": (sm("ragged tail dropped"), "after the pass over the blocks"),
        "final pass in place on x": (sm("final pass in place"), "changed its input in place"),
    },
    "flash_attention_forward": {
        "block_q used for the keys too": (fwd("block_q for keys"), "larger than one (block_q, block_k)"),
        "out made in float32": (fwd("float32 out"), "in the dtype of its inputs"),
        "tile skip without the causal offset": (fwd("skip ignores the offset"), "out differs from F.scaled_dot_product_attention"),
    },
    "flash_attention_backward": {
        # state across calls / 跨调用的状态
        "dq buffer kept across calls": (bwd("dq buffer kept across calls"), "dq differs from autograd's"),
        "block_q used for the keys too": (bwd_keys_bq, "larger than one (block_q, block_k)"),
    },
    "FlashAttention": {"default causal=True": (fa(default_causal=True), "default to causal=False")},
}

RIGHT = {
    "online_softmax": {"keepdim state, torch.where guard": sm()},
    "flash_attention_forward": {"einsum, q scaled first, torch.where guard": fwd()},
    "flash_attention_backward": {"FA-1 loop order, break at the diagonal": bwd()},
    "FlashAttention": {"other tiles in forward and backward": fa()},
}
