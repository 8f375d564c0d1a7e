"""Decode speed, memory and accuracy of float32, weight-only int8 and W8A8, side by side in one
run (notebook 11).

    .venv/bin/python -m utils.bench_quantize              # full size: 12 layers, width 768, GPT-2 vocabulary
    .venv/bin/python -m utils.bench_quantize --small      # a smaller GPT, about a minute
    .venv/bin/python -m utils.bench_quantize --threads 2  # default 1: steady timings on a shared machine

Speed: greedy decoding of notebook 07's GPT (random weights; speed does not depend on them),
batch 1, each variant `repeats` times interleaved, medians, as ratios to float32. Decoding one
token reads every weight once, so the command also prints the bytes read per token and the share
of this machine's read rate (`utils.bandwidth.read_bandwidth`) that the measured speed reaches. Accuracy: the trained mini
DeepSeek of notebook 12, teacher-forced on the copying task: top-1 agreement with float32 on the
positions whose next token is determined (copied), on all positions, and the change in loss.

`--device cuda` runs it on a GPU (the clock read after synchronizing, the GPU's own bandwidth);
W8A8 runs on fbgemm, x86 CPUs only, so it is left out there.
"""
import argparse
import copy
import statistics

import torch
from tqdm.auto import tqdm

from utils.bandwidth import bandwidth_fraction, memory_bandwidth, read_bandwidth
from utils.benchmark import device_of, now
from utils.gpt import GPTConfig, GPTModel
from utils.quantize import quantize_model_, weight_bytes
from utils.w8a8 import W8A8Linear

FULL = GPTConfig()  # notebook 07's model: 12 layers, width 768, 12 heads, vocabulary 50257
SMALL = GPTConfig(vocab_size=8192, context_length=128, emb_dim=512, n_heads=8, n_layers=4)


def layer_times(width: int, repeats: int = 100) -> dict:
    """Best microseconds of one call at batch 1 of a width x width layer, float32, weight-only int8
    (`utils.quantize`) and W8A8 (fbgemm), interleaved, on the CPU: the layers of a model of that
    width, without the rest of the model."""
    import time

    from utils.quantize import Int8WeightOnlyLinear
    torch.manual_seed(0)
    with torch.device("cpu"):
        base = torch.nn.Linear(width, width)
    layers = {"float32": base, "int8 weight-only": Int8WeightOnlyLinear.from_linear(base),
              "W8A8 (fbgemm)": W8A8Linear.from_linear(base)}
    x, best = torch.randn(1, width), {name: float("inf") for name in layers}
    with torch.inference_mode():
        for _ in range(repeats):
            for name, layer in layers.items():  # interleaved: a busy moment slows every layer alike
                start = time.perf_counter()
                layer(x)
                best[name] = min(best[name], time.perf_counter() - start)
    return {"width": width} | {name: 1e6 * t for name, t in best.items()}


def int8_order(rows, layers: dict | None = None) -> str:
    """Which int8 model decoded faster in `rows` (decode_benchmark's float32, weight-only, W8A8),
    and what fits that order; `layers` (layer_times at the model's width) is quoted when given, and
    said when one layer alone gives the other order."""
    wo, w8 = rows[1], rows[2]
    ratios = f"weight-only int8 {wo['speed / float32']:.2f}x, W8A8 {w8['speed / float32']:.2f}x float32"
    w8a8_first = w8["tokens/s"] > wo["tokens/s"]
    alone = same = ""
    if layers:
        w = layers["width"]
        same = (layers["W8A8 (fbgemm)"] < layers["int8 weight-only"]) == w8a8_first
        alone = (f" One {w} x {w} layer alone, per call: W8A8 {layers['W8A8 (fbgemm)']:.0f} us, weight-only "
                 f"{layers['int8 weight-only']:.0f} us, float32 {layers['float32']:.0f} us: "
                 + ("the same order." if same else "the other order, so the difference lies outside the matrix "
                    "products or in a disturbed run (rerun on a quiet machine)."))
    if w8a8_first:
        return (f"{ratios}: W8A8 was the faster int8 model here. Both read the same bytes; weight-only int8 widens every "
                "weight to float and multiplies in float, while W8A8 multiplies 8-bit activations by int8 weights into "
                "int32, many products per instruction (AVX2 vpmaddubsw, AVX-512 VNNI)." + alone)
    why = (" At batch 1 with layers this small, what a call does besides reading its weight (converting or quantizing "
           "the activation vector, the kernel's own setup) can be a large share of its time, and here it cost W8A8 more."
           if same else "")
    return f"{ratios}: on this machine the weight-only model was the faster int8 one." + alone + why


