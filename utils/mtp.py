"""Multi-token prediction (MTP), DeepSeek-V3's fourth idea, and self-speculative decoding (12).

Training: besides the next token, module k (k = 1..D) predicts the token k + 1 places ahead.
It is sequential, so every depth keeps the causal chain: at position i, module k combines the
hidden state of depth k - 1 (depth 0 is the main model) with the embedding of token i + k, the
token that depth k - 1 was asked to predict, and runs one Block:

    h^k_i = block_k(eh_proj([enorm(Emb(t_{i+k})) ; hnorm(h^{k-1}_i)]))      (released layout)
    P^k_{i+k+1} = softmax(head(norm(h^k_i)))     embedding, final norm and head are the main model's

The paper (DeepSeek-V3 report, sec. 2.2) writes the concatenation with the hidden state first;
the released weights (`model.layers.61.eh_proj`) take the embedding first. Both are one model:
swapping the two halves of eh_proj's columns turns one into the other. Here h^0 is the residual
stream before the main model's final norm; hnorm rescales it either way. One difference from
the released layer 61: V3's module has an output norm of its own (`shared_head.norm`) and shares
only the embedding and the head matrix; this course sends every depth through the main model's
final `norm`, so the checkpoint's MTP module has one norm fewer.

    loss = next_token_loss + lam / D * sum_k CE(P^k, targets of depth k)    (V3: D = 1, lam 0.3, then 0.1)

Inference: drop the modules (the main model alone is a complete model), or use depth 1 as a
draft: `speculative_generate` feeds [last token, draft] to the main model in ONE forward pass;
its prediction at the first position verifies the draft, and when they agree the pass has
produced two tokens. Every kept token is the main model's own greedy choice, so the output is
identical to plain greedy decoding; only the number of forward passes changes. The main model
decodes on MLA's absorbed path (its cache holds the latent and the rope key); the draft block
keeps the naive path, since MTPModule.forward has no absorb argument in the contract.

When does the draft pay? Greedy decoding makes one token per one-token pass of the main model
(time t1). A speculative step runs one two-token pass (t2) and one draft (td) and keeps 1 + a
tokens, a the acceptance rate. With c2 = t2 / t1 and r = td / t1 (the draft's cost relative to
the model it drafts for):

    speed-up = (1 + a) / (c2 + r),   break-even at r = 1 + a - c2.

On a GPU serving a large model c2 is close to 1 (a step is bound by reading the weights, which
two tokens read once); on a CPU at this size it is close to 1 as well, since each operation's
fixed cost dominates. The draft is one block, so r falls as the main model grows deeper:
`checkpoints/mini_deepseek.pt` has 2 layers, `mini_deepseek_8layers.pt` 8.

`python -m utils.mtp` measures, on both trained checkpoints side by side, the acceptance rate,
tokens per pass, greedy and speculative tokens/s, their ratio, the measured c2 and r with the
speed-up they predict, and the bandwidth line; then, on the 8-layer model, the speed-up against
the draft's cost with the draft made 1, 3, 6 and 9 times dearer (`DearerDraft`).
Tests: `.venv/bin/pytest utils/tests/test_mtp.py`.
"""
import torch
import torch.nn.functional as F
from torch import nn

from utils.benchmark import device_of, now
from utils.mini_deepseek import CHECKPOINT, Block, MiniDeepSeekConfig, hidden_states
from utils.rmsnorm import RMSNorm


class MTPModule(nn.Module):
    """Depth-k module: (hidden state of depth k-1, embedding of token i+k) -> hidden state of depth k."""

    def __init__(self, cfg: MiniDeepSeekConfig, layer_id: int):
        super().__init__()
        self.enorm = RMSNorm(cfg.dim)
        self.hnorm = RMSNorm(cfg.dim)
        self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)
        self.block = Block(cfg, layer_id)

    def forward(self, h_prev: torch.Tensor, next_embeddings: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        x = torch.cat([self.enorm(next_embeddings), self.hnorm(h_prev)], dim=-1)  # (B, T, 2 * dim)
        return self.block(self.eh_proj(x), start_pos)  # (B, T, dim)


def mtp_forward(model: nn.Module, mtp_modules, tokens: torch.Tensor):
    """Logits of the main model (B, T, V) and of each depth k, (B, T - k, V), in one sequential chain."""
    h = hidden_states(model, tokens)  # (B, T, dim), depth 0
    logits = model.head(model.norm(h))
    mtp_logits = []
    for k, module in enumerate(mtp_modules, start=1):
        # position i (0 .. T-k-1) combines h^{k-1}_i with the embedding of token i + k
        h = module(h[:, :-1], model.embed(tokens[:, k:]))  # (B, T - k, dim)
        mtp_logits.append(model.head(model.norm(h)))
    return logits, mtp_logits


def mtp_loss(mtp_logits, tokens: torch.Tensor, lam: float = 0.3) -> torch.Tensor:
    """lam / D * sum_k CE: position i of depth k predicts tokens[:, i + k + 1].

    Each CE is a mean over the positions that have a target (T - k - 1 of them); the report's L_k
    puts 1/T in front of its sum instead, a constant factor per depth.
    """
    D = len(mtp_logits)
    total = 0.0
    for k, logits in enumerate(mtp_logits, start=1):  # logits: (B, T - k, V)
        V = logits.shape[-1]
        total = total + F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, k + 1:].reshape(-1))
    return lam / D * total


