"""Every reference kernel on a device against the CPU, and the benchmarks of notebooks 06-14 and 16 there.

    python -m utils.device_report --device cuda --out device_report.log   # on a GPU (a few minutes)
    python -m utils.device_report --small                                  # the CPU, small sizes (seconds)

Kernels (utils.device_checks): the same modules and inputs, built on the CPU, run on the CPU and on
the device; every output must be on the device and within its dtype's tolerance, and a tensor
that utils/ makes without device= fails (it is made on meta), on a GPU and on a CPU alike.
Benchmarks: the functions the notebooks call, at the notebooks' sizes (--small: tiny ones) and,
on a GPU, also at the larger sizes of the H200 figures that notebooks 07, 09 and 10 print, with their ratios and, for decodes,
the share of the device's measured read rate (utils.bandwidth). One table row per item, printed as it ends;
an item that raises is reported and the rest still runs; --out also keeps what each benchmark
measured and each traceback. The exit status is 1 when an item failed.
"""
import argparse
import contextlib
import io
import sys
import time
import traceback

import torch

from utils import copy_task, dsa, mini_deepseek, mla, moe, mtp, quantize
from utils.bandwidth import bandwidth_fraction, memory_bandwidth, read_bandwidth
from utils.device_checks import KERNELS, MLA_CFG, check_kernel, check_w8a8, watched
from utils.gpt import GPTConfig, GPTModel

BENCHMARKS = {}  # name -> fn(device, small, big) -> (one line, everything measured)


def benchmark(fn):
    BENCHMARKS[fn.__name__] = fn
    return fn


def pct(fraction) -> str:
    return f"{100 * fraction:.1f}% of bw"


@benchmark
def bandwidth(device, small, big):
    read, copy = read_bandwidth(device=device), memory_bandwidth(device=device)
    return f"read {read / 1e9:.1f} GB/s (matrix-vector product, 256 MiB), copy {copy / 1e9:.1f} GB/s (read + written, 2 x 256 MiB)", (read, copy)


@benchmark
def nb06_mha(device, small, big):
    from utils.benchmark import mha_benchmark
    sizes = [(1, 32)] if small else [(2, 256)] + ([(8, 1024)] if big else [])
    out = {f"B{b} T{t}": mha_benchmark(b, t, repeats=2 if small else 5, device=device) for b, t in sizes}
    return "; ".join(f"{k}: " + ", ".join(f"{r['variant'][:10]} {r['relative']:.2f}x" for r in rows) for k, rows in out.items()), out


@benchmark
def nb07_generation(device, small, big):
    from utils import bench_generate as bg
    sizes = {"tiny": (bg.SMALL, 4, 1)} if small else {"SMALL": (bg.SMALL, 80, 2)} | ({"FULL": (bg.FULL, 256, 3)} if big else {})
    out, parts = {}, []
    for name, (cfg, new, repeats) in sizes.items():
        rows = out[name] = {r["variant"]: r for r in bg.generation_benchmark(cfg, 8, new, repeats, device=device)}
        pre, mqa = rows["KV cache, preallocated"], rows["MQA 1 group, preallocated"]
        parts.append(f"{name}: cache {pre['tokens_per_s']:.0f} tok/s = {pre['speedup']:.2f}x no cache, {pct(pre['fraction'])}, "
                     f"MQA {mqa['tokens_per_s'] / pre['tokens_per_s']:.2f}x MHA")
    return "; ".join(parts), out


@benchmark
def nb07_regimes(device, small, big):
    from utils import bench_generate as bg
    steps = bg.step_times(bg.build(bg.LONG, device=device), [32, 256] if small else [32, 256, 1024, 2000],
                          steps=3 if small else 15, prefill_max=256 if small else 1024)
    cases = ({"long": (bg.LONG, 64, 4), "short": (bg.SMALL, 8, 4)} if small else
             {"long": (bg.LONG, 1792, 200), "full size": (bg.FULL, 8, 4)})
    regimes = bg.cache_regimes(cases, repeats=1 if small else 5, device=device)
    updates = bg.update_benchmark(bg.SMALL, 16 if small else 264, 1 if small else 3, device=device)
    a, b = steps[0], steps[-1]
    return (f"decode step {b['decode_s'] / a['decode_s']:.1f}x from T={a['context']} to {b['context']}; "
            + "; ".join(f"{r['regime']}: preallocated {r['ratio']:.2f}x torch.cat, {pct(r['fraction'])}" for r in regimes)
            + f"; updates alone: torch.cat {updates['ConcatKVCache'] / updates['KVCache']:.1f}x the time"), (steps, regimes, updates)