def bytes_read_per_token(model) -> int:
    """Weight bytes one decode step reads: everything but the embedding tables (one row each)."""
    tables = {id(t) for m in model.modules() if isinstance(m, torch.nn.Embedding) for t in m.parameters()}
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()] if id(t) not in tables)


def build_variants(model) -> dict:
    """float32, weight-only int8 and W8A8 copies of one model (every nn.Linear quantized); W8A8
    only for a model on the CPU (fbgemm runs nowhere else)."""
    variants = {"float32": model, "int8 weight-only": quantize_model_(copy.deepcopy(model))}
    if device_of(model).type == "cpu":
        variants["W8A8 (fbgemm)"] = quantize_model_(copy.deepcopy(model), layer=W8A8Linear)
    return variants


@torch.inference_mode()
def decode(model, prompt, new_tokens: int):
    """Prefill the prompt, then time `new_tokens` greedy steps of one token: (seconds, token ids).
    Runs on the prompt's device (the model must be there)."""
    caches = model.new_caches(prompt.shape[0], prompt.shape[1] + new_tokens)
    logits = model(prompt, caches)
    ids = []
    start = now(prompt.device)
    for _ in range(new_tokens):
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids.append(next_id)
        logits = model(next_id, caches)
    return now(prompt.device) - start, torch.cat(ids, dim=1)


def decode_benchmark(variants: dict, prompt, new_tokens: int = 16, repeats: int = 3, bandwidth: float | None = None,
                     progress=True) -> list[dict]:
    """One row per variant: tokens/s, speed and memory as ratios to the first variant, the
    share of generated tokens equal to its, and with `bandwidth` the share of it reached."""
    times = {name: [] for name in variants}
    tokens = {}
    for name, model in variants.items():  # warm-up, and the tokens each variant generates
        tokens[name] = decode(model, prompt, 2)[1]
    for _ in tqdm(range(repeats), desc="decode rounds", leave=False, disable=not progress):
        for name, model in variants.items():  # interleaved: a busy moment slows every variant alike
            seconds, tokens[name] = decode(model, prompt, new_tokens)
            times[name].append(seconds)
    base = next(iter(variants))
    rows = []
    for name, model in variants.items():
        speed = new_tokens / statistics.median(times[name])
        read = bytes_read_per_token(model)
        rows.append({"variant": name, "tokens/s": speed, "weight MB": weight_bytes(model) / 1e6, "read MB/token": read / 1e6,
                     "of bandwidth": bandwidth_fraction(read, speed, bandwidth) if bandwidth else None,
                     "same tokens as float32": float((tokens[name] == tokens[base]).float().mean())})
    for r in rows:
        r["speed / float32"] = r["tokens/s"] / rows[0]["tokens/s"]
        r["memory / float32"] = r["weight MB"] / rows[0]["weight MB"]
    return rows


def format_rows(rows) -> str:
    head = (f"{'variant':<17} {'tokens/s':>9} {'speed/fp32':>10} {'weight MB':>10} {'mem/fp32':>9} {'same tokens':>11} "
            f"{'MB read/token':>13} {'of bandwidth':>12}")
    lines = [head]
    for r in rows:
        share = f"{r['of bandwidth']:>12.0%}" if r["of bandwidth"] is not None else f"{'-':>12}"
        lines.append(f"{r['variant']:<17} {r['tokens/s']:>9.2f} {r['speed / float32']:>9.2f}x {r['weight MB']:>10.1f} "
                     f"{r['memory / float32']:>8.2f}x {r['same tokens as float32']:>10.0%} {r['read MB/token']:>13.1f} {share}")
    return "\n".join(lines)


