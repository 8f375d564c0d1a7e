"""Running a learner's Triton code inside notebook 15's checks: where the kernels run, the float32
tolerance there, a kernel that must be a kernel, a call whose interpreter-wrapped exceptions are
unwrapped and named (what Triton's interpreter cannot run is said to be that, not the learner's
mistake), the launches a launcher must have made and the results it may return: what its kernel
stored (`triton_watch.KernelWatch`)."""
import os

import numpy as np
import torch

import utils.flash_triton as ref
from autograder.checks import call, expect, expect_tensor, fail, own_work, triton_kernel, unwrap
from autograder.checks.nb15.triton_watch import cause


def device() -> str:
    """Where the kernels of this process run: the interpreter's CPU, or the GPU they were compiled for."""
    return ref.kernel_device()


def f32_tol() -> dict:
    return ref.tolerance()  # exact in the interpreter; TF32 products on a GPU


def expect_kernel(kernel, who):
    """`kernel` must be a @triton.jit kernel; a plain function is called once to show a shortcut."""
    if triton_kernel(kernel):
        return
    with own_work(kernel, who):
        try:
            kernel()  # a wrapper of the course's kernel raises Shortcut here
        except (AssertionError, NotImplementedError):
            raise
        except Exception:
            pass
    fail(f"{who} must be a Triton kernel: a function decorated with @triton.jit, launched as {who}[grid](...).",
         f"{who} 必须是一个 Triton 内核：用 @triton.jit 装饰的函数，以 {who}[grid](...) 的方式启动。",
         f"got {type(kernel).__name__}")


def run(fn, *args, name, **kwargs):
    """call(), with what the interpreter wraps (a kernel's exceptions) unwrapped and named."""
    def unwrapped():
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            inner = cause(e, (AssertionError, NotImplementedError))
            _expect_supported(name, inner if isinstance(inner, NotImplementedError) else cause(e, (ValueError,)))
            if inner is not None:
                raise inner
            root = cause(e, (ValueError, TypeError, RuntimeError, IndexError, AttributeError, NameError)) or e
            if "power of 2" in str(root) or "power of two" in str(root):
                fail(f"{name} crashed: tl.arange and the block shapes of a kernel must be powers of two; use a tl.constexpr block "
                     "such as triton.next_power_of_2(N) and mask what lies past the end.",
                     f"{name} 崩溃了：tl.arange 和内核中分块的形状必须是 2 的幂；请使用 tl.constexpr 分块（例如 triton.next_power_of_2(N)），"
                     "并用掩码遮住末尾之后的部分。", f"{type(root).__name__}: {root}")
            raise
    return call(unwrapped, name=name)


def _raised_in_triton(error) -> bool:
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}triton{os.sep}" in tb.tb_frame.f_code.co_filename


def _expect_supported(name, error):
    """A NotImplementedError raised by Triton itself (the interpreter's `extern_elementwise`,
    `inline_asm`; block pointers in 3.9), or a function of triton.language.extra that the
    interpreter does not reach (libdevice), is a limit of the interpreter that grades on a CPU:
    said as such, never as "not implemented yet"."""
    if error is None or not _raised_in_triton(error):
        return
    if not isinstance(error, NotImplementedError) and "_semantic" not in str(error):
        return
    import triton
    fail(f"{name} stopped inside Triton {triton.__version__}'s interpreter, which grades on a CPU and cannot run what your kernel "
         "uses there (CUDA's libdevice, inline assembly, or an API this version lacks). This is a limit of the interpreter, not a "
         "mistake in your algorithm: write it with triton.language's own operations (tl.exp, tl.exp2, tl.load with offsets and "
         "masks, block pointers or tensor descriptors), which the course's Triton 3.7 runs everywhere.",
         f"{name} 停在了 Triton {triton.__version__} 的解释器内部：评分在 CPU 上用解释器运行，而它无法运行你的内核所用的东西"
         "（CUDA 的 libdevice、内联汇编，或这个版本没有的 API）。这是解释器的限制，不是你算法的错误：请用 triton.language 自己的运算"
         "（tl.exp、tl.exp2、带偏移量和掩码的 tl.load、块指针或张量描述符）来写，课程使用的 Triton 3.7 在各处都能运行它们。",
         f"{type(error).__name__}: {error}")


def not_stored(watch, before, results):
    """[(name, how many values)] of the (name, tensor) `results` that hold values no kernel launch
    since `before` stored (rounded to the tensor's dtype, in any arrangement). The launcher
    allocates, launches and returns what the kernel wrote; a cast or a view of it is fine,
    arithmetic after the launch (a division by the sum, lse = m + log(l), torch.logsumexp) is
    work left out of the kernel. Said by `expect_stored` once the values themselves are right."""
    stored = torch.from_numpy(watch.stored(before))
    found = []
    for label, tensor in results:
        values = tensor.detach().cpu().flatten()
        kept = stored.to(values.dtype).double()
        values = values.double()
        nan = torch.isnan(values)
        missing = int((~torch.isin(values[~nan], kept[~torch.isnan(kept)])).sum())
        missing += int(nan.sum()) if not torch.isnan(kept).any() else 0
        if missing:
            found.append((label, missing, values.numel()))
    return found


