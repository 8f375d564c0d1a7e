"""Solutions of notebook 08 written as an adversarial learner would (merged into nb08's WRONG and
RIGHT): tables reused across calls, positions assumed consecutive, an input permuted in place,
positions read at the wrong moment, and valid solutions written differently from the reference."""
import math

import torch

from autograder.tests.zoo.nb08 import rope_fn, rope_mha_class

_rope = rope_fn()


# apply_rope ----------------------------------------------------------------------------------
def rope_consecutive_positions(x, positions, theta=10000.0, interleaved=False):
    """Takes positions[0] as the start and assumes the rest follow one by one."""
    return _rope(x, positions[0] + torch.arange(x.shape[-2], device=positions.device), theta, interleaved)


def rope_table_memo():
    """Keeps the cos/sin tables of earlier calls, keyed by (T, head_dim, theta): a later call with
    the same sizes and other positions gets the first call's rotation."""
    tables = {}

    def apply_rope(x, positions, theta=10000.0, interleaved=False):
        T, hd = x.shape[-2], x.shape[-1]
        if (T, hd, theta) not in tables:
            inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
            tables[T, hd, theta] = positions.float()[:, None] * inv
        angles = tables[T, hd, theta]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if interleaved:
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
    return apply_rope


def rope_rotation_matrices(x, positions, theta=10000.0, interleaved=False):
    """Valid: one 2x2 rotation matrix per (position, pair), applied with einsum; pairs gathered by index."""
    hd = x.shape[-1]
    angles = positions.double()[:, None] * theta ** (-torch.arange(hd // 2, dtype=torch.float64, device=x.device) * 2 / hd)
    c, s = angles.cos(), angles.sin()
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2).to(x.dtype)  # (T, hd/2, 2, 2)
    first = torch.arange(0, hd, 2, device=x.device) if interleaved else torch.arange(hd // 2, device=x.device)
    pairs = torch.stack((first, first + 1 if interleaved else first + hd // 2), -1)  # (hd/2, 2) feature indices
    out = torch.einsum("tpij,...tpj->...tpi", rot, x[..., pairs])  # (..., T, hd/2, 2)
    return out.flatten(-2)[..., pairs.flatten().argsort()]  # each feature back to its place


# interleaved_to_half_split --------------------------------------------------------------------
def permute_in_place(weight, num_heads):
    """The right permutation, written back into the caller's weight."""
    hd = weight.shape[0] // num_heads
    rows = [h * hd + r for h in range(num_heads) for r in (*range(0, hd, 2), *range(1, hd, 2))]
    with torch.no_grad():
        weight.copy_(weight[torch.tensor(rows)])
    return weight


# RoPEMultiHeadAttention ----------------------------------------------------------------------
class PositionsAfterUpdate(rope_mha_class()):
    """Reads the cache's seq_len after writing the new keys: the queries' positions are T too far."""

    def forward(self, x, kv_cache=None):
        if kv_cache is None:
            return super().forward(x)
        B, T, _ = x.shape
        heads = lambda t: t.reshape(B, T, self.h, self.hd).transpose(1, 2)
        k_raw, v = heads(self.W_key(x)), heads(self.W_value(x))
        start = kv_cache.seq_len
        k = _rope(k_raw, torch.arange(start, start + T, device=x.device), self.theta, self.interleaved)
        k_all, v_all = kv_cache.update(k, v)
        q = _rope(heads(self.W_query(x)), torch.arange(kv_cache.seq_len, kv_cache.seq_len + T, device=x.device), self.theta, self.interleaved)
        return self._attend(q, k_all, v_all, B, T)

    def _attend(self, q, k, v, B, T):
        S = k.shape[2]
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.hd)).masked_fill(torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1 + S - T), float("-inf"))
        return self.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.h * self.hd))


class RotatesWholeCache(PositionsAfterUpdate):
    """Valid: the cache holds keys before rotation; every step rotates all cached keys by their positions 0 .. S-1."""

    def forward(self, x, kv_cache=None):
        B, T, _ = x.shape
        heads = lambda t: t.reshape(B, T, self.h, self.hd).transpose(1, 2)
        k, v = heads(self.W_key(x)), heads(self.W_value(x))
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        S = k.shape[2]
        q = _rope(heads(self.W_query(x)), torch.arange(S - T, S, device=x.device), self.theta, self.interleaved)
        return self._attend(q, _rope(k, torch.arange(S, device=x.device), self.theta, self.interleaved), v, B, T)


WRONG = {
    "apply_rope": {
        "positions assumed consecutive": (rope_consecutive_positions, "differs from an independent formulation"),
        "cos/sin tables reused across calls": (rope_table_memo(), "only on their offset"),
    },
    "interleaved_to_half_split": {
        "the weight permuted in place": (permute_in_place, "in place"),
    },
    "RoPEMultiHeadAttention": {
        "positions read after the cache update": (PositionsAfterUpdate, "With a cache"),
    },
}

RIGHT = {
    "apply_rope": {"2x2 rotation matrices and einsum": rope_rotation_matrices},
    "RoPEMultiHeadAttention": {"unrotated keys cached, the whole cache rotated each step": RotatesWholeCache},
}
