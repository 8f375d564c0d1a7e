"""Train the mini DeepSeek (with one multi-token-prediction module) on a copying task (11, 12).

    .venv/bin/python -m utils.train_mini                 # checkpoints/mini_deepseek.pt, 2 layers (30 s quiet)
    .venv/bin/python -m utils.train_mini --n-layers 8 --out checkpoints/mini_deepseek_8layers.pt   # (96 s)
    .venv/bin/python -m utils.train_mini --steps 200 --out /tmp/mini.pt   # a quick try

Training is deterministic on one thread: the same command gives the same weights, and
utils/tests/test_mtp.py retrains the committed checkpoints to check that they are what their
stored command makes (`train_seconds` in each is the time it took on a quiet 2-core machine).

The task (BOS, a random segment, SEP, then the segment again and again) is `utils.copy_task`;
its names are imported here too, so `from utils.train_mini import make_batch` keeps working.

The command trains `MiniDeepSeek` with D = 1 MTP module, loss = next-token loss + lam / D * MTP
loss (lam 0.3), AdamW with warmup and cosine decay, the gate biases moved after every step by
`update_expert_bias` (auxiliary-loss-free balancing), a fixed seed, a tqdm bar; it writes
`checkpoints/mini_deepseek.pt` (config, weights of the model and of the MTP module, seed, command,
final losses) and the loss curve `checkpoints/mini_deepseek_loss.png`.
"""
import argparse
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from utils.benchmark import device_of
from utils.copy_task import BOS, SEP, SEQ_LEN, copy_mask, copy_prompts, make_batch  # noqa: F401 (re-exported)
from utils.mini_deepseek import CHECKPOINT, MiniDeepSeek, MiniDeepSeekConfig, moe_layers, next_token_loss
from utils.moe import update_expert_bias
from utils.mtp import make_mtp_modules, mtp_forward, mtp_loss


@torch.no_grad()
def copy_accuracy(model, tokens: torch.Tensor) -> float:
    """Share of the determined tokens that the model predicts (teacher-forced, greedy)."""
    pred = model(tokens)[:, :-1].argmax(-1)
    mask = copy_mask(tokens)[:, 1:]
    return float((pred == tokens[:, 1:])[mask].float().mean())


class ExpertCounter:
    """Counts the tokens each expert of each MoE layer received (a hook on every gate)."""

    def __init__(self, modules):
        self.layers = [m for m in modules for m in moe_layers(m)]
        self.counts = [torch.zeros(m.n_routed_experts, device=m.gate.weight.device) for m in self.layers]
        self.hooks = [m.gate.register_forward_hook(self._hook(i)) for i, m in enumerate(self.layers)]

    def _hook(self, i):
        def hook(gate, inputs, output):
            self.counts[i] += torch.bincount(output[1].flatten(), minlength=len(self.counts[i]))
        return hook

    def update_biases(self, gamma: float):
        """update_expert_bias on every gate with the counts since the last call, then reset them."""
        with torch.no_grad():
            for moe, counts in zip(self.layers, self.counts):
                moe.gate.bias.copy_(update_expert_bias(moe.gate.bias, counts, gamma))
                counts.zero_()

    def remove(self):
        for h in self.hooks:
            h.remove()


def learning_rate(step: int, steps: int, lr: float) -> float:
    """Linear warmup over the first 5% of the steps (at most 50), then cosine decay to lr / 10."""
    warmup = min(50, max(1, steps // 20))
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))