def make_mtp_modules(cfg: MiniDeepSeekConfig, depth: int = 1) -> nn.ModuleList:
    """D modules; module k is layer n_layers + k - 1, as V3's MTP module is its layer 61."""
    return nn.ModuleList(MTPModule(cfg, cfg.n_layers + k) for k in range(depth))


def load_mtp_modules(path=None, device=None) -> nn.ModuleList:
    """The MTP modules trained with the checkpoint's model (eval mode), on `device` (default: the default device)."""
    ckpt = torch.load(path or CHECKPOINT, map_location="cpu", weights_only=True)
    with torch.device("cpu"):
        modules = make_mtp_modules(MiniDeepSeekConfig(**ckpt["config"]), ckpt["mtp_depth"])
    modules.load_state_dict(ckpt["mtp"])
    return modules.to(device_of(device)).eval()


def _predict(model, h):  # (B, T, dim) -> greedy token ids (B, T)
    return model.head(model.norm(h)).argmax(-1)


@torch.no_grad()
def speculative_generate(model: nn.Module, mtp_module: nn.Module, prompt: torch.Tensor, max_new_tokens: int):
    """Greedy decoding with depth 1 as a draft, batch 1. Returns (tokens (1, T + max_new_tokens), stats).

    Positions: the main model's cache holds every position before the last committed token p;
    a step feeds [t_p, draft] at start_pos p. Its prediction at p verifies the draft (position p+1)
    and its prediction at p+1 is a free extra token when the draft was right. A rejected draft
    leaves a stale cache entry at p+1, overwritten by the next step, which starts there.
    """
    if prompt.shape[0] != 1:
        raise ValueError(f"speculative_generate decodes one sequence at a time, got a batch of {prompt.shape[0]}")
    T = prompt.shape[1]
    h = hidden_states(model, prompt, 0, absorb=True)  # (1, T, dim): prefill of the main model
    tokens = torch.cat([prompt, _predict(model, h[:, -1:])], dim=1)
    passes, drafted, accepted = 1, 0, 0
    # prefill of the MTP module: position i combines h_i with the embedding of token i + 1
    draft = _predict(model, mtp_module(h, model.embed(tokens[:, 1:]), 0)[:, -1:])  # (1, 1)
    while tokens.shape[1] < T + max_new_tokens:
        p = tokens.shape[1] - 1
        if tokens.shape[1] + 1 == T + max_new_tokens:  # one token left: no draft needed
            tokens = torch.cat([tokens, _predict(model, hidden_states(model, tokens[:, -1:], p, absorb=True))], dim=1)
            passes += 1
            break
        h = hidden_states(model, torch.cat([tokens[:, -1:], draft], dim=1), p, absorb=True)  # (1, 2, dim)
        pred = _predict(model, h)  # (1, 2): the main model's tokens for p+1 and p+2
        passes, drafted = passes + 1, drafted + 1
        if pred[0, 0] == draft[0, 0]:
            accepted += 1
            new = pred  # the draft (= pred[:, :1]) and the bonus token
        else:
            new, h = pred[:, :1], h[:, :1]
        tokens = torch.cat([tokens, new], dim=1)
        draft = _predict(model, mtp_module(h, model.embed(new), p)[:, -1:])
    stats = {"passes": passes, "drafted": drafted, "accepted": accepted,
             "acceptance": accepted / max(drafted, 1), "tokens_per_pass": max_new_tokens / passes}
    return tokens[:, :T + max_new_tokens], stats


