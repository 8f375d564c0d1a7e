"""Solutions of notebook 13 written as an adversarial learner would (merged into nb13's WRONG):
a dtype lost at reset(), one batch item's mask used for every item, the scores changed in place,
positions counted by the module, an indexer that restarts at every call, the course's selection helper called."""
import math

import torch

import utils.dsa
from autograder.tests.zoo.nb13 import cache_cls, indexer_cls, topk_fn
from autograder.tests.zoo.nb13_more import GatherSparseMLA


# RollingKVCache ------------------------------------------------------------------------------
class ResetFloat32(cache_cls()):
    """reset() reallocates the storage with torch.zeros' default dtype: a float64 cache comes back float32."""

    def reset(self):
        self.k, self.v = torch.zeros(self.k.shape, device=self.k.device), torch.zeros(self.v.shape, device=self.v.device)
        self.count = 0


# attention_with_sinks ------------------------------------------------------------------------
def sinks_first_item_mask(q, k, v, sinks, mask=None):
    """A (B, 1, T_q, T_k) mask reduced to its first batch item's (T_q, T_k): right while every item has the same mask."""
    if mask is not None and mask.dim() == 4:
        mask = mask[0, 0]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1).to(scores.dtype)
    return torch.softmax(torch.cat((scores, sink), -1), -1)[..., :-1] @ v


# topk_key_mask -------------------------------------------------------------------------------
def topk_by_course_helper(index_scores, topk):
    """The course's own selection, utils.dsa.topk_indices, scattered into a mask."""
    indices, blocked = utils.dsa.topk_indices(index_scores, topk)
    return ~torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, indices, ~blocked)


def topk_fills_scores_in_place(index_scores, topk):
    """Pushes -inf scores below every finite one by writing into the caller's scores."""
    index_scores.masked_fill_(torch.isneginf(index_scores), torch.finfo(index_scores.dtype).min)
    blocked = topk_fn()(index_scores, topk)
    return blocked | (index_scores == torch.finfo(index_scores.dtype).min)


# LightningIndexer ----------------------------------------------------------------------------
class OwnPositions(indexer_cls()):
    """Ignores start_pos and counts the keys it holds: right along one text, but a new text
    (start_pos=0) continues the previous one's positions and sees its keys."""

    def forward(self, x, qr, start_pos=0):
        return super().forward(x, qr, 0 if self.keys is None else self.keys.shape[1])


# SparseMLA -----------------------------------------------------------------------------------
class _IndexerAtZero(indexer_cls()):
    def forward(self, x, qr, start_pos=0):
        scores = super().forward(x, qr, 0)  # only the new tokens' keys, the earlier ones read as -inf
        return torch.cat([scores.new_full((*scores.shape[:2], start_pos), float("-inf")), scores], -1)


class IndexerRestarts(GatherSparseMLA):
    """Calls the indexer with start_pos=0 at every step: at decode it scores the new tokens only."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.indexer = _IndexerAtZero(cfg)


WRONG = {
    "RollingKVCache": {"reset() reallocates in float32": (ResetFloat32, "a reset, then 1 token")},
    "attention_with_sinks": {"one batch item's mask for every item": (sinks_first_item_mask, "differs between batch items")},
    "topk_key_mask": {"the scores changed in place": (topk_fills_scores_in_place, "in place"),
                      "utils.dsa.topk_indices called": (topk_by_course_helper, "a helper of the course's reference")},
    "LightningIndexer": {"start_pos ignored, positions counted by the module": (OwnPositions, "crashed with RuntimeError")},
    "SparseMLA": {"the indexer restarted at every step": (IndexerRestarts, "start_pos=5")},
}