def train(model, mtp_modules=None, steps: int = 500, batch_size: int = 32, lr: float = 5e-3, lam: float = 0.3,
          gamma: float = 0.01, seed: int = 0, progress=None) -> dict:
    """Train in place, on the model's device; returns the per-step losses ('loss', 'next_token', 'mtp').

    The batches come from a CPU generator and are moved to the model's device, so every device
    trains on the same sequences."""
    mtp_modules = mtp_modules if mtp_modules is not None else []
    device = device_of(model)
    g = torch.Generator().manual_seed(seed)
    params = [p for m in [model, *mtp_modules] for p in m.parameters() if p.requires_grad]  # not the gate biases
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    counter = ExpertCounter([model, *mtp_modules])
    history = {"loss": [], "next_token": [], "mtp": []}
    model.train()
    bar = progress(range(steps)) if progress else range(steps)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, lr)
        tokens = make_batch(batch_size, SEQ_LEN, g, model.cfg.vocab_size, device=device)
        logits, mtp_logits = mtp_forward(model, mtp_modules, tokens)
        main = next_token_loss(logits, tokens)
        extra = mtp_loss(mtp_logits, tokens, lam) if mtp_modules else torch.zeros((), device=device)
        loss = main + extra
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        counter.update_biases(gamma)
        history["loss"].append(loss.item())
        history["next_token"].append(main.item())
        history["mtp"].append(extra.item() / lam if mtp_modules else float("nan"))
        if progress and step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    counter.remove()
    model.eval()
    for m in mtp_modules:
        m.eval()
    return history


def evaluate(model, mtp_modules, seed: int = 1, batch_size: int = 256) -> dict:
    """Losses and copy accuracy on a held-out batch (its own seed)."""
    tokens = make_batch(batch_size, SEQ_LEN, torch.Generator().manual_seed(seed), model.cfg.vocab_size,
                        device=device_of(model))
    with torch.no_grad():
        logits, mtp_logits = mtp_forward(model, mtp_modules, tokens)
        mask = copy_mask(tokens)[:, 1:]
        ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T-1)
        out = {"next_token_loss": float(ce.mean()), "copy_loss": float(ce[mask].mean()),
               "copy_accuracy": float((logits[:, :-1].argmax(-1) == tokens[:, 1:])[mask].float().mean())}
        if mtp_modules:
            m = mtp_logits[0][:, :-1]  # depth 1: position i predicts token i + 2
            mask2 = copy_mask(tokens)[:, 2:]
            out["mtp_loss"] = float(mtp_loss(mtp_logits, tokens, lam=1.0))
            out["mtp_copy_accuracy"] = float((m.argmax(-1) == tokens[:, 2:])[mask2].float().mean())
    return out


def plot_losses(history: dict, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(history["next_token"], label="next-token loss", lw=1)
    ax.plot(history["mtp"], label="MTP depth-1 loss (token i + 2)", lw=1, alpha=0.8)
    ax.set_xlabel("training step"); ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("mini DeepSeek on the copying task"); ax.legend(); ax.grid(alpha=0.3)
    fig.tight_layout(); fig.savefig(path, dpi=90); plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--lam", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-layers", type=int, default=MiniDeepSeekConfig.n_layers,
                        help="main-model depth; the MTP draft stays one block, so a deeper model makes it cheaper")
    parser.add_argument("--out", type=Path, default=CHECKPOINT)
    args = parser.parse_args(argv)
    from tqdm.auto import tqdm

    torch.set_num_threads(1)  # a model this small runs no faster on 2 threads, and 1 thread is reproducible
    torch.manual_seed(args.seed)
    cfg = MiniDeepSeekConfig(n_layers=args.n_layers)
    model = MiniDeepSeek(cfg)
    mtp_modules = make_mtp_modules(cfg, depth=1)
    t0 = time.perf_counter()
    history = train(model, mtp_modules, args.steps, args.batch_size, args.lr, args.lam, seed=args.seed,
                    progress=lambda r: tqdm(r, desc="training", mininterval=1.0))
    seconds = time.perf_counter() - t0
    result = evaluate(model, mtp_modules)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = "python -m utils.train_mini" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:] if argv is None else argv))
    torch.save({"config": asdict(cfg), "model": model.state_dict(), "mtp": mtp_modules.state_dict(), "mtp_depth": 1,
                "lam": args.lam, "seed": args.seed, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                "command": command, "train_seconds": round(seconds, 1), "torch": str(torch.__version__),
                "final": result, "history": {k: [round(v, 4) for v in vs] for k, vs in history.items()}}, args.out)
    plot_losses(history, args.out.with_name(args.out.stem + "_loss.png"))
    print(f"trained {args.steps} steps in {seconds:.0f} s; held-out: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) and {args.out.stem}_loss.png")


if __name__ == "__main__":
    main()
