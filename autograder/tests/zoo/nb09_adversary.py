"""Solutions of notebook 09 written as an adversarial learner would (merged into nb09's WRONG): the
given _write rewritten (caches sized by the first call, kept in float32, grown as plain attributes),
counts returned as floats."""
import torch

from autograder.tests.zoo.nb09 import mla_class


# MultiHeadLatentAttention --------------------------------------------------------------------
class FirstBatchCache(mla_class()):
    """Allocates each cache once, at its first call, for that call's batch: a later text with more sequences does not fit."""

    def _write(self, name, new, start_pos):
        B, T = new.shape[:2]
        if getattr(self, name, None) is None:
            self.register_buffer(name, new.new_zeros(B, self.cfg.max_seq_len, *new.shape[2:]), persistent=False)
        cache = getattr(self, name)
        cache[:B, start_pos:start_pos + T] = new.detach()
        return torch.cat([cache[:B, :start_pos], new], 1)


class Float32Cache(mla_class()):
    """Caches in float32 whatever the input's dtype: a float64 text is rounded to float32 once it is cached."""

    def _write(self, name, new, start_pos):
        B, T = new.shape[:2]
        cache = getattr(self, name, None)
        if start_pos == 0 and (cache is None or cache.shape[0] != B):
            self.register_buffer(name, torch.zeros(B, self.cfg.max_seq_len, *new.shape[2:], device=new.device), persistent=False)
            cache = getattr(self, name)
        cache[:B, start_pos:start_pos + T] = new.detach()
        return torch.cat([cache[:B, :start_pos], new], 1)


class GrowingCache(mla_class()):
    """Each cache a plain attribute grown with torch.cat, cut back to start_pos at every call: right
    outputs, but the notebook fixes the buffers k_cache, v_cache (naive), kv_cache, pe_cache (absorbed)."""

    def _write(self, name, new, start_pos):
        old = self.__dict__.get(name)
        prefix = new[:, :0].detach() if start_pos == 0 or old is None else old[:, :start_pos]
        self.__dict__[name] = torch.cat([prefix, new.detach()], 1)
        return torch.cat([prefix, new], 1)


# the counts ------------------------------------------------------------------------------------
def mla_count_float(n_layers, kv_lora_rank, qk_rope_head_dim):
    """Right number, as a float: elements are counted, never fractional."""
    return n_layers * (kv_lora_rank + qk_rope_head_dim) * 1.0


def kv_count_float(n_layers, n_kv_heads, head_dim):
    """Right number, as a float (a factor 2.0)."""
    return 2.0 * n_layers * n_kv_heads * head_dim


WRONG = {
    "MultiHeadLatentAttention": {
        "caches sized by the first call's batch": (FirstBatchCache, "crashed with RuntimeError on inputs of shape (2, 4, 20)"),
        "caches in float32 whatever the dtype": (Float32Cache, "dtype of what they cache"),
        "caches as plain attributes grown with torch.cat": (GrowingCache, "k_cache"),
    },
    "mla_cache_elements_per_token": {"returns a float": (mla_count_float, "int")},
    "kv_cache_elements_per_token": {"returns a float": (kv_count_float, "int")},
}

RIGHT = {}