@torch.no_grad()
def greedy_generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Plain greedy decoding with the (absorbed, latent) cache: one forward pass per token."""
    tokens = torch.cat([prompt, _predict(model, hidden_states(model, prompt, 0, absorb=True)[:, -1:])], dim=1)
    while tokens.shape[1] < prompt.shape[1] + max_new_tokens:
        h = hidden_states(model, tokens[:, -1:], tokens.shape[1] - 1, absorb=True)
        tokens = torch.cat([tokens, _predict(model, h)], dim=1)
    return tokens


def decode_benchmark(model, mtp_module, prompts, max_new_tokens: int, repeats: int = 3) -> dict:
    """Plain greedy vs self-speculative decoding on the same prompts, rounds interleaved.

    Returns tokens/s of each (best of `repeats` rounds), their ratio, the acceptance rate and
    tokens per forward pass over all prompts, and whether every output equals plain greedy.
    Runs where the model lives; the prompts are moved there.
    """
    device = device_of(model)
    prompts = [p.to(device) for p in prompts]
    best = {"greedy": float("inf"), "speculative": float("inf")}
    identical, drafted, accepted, passes = True, 0, 0, 0
    for r in range(repeats):
        for name in best:
            t0 = now(device)
            outs = []
            for prompt in prompts:
                if name == "greedy":
                    outs.append((greedy_generate(model, prompt, max_new_tokens), None))
                else:
                    outs.append(speculative_generate(model, mtp_module, prompt, max_new_tokens))
            best[name] = min(best[name], now(device) - t0)
            if name == "greedy":
                reference = [o for o, _ in outs]
            elif r == 0:
                identical &= all(torch.equal(o, ref) for (o, _), ref in zip(outs, reference))
                drafted += sum(s["drafted"] for _, s in outs)
                accepted += sum(s["accepted"] for _, s in outs)
                passes += sum(s["passes"] for _, s in outs)
    n = len(prompts) * max_new_tokens
    rate = {name: n / t for name, t in best.items()}
    return {"greedy_tok_s": rate["greedy"], "speculative_tok_s": rate["speculative"],
            "speedup": rate["speculative"] / rate["greedy"], "acceptance": accepted / max(drafted, 1),
            "tokens_per_pass": n / passes, "identical": identical, "new_tokens": n}


class DearerDraft(nn.Module):
    """The same draft, `times` times dearer: its module runs `times` times on the same input. The
    output and the cache it writes are the same; only the draft's cost grows (for cost_sweep)."""

    def __init__(self, module: nn.Module, times: int):
        super().__init__()
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times}")
        self.module, self.times = module, times

    def forward(self, h_prev, next_embeddings, start_pos: int = 0):
        for _ in range(self.times):
            out = self.module(h_prev, next_embeddings, start_pos)
        return out


@torch.no_grad()
def step_costs(model: nn.Module, mtp_module: nn.Module, prompt: torch.Tensor, calls: int = 50, rounds: int = 5) -> dict:
    """Seconds per call, best of `rounds` interleaved rounds: a cached main-model pass on 1 and on
    2 tokens ('main1', 'main2') and a draft (module and head) on 1 and on 2 tokens ('draft1',
    'draft2'), all at the position after `prompt` (batch 1), with their head's argmax included;
    on the model's device (the prompt is moved there)."""
    device = device_of(model)
    prompt = prompt.to(device)
    T = prompt.shape[1]
    h = hidden_states(model, prompt, 0, absorb=True)  # prefill both caches
    mtp_module(h, model.embed(prompt), 0)
    two, h2 = prompt[:, -2:], h[:, -2:]
    work = {"main1": lambda: _predict(model, hidden_states(model, two[:, :1], T, absorb=True)),
            "main2": lambda: _predict(model, hidden_states(model, two, T, absorb=True)),
            "draft1": lambda: _predict(model, mtp_module(h2[:, :1], model.embed(two[:, :1]), T)),
            "draft2": lambda: _predict(model, mtp_module(h2, model.embed(two), T))}
    best = dict.fromkeys(work, float("inf"))
    for _ in range(rounds):
        for name, f in work.items():
            f()  # rewrites the same cache positions: every call does the same work
            start = now(device)
            for _ in range(calls):
                f()
            best[name] = min(best[name], (now(device) - start) / calls)
    return best


def predicted_speedup(acceptance: float, verify_cost: float, draft_cost: float) -> float:
    """(1 + a) / (c2 + r): tokens per speculative step over its cost, both in greedy steps."""
    return (1 + acceptance) / (verify_cost + draft_cost)


def cost_model(costs: dict, acceptance: float) -> dict:
    """c2, r (the draft on 2 tokens after an accepted step, on 1 after a rejection), the predicted
    speed-up and the break-even r, from step_costs and the acceptance rate."""
    c2 = costs["main2"] / costs["main1"]
    r = (acceptance * costs["draft2"] + (1 - acceptance) * costs["draft1"]) / costs["main1"]
    return {"verify_cost": c2, "draft_cost": r, "predicted": predicted_speedup(acceptance, c2, r),
            "break_even": 1 + acceptance - c2}