def expect_stored(found, who):
    """`found`: what `not_stored` returned for the launches of `who`."""
    for label, missing, total in found:
        fail(f"{who} returned {label} with values that no tl.store of your kernel wrote: the launcher allocates the outputs, launches "
             "the kernel and returns what it stored (casting it to the inputs' dtype at most). Finishing in PyTorch after the launch "
             "(dividing by the sum, lse = m + log(l), torch.logsumexp) leaves part of the work out of the kernel.",
             f"{who} 返回的 {label} 中有你的内核的任何 tl.store 都没有写过的值：启动函数分配输出、启动内核，并返回内核存储的内容"
             "（至多把它转换为输入的 dtype）。在启动之后用 PyTorch 完成剩下的计算（除以和、lse = m + log(l)、torch.logsumexp），"
             "就把一部分工作留在了内核之外。",
             f"{missing} of {total} values never stored by the kernel")


def launched(watch, kernel, before, who, programs=None):
    """The launches since `before` must include `kernel`, on `programs` programs where given."""
    mine = [l for l in watch.launches[before:] if l.fn is unwrap(kernel)]
    expect(mine, f"{who}'s launcher never launched {getattr(kernel, '__name__', 'the kernel')}: the exercise is the kernel, launched as kernel[grid](...) by the launcher.",
           f"{who} 的启动函数从未启动 {getattr(kernel, '__name__', '内核')}：本练习要写的就是内核，由启动函数以 kernel[grid](...) 的方式启动。",
           f"kernels launched: {[getattr(l.fn, '__name__', '?') for l in watch.launches[before:]] or 'none'}")
    if programs is not None and mine[0].programs is not None:
        expect(mine[0].programs == programs[0],
               f"{who}: launch {programs[1]}.", f"{who}：{programs[2]}。",
               f"{mine[0].programs} programs, expected {programs[0]}")


def on_device(*tensors):
    return [t.to(device()) for t in tensors]


def expect_out_and_lse(result, who, out_shape, dtype):
    """A forward's (out, lse): shapes (B, H, T_q, d) and (B, H, T_q), out in the inputs' dtype, lse in
    float32; both come back detached, on the CPU."""
    expect(isinstance(result, tuple) and len(result) == 2, f"{who} must return a pair (out, lse).", f"{who} 必须返回一对 (out, lse)。",
           f"got {type(result).__name__}")
    out, lse = result
    expect_tensor(out, "out", "out")
    expect_tensor(lse, "lse", "lse")
    expect(tuple(out.shape) == out_shape, "out must have shape (B, H, T_q, d): one output per query.",
           "out 的形状必须是 (B, H, T_q, d)：每个查询一个输出。", f"shape {tuple(out.shape)}, expected {out_shape}")
    expect(tuple(lse.shape) == out_shape[:-1], "lse must have shape (B, H, T_q): one log-sum-exp per query.",
           "lse 的形状必须是 (B, H, T_q)：每个查询一个 log-sum-exp。", f"shape {tuple(lse.shape)}, expected {out_shape[:-1]}")
    expect(out.dtype == dtype, "out must come back in the inputs' dtype: allocate it like q (torch.empty_like(q)).",
           "out 必须以输入的 dtype 返回：像 q 一样分配它（torch.empty_like(q)）。", f"{dtype} inputs gave out {out.dtype}")
    expect(lse.dtype == torch.float32, "lse must be float32 whatever the inputs' dtype (the contract): allocate it with dtype=torch.float32.",
           "无论输入是什么 dtype，lse 都必须是 float32（约定）：用 dtype=torch.float32 分配它。", f"{dtype} inputs gave lse {lse.dtype}")
    return out.detach().cpu(), lse.detach().cpu()


def layout_explained(fn, family, axis, what_en, what_zh):
    """An `explain` for a family whose generated points lay out their inputs along `axis`: when a
    value is wrong on a point whose inputs are not contiguous and the same call on contiguous copies
    gives the right value, the layout is the mistake, and the sentence says so (else None: the
    harness's own words)."""
    def explain(probe, out, expected):
        level = next((part.split("=", 1)[1] for part in probe.label.split(", ") if part.startswith(f"{axis}=")), "contiguous")
        if level == "contiguous" or not isinstance(expected, torch.Tensor):
            return None
        args, kwargs = probe.build()
        plain = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        try:
            again = fn(*plain, **kwargs)
        except Exception:
            return None
        again = [t for t in (again if isinstance(again, (tuple, list)) else (again,))
                 if isinstance(t, torch.Tensor) and t.shape == expected.shape and t.dtype == expected.dtype]
        atol, rtol = family.tolerances(probe=probe).get(expected.dtype, (0, 0))
        if not again or not torch.allclose(again[0].detach().cpu().double(), expected.detach().cpu().double(), atol=atol, rtol=rtol):
            return None
        return (f"{what_en} is wrong when its inputs are not contiguous ({axis} = {level}: {LAYOUTS_EN[level]}) and right on "
                "contiguous copies of them: make them contiguous in the launcher (t.contiguous()), or pass every dimension's "
                "stride of each tensor to the kernel and use them all.",
                f"{what_zh} 在输入不连续时不对（{axis} = {level}：{LAYOUTS_ZH[level]}），在它们的连续副本上却是对的："
                "请在启动函数中把它们变成连续的（t.contiguous()），或者把每个张量每一维的步长都传给内核并全部用上。")
    return explain


LAYOUTS_EN = {"column-major": "the last dimension's elements far apart, stride(-1) != 1",
              "strided": "every other element of a wider buffer, stride(-1) == 2",
              "mixed": "q contiguous, k a transposed view, v as split heads give it: three layouts at once"}
LAYOUTS_ZH = {"column-major": "最后一维的元素在内存中相距很远，stride(-1) != 1",
              "strided": "取自更宽缓冲区的每隔一个元素，stride(-1) == 2",
              "mixed": "q 是连续的，k 是转置的视图，v 是拆分的头给出的布局：三种布局同时出现"}
