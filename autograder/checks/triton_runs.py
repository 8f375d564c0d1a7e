"""Running a learner's Triton code inside notebook 15's checks: where the kernels run, the float32
tolerance there, a kernel that must be a kernel, a call whose interpreter-wrapped exceptions are
unwrapped and named, and the launches a launcher must have made (`triton_watch.KernelWatch`)."""
import torch

import utils.flash_triton as ref
from autograder.checks import call, expect, expect_tensor, fail, own_work, triton_kernel, unwrap
from autograder.checks.triton_watch import cause


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