@benchmark
def nb09_mla_decode(device, small, big):
    cfgs = ({"tiny": (mla.MLAConfig(**MLA_CFG), [16, 32], 2)} if small else
            {"nb09": (mla.MLAConfig(256, 8, 96, 64, 32, 16, 32, max_seq_len=4097), [256, 1024, 4096], 15)})
    if big:  # DeepSeek-V3's sizes
        cfgs["V3"] = (mla.MLAConfig(7168, 128, 1536, 512, 128, 64, 128, max_seq_len=32769), [4096, 32768], 5)
    out, parts = {}, []
    for name, (cfg, contexts, repeats) in cfgs.items():
        torch.manual_seed(0)
        with torch.device(device):
            module = mla.MultiHeadLatentAttention(cfg)
        rows = out[name] = mla.decode_benchmark(cfg, contexts, repeats=repeats, module=module)
        parts.append(f"{name}: naive/absorbed " + ", ".join(f"{r['speedup']:.2f}x at {r['context']}" for r in rows)
                     + f"; caches {mla.cache_bytes(module, False) / 2**20:.1f} vs {mla.cache_bytes(module, True) / 2**20:.1f} MiB")
    return "; ".join(parts), out


@benchmark
def nb10_moe_dispatch(device, small, big):
    out = {}
    for tokens in [16] if small else [256] + ([2048] if big else []):
        torch.manual_seed(0)
        with torch.device(device):
            layer = moe.MoE(64, 32, n_routed_experts=64, n_activated_experts=6, n_shared_experts=1)
        out[tokens] = moe.dispatch_benchmark(tokens=tokens, moe=layer, repeats=1 if small else 3)
    return ", ".join(f"{t} tokens: vectorised {r['speedup']:.1f}x the per-token loop" for t, r in out.items()), out


@benchmark
def nb11_quantized_decode(device, small, big):
    from utils import bench_quantize as bq
    cfgs = ({"tiny": GPTConfig(vocab_size=512, context_length=32, emb_dim=64, n_heads=4, n_layers=1)} if small else
            {"SMALL": bq.SMALL} | ({"FULL": bq.FULL} if big else {}))
    out, parts = {}, []
    for name, cfg in cfgs.items():
        torch.manual_seed(0)
        with torch.device("cpu"):
            model = GPTModel(cfg)
        prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1), device="cpu")
        rows = out[name] = bq.decode_benchmark(bq.build_variants(model.to(device).eval()), prompt.to(device), 4 if small else 16,
                                               1 if small else 3, read_bandwidth(device=device), progress=False)
        parts.append(f"{name}: " + ", ".join(f"{r['variant']} {r['speed / float32']:.2f}x ({pct(r['of bandwidth'])})" for r in rows))
    kernel = "_weight_int8pack_mm" if quantize.has_int8pack_mm(device) else "no int8 kernel here: dequantizing matmul"
    return f"{kernel}; " + "; ".join(parts), out


@benchmark
def nb12_mtp_decode(device, small, big):
    prompts = copy_task.copy_prompts(1 if small else 3, torch.Generator().manual_seed(1234), device=device)
    new, out, parts = 4 if small else 30, {}, []
    for path in (mini_deepseek.CHECKPOINT, mini_deepseek.DEEP_CHECKPOINT):
        model, draft = mini_deepseek.load_checkpoint(path, device)[0], mtp.load_mtp_modules(path, device)[0]
        r = out[path.name] = mtp.decode_benchmark(model, draft, prompts, new, 1 if small else 2)
        r.update(mtp.cost_model(mtp.step_costs(model, draft, prompts[0], 2 if small else 20, 1 if small else 3), r["acceptance"]))
        context = round(sum(p.shape[1] for p in prompts) / len(prompts) + new / 2)
        r["fraction"] = bandwidth_fraction(mini_deepseek.bytes_read_per_token(model, context), r["greedy_tok_s"],
                                           read_bandwidth(device=device))
        parts.append(f"{model.cfg.n_layers} layers: greedy {r['greedy_tok_s']:.0f} tok/s ({pct(r['fraction'])}), speculative "
                     f"{r['speedup']:.2f}x, c2 {r['verify_cost']:.2f}, r {r['draft_cost']:.2f}, same tokens {r['identical']}")
    return "; ".join(parts), out