def cost_sweep(model, mtp_module, prompts, max_new_tokens: int, times=(1, 3, 6, 9), repeats: int = 2,
               calls: int = 50, rounds: int = 5, progress=None) -> list[dict]:
    """Measured speed-up of self-speculative decoding against the draft's measured cost r, the
    draft made `times` times dearer (DearerDraft); each row also has the cost model's prediction
    (step_costs with `calls` and `rounds`)."""
    rows = []
    for m in (progress(times) if progress else times):
        draft = DearerDraft(mtp_module, m)
        r = decode_benchmark(model, draft, prompts, max_new_tokens, repeats)
        costs = step_costs(model, draft, prompts[0], calls, rounds)
        rows.append({"times": m, **cost_model(costs, r["acceptance"]),
                     "speedup": r["speedup"], "acceptance": r["acceptance"], "identical": r["identical"]})
    return rows


def report(name: str, model, mtp_module, prompts, max_new_tokens: int, repeats: int = 3) -> dict:
    """decode_benchmark, the cost model and the bandwidth line of one checkpoint, printed."""
    from utils.bandwidth import bandwidth_fraction, bandwidth_line
    from utils.mini_deepseek import bytes_read_per_token

    r = decode_benchmark(model, mtp_module, prompts, max_new_tokens, repeats)
    r.update(cost_model(step_costs(model, mtp_module, prompts[0]), r["acceptance"]))
    context = round(sum(p.shape[1] for p in prompts) / len(prompts) + max_new_tokens / 2)  # mean over the decode
    print(f"{name}: {model.cfg.n_layers} layers, {len(prompts)} copy prompts, {max_new_tokens} new tokens each, "
          f"batch 1, best of {repeats} rounds")
    print(f"  acceptance of the drafted token  {r['acceptance']:.1%}")
    print(f"  tokens per main-model pass       {r['tokens_per_pass']:.2f}")
    print(f"  greedy                           {r['greedy_tok_s']:.0f} tokens/s")
    print(f"  self-speculative (MTP draft)     {r['speculative_tok_s']:.0f} tokens/s ({r['speedup']:.2f}x greedy)")
    print(f"  output identical to greedy       {r['identical']}")
    print(f"  cost model: c2 = {r['verify_cost']:.2f}, r = {r['draft_cost']:.2f} -> predicted "
          f"{r['predicted']:.2f}x; break-even at r = {r['break_even']:.2f}")
    print(f"  greedy bandwidth line: {bandwidth_line(bytes_read_per_token(model, context), r['greedy_tok_s'])}")
    r["fraction"] = bandwidth_fraction(bytes_read_per_token(model, context), r["greedy_tok_s"])
    return r


if __name__ == "__main__":
    from tqdm.auto import tqdm

    from utils.copy_task import copy_prompts
    from utils.mini_deepseek import DEEP_CHECKPOINT, load_checkpoint

    torch.set_num_threads(1)  # a model this small gains nothing from a second thread
    torch.manual_seed(0)
    prompts = copy_prompts(16, torch.Generator().manual_seed(1234))
    new = 30  # the longest prompt (18 tokens) + 30 stays within the 48 positions the models were trained on
    shares = []
    for path in (CHECKPOINT, DEEP_CHECKPOINT):
        model, _ = load_checkpoint(path)
        shares.append(report(path.name, model, load_mtp_modules(path)[0], prompts, new)["fraction"])
    if max(shares) < 0.25:
        print(f"both greedy decodes reach at most {max(shares):.0%} of the read rate: at this size a decode step is "
              "bound by the fixed cost of each operation, not by memory")
    else:
        print(f"a greedy decode reached {max(shares):.0%} of the read rate: on this machine memory is a large share of a step")
    print(f"\n{DEEP_CHECKPOINT.name}, the draft made dearer (DearerDraft), 8 prompts, best of 2 rounds:")
    print(f"  {'draft runs':>10}  {'r':>5}  {'c2':>5}  {'predicted':>9}  {'measured':>8}  {'acceptance':>10}")
    for row in cost_sweep(model, load_mtp_modules(DEEP_CHECKPOINT)[0], prompts[:8], new,
                          progress=lambda t: tqdm(t, desc="draft cost sweep", leave=False)):
        print(f"  {row['times']:>10}  {row['draft_cost']:>5.2f}  {row['verify_cost']:>5.2f}  {row['predicted']:>8.2f}x"
              f"  {row['speedup']:>7.2f}x  {row['acceptance']:>10.1%}")
    print("speculation pays while r stays below the break-even point 1 + a - c2")