@torch.no_grad()
def accuracy_rows(variants: dict, tokens: torch.Tensor) -> list[dict]:
    """Teacher-forced on `tokens` (B, T) of the copying task: for each variant the next-token loss,
    its change from the first variant's, and the share of positions where its top-1 token is the
    first variant's, on the copied positions (next token determined) and on all of them."""
    from utils.mini_deepseek import next_token_loss
    from utils.copy_task import copy_mask
    copied = copy_mask(tokens)[:, 1:]                                          # (B, T-1)
    logits = {name: model(tokens.to(device_of(model))).to(tokens.device) for name, model in variants.items()}
    base = next(iter(variants))
    top1 = {name: out.argmax(dim=-1)[:, :-1] for name, out in logits.items()}
    rows = []
    for name, out in logits.items():
        same = top1[name] == top1[base]
        loss = float(next_token_loss(out, tokens))
        rows.append({"variant": name, "loss": loss, "agree copied": float(same[copied].float().mean()),
                     "agree all": float(same.float().mean())})
    for r in rows:
        r["loss change"] = r["loss"] - rows[0]["loss"]
    return rows


def format_accuracy(rows) -> str:
    lines = [f"{'variant':<20} {'loss':>8} {'change':>9} {'top-1 = float32, copied':>24} {'all positions':>14}"]
    lines += [f"{r['variant']:<20} {r['loss']:>8.4f} {r['loss change']:>+9.5f} {r['agree copied']:>24.2%} {r['agree all']:>14.2%}"
              for r in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a smaller GPT (4 layers, width 512)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--device", default=None, help="where to decode (default: the CPU; W8A8 runs on the CPU only)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = SMALL if args.small else FULL
    device = device_of(args.device)
    bandwidth = read_bandwidth(device=device)
    print(f"{device}; threads: {torch.get_num_threads()}; CPU: {torch.backends.cpu.get_cpu_capability()}, "
          f"VNNI {'yes' if torch.cpu._is_vnni_supported() else 'no'}; read rate (a matrix-vector product): "
          f"{bandwidth / 1e9:.1f} GB/s; copy (read + write, a reference): {memory_bandwidth(device=device) / 1e9:.1f} GB/s")
    torch.manual_seed(0)
    with torch.device("cpu"):  # the same weights on every device
        model = GPTModel(cfg)
    variants = build_variants(model.to(device).eval())
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1), device="cpu").to(device)
    rows = decode_benchmark(variants, prompt, args.new_tokens, args.repeats, bandwidth)
    print(f"\nspeed: {cfg.n_layers} layers, width {cfg.emb_dim}, vocabulary {cfg.vocab_size}; batch 1, prompt 16 tokens, "
          f"{args.new_tokens} decode steps, median of {args.repeats} interleaved runs")
    print(format_rows(rows))
    print("of bandwidth = tokens/s * bytes read per token / read rate (every weight once; of the embedding table one row)")
    if len(rows) > 2:
        print(int8_order(rows, layer_times(cfg.emb_dim)))
    else:
        print(f"weight-only int8 {rows[1]['speed / float32']:.2f}x float32 on {device}; W8A8 (fbgemm) runs on x86 CPUs only")

    from utils.mini_deepseek import load_checkpoint
    from utils.copy_task import make_batch
    trained, _ = load_checkpoint(device=device)
    tokens = make_batch(256, generator=torch.Generator().manual_seed(11), device=device)
    print(f"\naccuracy: the trained mini DeepSeek, {tokens.numel():,} positions of the copying task, teacher-forced")
    print(format_accuracy(accuracy_rows(build_variants(trained), tokens)))
    print("on positions that are not copied the next token is random and the model's top two are near-ties, "
          "which any rounding can swap")


if __name__ == "__main__":
    main()