@benchmark
def nb13_sparse_decode(device, small, big):
    from utils import bench_sparse as bs
    if small:
        cfg = dsa.DSAConfig(dim=64, n_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                            v_head_dim=16, max_seq_len=129, index_n_heads=4, index_head_dim=16, index_topk=32)
        rows = bs.decode_step_benchmark([64, 128], repeats=1, cfg=cfg, device=device)
    else:
        rows = bs.decode_step_benchmark([1024, 4096, 8192, 32768] + ([65536] if big else []), 1024, 3, device=device)
    return (", ".join(f"{r['speedup']:.2f}x at {r['context']}" for r in rows)
            + f" (dense/sparse time); sparse faster from {bs.crossover(rows)}"), rows


@benchmark
def nb14_flash(device, small, big):
    from utils import bench_flash as bf
    rows = bf.measure([128, 256] if small else [1024, 4096, 16384], device=device)
    r = rows[-1]
    return (f"T={r['T']}: peak MiB naive {r['naive MiB']:.1f}, tiled {r['tiled MiB']:.1f}, SDPA {r['SDPA MiB']:.1f}; "
            f"time / SDPA: tiled {r['tiled s'] / r['SDPA s']:.0f}x, naive {r['naive s'] / r['SDPA s']:.1f}x"), rows


@benchmark
def nb16_linear(device, small, big):
    from utils import bench_linear as bl
    decode = bl.decode_rows([256, 1024] if small else [4096, 65536] + ([262144] if big else []), heads=2 if small else 16,
                            d=8 if small else 128, repeats=2 if small else 5, device=device)
    prefill = bl.prefill_rows([64] if small else [1024, 8192], heads=2 if small else 16, d=8 if small else 128, device=device)
    recall = bl.associative_recall([16, 256] if small else [64, 512, 4096], device=device)
    first, last = decode[0], decode[-1]
    return (f"decode ms at {first['context']} / {last['context']}: fixed state {first['linear ms']:.3f} / {last['linear ms']:.3f}, "
            f"KV cache {first['attention ms']:.3f} / {last['attention ms']:.3f}; prefill of {prefill[-1]['tokens']}: chunked "
            f"{prefill[-1]['recurrent s'] / prefill[-1]['chunked s']:.1f}x faster; recall at {recall[-1]['pairs']} pairs: linear "
            f"{recall[-1]['linear attention']:.2f}, delta {recall[-1]['delta rule']:.2f}, softmax {recall[-1]['softmax attention']:.2f}"), \
        {"decode": decode, "prefill": prefill, "recall": recall}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="tiny benchmark sizes (seconds, on a CPU too)")
    parser.add_argument("--only", nargs="+", default=[""], help="run only the items whose names contain one of these")
    parser.add_argument("--out", default=None, help="file for the full log: every row, result and traceback")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    big = not args.small and device.type not in ("cpu", "meta")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    log = open(args.out, "w") if args.out else None
    say = lambda line: (print(line, flush=True), log and (log.write(line + "\n"), log.flush()))
    say(f"device report: {name}, torch {torch.__version__}, {'small' if args.small else 'notebook'} sizes"
        f"{' and larger' if big else ''}")
    say(f"{'item':<26} {'device':<6} {'status':<6} {'max diff':>9} {'s':>6}  result")
    items = [(k, lambda k=k: check_kernel(k, device)) for k in KERNELS] + [("w8a8_cpu_only", lambda: check_w8a8(device))]
    if device.type != "meta":
        items += [(k, lambda fn=fn: ("ok", None, *fn(device, args.small, big))) for k, fn in BENCHMARKS.items()]
    failed = 0
    for item, fn in items:
        if not any(part in item for part in args.only):
            continue
        start, detail, stderr = time.perf_counter(), None, io.StringIO()  # progress bars and warnings: to the log
        try:
            with contextlib.redirect_stderr(stderr), watched(device) if item in BENCHMARKS else contextlib.nullcontext():
                status, err, note, *detail = fn()
        except Exception as e:
            status, err, note, detail = "ERROR", None, f"{type(e).__name__}: {e}"[:150], [traceback.format_exc()]
        failed += status in ("FAIL", "ERROR")
        say(f"{item:<26} {device.type:<6} {status:<6} {'' if err is None else f'{err:.1e}':>9} "
            f"{time.perf_counter() - start:>6.1f}  {note}")
        if log:
            log.write("".join(f"    {line}\n" for line in [*map(str, detail or []), stderr.getvalue()[-2000:]] if line))
    say(f"{failed} item(s) failed or raised" if failed else "every item ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
