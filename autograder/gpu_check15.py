"""Notebook 15's kernels compiled for a real GPU: the course's, every valid alternative of the zoo,
and a few wrong ones as a control (issue 35).

Grading runs notebook 15's Triton kernels on the CPU, in Triton's interpreter, with the repairs of
utils/flash_triton.py: numpy has no bfloat16, so the interpreter's bf16 arithmetic is redone in
float32 and rounded back, as a GPU would. Whether that is what a GPU does is a claim, and this
script checks it where it matters: it compiles each kernel for CUDA (TRITON_INTERPRET unset), runs
its launcher on float32 and bfloat16 inputs (lengths not multiples of the blocks, causal or not,
split-head views and mixed layouts) and compares the results, and TritonFlashAttention's
gradients, with float64 PyTorch at the tolerances grading uses on a GPU. Every course kernel
(utils.flash_triton, and the solution notebook's own cells) and every RIGHT entry of the zoo
(autograder/tests/zoo/nb15*.py: among them a kernel with bfloat16 arithmetic and one with block
pointers) must land within them; the WRONG controls, whose mistakes show on any hardware, must
land outside them or crash.

    python -m autograder.gpu_check15                                    # on a CUDA machine
    TRITON_INTERPRET=1 python -m autograder.gpu_check15 --device cpu    # a smoke test, in the interpreter

It imports torch, triton, utils and autograder.tests.zoo only: a GPU machine may lack nbgrader and
jupytext. One line per entry (its largest |error| per dtype, and whether it behaved as expected),
then `gpu_check15: N of M entries as expected`; the exit code is 0 iff every entry is. A crash is
an entry's line, not the script's end; one that asks for triton.set_allocator (a tensor descriptor
made inside a kernel, on a GPU) is run again with one, and both outcomes are printed. `--only TEXT`
and `--skip TEXT` choose entries by name. About 40 s in the interpreter on two CPU cores.

On an NVIDIA H200 (torch 2.11.0+cu130, triton 3.6.0), 2026-11-28: 35 of 35 entries as expected,
73 s. The first run found two things that the CPU's grading did differently from the GPU: the
interpreter truncated float32 to bfloat16 (a bf16 accumulator drifted to 0.2 here, 5.0e-2 there;
utils/flash_triton.py now rounds to nearest even, and grading's ACC_TOL sits between the course's
8e-3 and that 5e-2), and a kernel that makes tensor descriptors needs `triton.set_allocator` on a
GPU, which the interpreter does not ask for (the zoo's entry now sets it).
"""
import argparse
import importlib
import importlib.util
import math
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import NamedTuple

import torch

ROOT = Path(__file__).resolve().parent.parent
from autograder.gpu_cases15 import (ACC_TOL, BF16, BF16_GRAD_TOL, BF16_TOL, F32, FORWARD_CASES, FUNCTION_CASES, NAMES, SMALL, SOFTMAX_TOL, Tally,  # noqa: F401
                                     attention64, bf16_lse_tol, f32_tol, qkv, randn, softmax_inputs)

# The WRONG entries kept as controls: mistakes that show in the values on any hardware (not the
# ones only the interpreter's watch sees, such as a load outside the tensors or a masked load
# without other=, which a GPU may well survive).
CONTROLS = {
    "softmax_rows_kernel": ("masked columns loaded as 0", "no maximum subtracted", "BLOCK_N a constant 64"),
    "flash_forward_kernel": ("keys past T_k not set to -inf", "accumulator not rescaled", "causal loop one tile short",
                             "causal without T_k - T_q", "every head reads head 0's keys", "lse left in base 2",
                             "running maximum started at 0", "the width hard-coded as 16", "accumulator in bf16"),
    "TritonFlashAttention": ("backward ignores causal", "float32 out for bf16 inputs"),
}
LAUNCHERS = {"softmax_rows_kernel": "triton_softmax", "flash_forward_kernel": "triton_flash_attention_forward"}


class Entry(NamedTuple):
    kind: str  # model, RIGHT or WRONG
    exercise: str
    label: str
    candidate: object  # what grading binds: a dict (kernel and launcher) or a Function; an exception if it could not be loaded
    right: bool  # expected within tolerance



# Loading -----------------------------------------------------------------------------------------
def load(device):
    """utils.flash_triton and the zoo, imported once TRITON_INTERPRET is settled: triton reads it when
    a kernel is decorated, so it cannot change after these imports."""
    if device == "cuda":
        os.environ.pop("TRITON_INTERPRET", None)  # natively: the point of this script
        if not torch.cuda.is_available():
            sys.exit("gpu_check15: no CUDA device here; run the smoke test with TRITON_INTERPRET=1 ... --device cpu")
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    ref = importlib.import_module("utils.flash_triton")
    if ref.interpreted() != (device == "cpu"):
        sys.exit(f"gpu_check15: kernels would run {'in' if ref.interpreted() else 'outside'} the interpreter on {device}")
    return ref, importlib.import_module("autograder.tests.zoo.nb15")


def solution_cells():
    """Notebook 15's model answers, the solution cells of solutions/15_flash_attention_triton.py, as a
    module (triton reads a kernel's source from its file, so exec'd text will not do)."""
    text = (ROOT / "solutions" / "15_flash_attention_triton.py").read_text(encoding="utf-8")
    wanted = "|".join(("softmax_rows_kernel", "flash_forward_kernel", "TritonFlashAttention"))
    cells = [c.split("\n", 1) for c in re.split(r"^# %%", text, flags=re.M)[1:]]
    code = [body for header, body in cells if re.search(rf'"grade_id": "({wanted})"', header) and '"solution": true' in header]
    if len(code) != 3:
        raise LookupError(f"found {len(code)} of the 3 solution cells in solutions/15_flash_attention_triton.py")
    prelude = ("import math\nimport torch\nimport triton\nimport triton.language as tl\n"
               "from utils.flash_attention import flash_attention_backward\n")
    path = Path(tempfile.mkdtemp(prefix="gpu_check15_")) / "nb15_solution_cells.py"
    path.write_text(prelude + "\n\n".join(code), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("nb15_solution_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def course(module):
    """The exercises' answers in `module` (utils.flash_triton, or the solution cells), bound as grading binds them."""
    return {"softmax_rows_kernel": {"softmax_rows_kernel": module.softmax_rows_kernel, "triton_softmax": module.triton_softmax},
            "flash_forward_kernel": {"flash_forward_kernel": module.flash_forward_kernel,
                                     "triton_flash_attention_forward": module.triton_flash_attention_forward},
            "TritonFlashAttention": module.TritonFlashAttention}


def collect(ref, zoo):
    """Model answers first, then the zoo's RIGHT entries, then the WRONG controls (last: a wrong
    kernel is the likeliest to break the CUDA context)."""
    entries = [Entry("model", e, "utils.flash_triton", c, True) for e, c in course(ref).items()]
    try:
        entries += [Entry("model", e, "solution cells", c, True) for e, c in course(solution_cells()).items()]
    except Exception as e:  # reported as an entry of its own, not a crash of the script
        entries.append(Entry("model", "(all three)", "solution cells", e, True))
    for exercise, found in zoo.RIGHT.items():
        entries += [Entry("RIGHT", exercise, label, c, True) for label, c in found.items()]
    for exercise, labels in CONTROLS.items():
        entries += [Entry("WRONG", exercise, label, zoo.WRONG[exercise][label][0], False) for label in labels]
    return entries


# The three exercises ----------------------------------------------------------------------------
def run_softmax(triton_softmax, ctx, tally):
    for label, x, x64 in softmax_inputs(ctx.device):
        out = triton_softmax(x)
        tally.dtype_is(label, "out", out, x.dtype)
        tally.compare(label, x.dtype, "out", out, torch.softmax(x64, -1), **SOFTMAX_TOL[x.dtype])


def forward_tolerances(ctx, case, dtype, q64, k64):
    """(out's, lse's) tolerances, as grading sets them for such a run on this device."""
    if dtype == BF16:
        return dict(atol=ACC_TOL if case.values == "values near 3" else BF16_TOL, rtol=0), dict(atol=bf16_lse_tol(q64, k64), rtol=0)
    if case.values == "far below 0" and not ctx.ref.interpreted():
        return dict(atol=0.1, rtol=0), f32_tol(ctx.ref)  # TF32 moves scores near -200 (triton_forward._expect_new_kinds)
    return f32_tol(ctx.ref), f32_tol(ctx.ref)


def run_forward(launcher, ctx, tally):
    for case in ctx.forward_cases:
        for dtype in case.dtypes:
            (q, k, v), (q64, k64, v64) = qkv(case, dtype, ctx.device)
            blocks = {} if case.blocks is None else dict(block_q=case.blocks[0], block_k=case.blocks[1])
            result = launcher(q, k, v, causal=case.causal, **blocks)
            label = f"{case.label} {NAMES[dtype]}"
            if not (isinstance(result, tuple) and len(result) == 2):
                tally.failures.append(f"{label}: returned {type(result).__name__}, not (out, lse)")
                continue
            (out, lse), (want_out, want_lse) = result, attention64(q64, k64, v64, case.causal)
            tally.dtype_is(label, "out", out, dtype)
            tally.dtype_is(label, "lse", lse, F32)
            out_tol, lse_tol = forward_tolerances(ctx, case, dtype, q64, k64)
            tally.compare(label, dtype, "out", out, want_out, **out_tol)
            tally.compare(label, dtype, "lse", lse, want_lse, **lse_tol)


def run_function(cls, ctx, tally):
    for case in FUNCTION_CASES:
        for dtype in case.dtypes:
            (q, k, v), leaves64 = qkv(case, dtype, ctx.device, seed=170)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]  # leaves that keep the views' strides
            g = randn(*case.shape[:3], case.shape[-1], seed=173).to(dtype).to(ctx.device)
            out = cls.apply(*leaves, case.causal)
            out.backward(g)
            leaves64 = [t.requires_grad_() for t in leaves64]
            want, _ = attention64(*leaves64, case.causal)
            grads = torch.autograd.grad(want, leaves64, g.double())
            label = f"{case.label} causal={case.causal} {NAMES[dtype]}"
            tally.dtype_is(label, "out", out, dtype)
            out_tol = dict(atol=BF16_TOL, rtol=0) if dtype == BF16 else f32_tol(ctx.ref)
            tally.compare(label, dtype, "out", out, want.detach(), **out_tol)
            for name, leaf, grad in zip("qkv", leaves, grads):
                tally.dtype_is(label, f"d{name}", leaf.grad, dtype)
                grad_tol = BF16_GRAD_TOL if dtype == BF16 else f32_tol(ctx.ref, gradients=True)
                tally.compare(label, dtype, "grad", leaf.grad, grad, **grad_tol)


RUNNERS = {"softmax_rows_kernel": run_softmax, "flash_forward_kernel": run_forward, "TritonFlashAttention": run_function}


# Judging one entry --------------------------------------------------------------------------------
class Context(NamedTuple):
    ref: object
    device: str
    forward_cases: tuple


def describe(e):
    """One line for an exception; a Triton compile error says so (an API of a later Triton, say)."""
    import triton  # here and below: imported once load() has settled TRITON_INTERPRET
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:
        CompilationError = ()
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [""]
    if isinstance(e, CompilationError):  # the source excerpt first, the error last
        text = f"Triton {triton.__version__} could not compile it (an API this version lacks?): {type(e).__name__}: {lines[-1]}"
    else:
        text = f"{type(e).__name__}: {lines[0]}{' ...' if len(lines) > 1 else ''}"
    if e.__cause__ is not None:
        text += f" (from {type(e.__cause__).__name__}: {(str(e.__cause__).strip().splitlines() or [''])[0]})"
    return text[:400]


def attempt(entry, ctx):
    """(tally, crash or None) of one run of the entry's runner."""
    tally = Tally()
    if isinstance(entry.candidate, Exception):
        return tally, describe(entry.candidate), entry.candidate
    call = entry.candidate[LAUNCHERS[entry.exercise]] if entry.exercise in LAUNCHERS else entry.candidate
    try:
        RUNNERS[entry.exercise](call, ctx, tally)
        if ctx.device == "cuda":
            torch.cuda.synchronize()  # an asynchronous fault belongs to this entry, not the next
    except Exception as e:
        return tally, describe(e), e
    return tally, None, None


def set_allocator():
    """Scratch memory for tensor descriptors made inside a kernel: Triton asks the caller for it."""
    import triton
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def judge(entry, ctx):
    """(the entry's line, whether it behaved as expected, whether the CUDA context is lost)."""
    start = time.perf_counter()
    tally, crash, error = attempt(entry, ctx)
    note = ""
    if crash and "allocator" in crash and ctx.device == "cuda":  # say whether the kernel is right once given one
        set_allocator()
        again, crash_again, _ = attempt(entry, ctx)
        note = (f" | with triton.set_allocator: {again.summary()}, "
                f"{'crashed: ' + crash_again if crash_again else 'outside tolerance: ' + again.failures[0] if again.failures else 'within tolerance'}")
    within = crash is None and not tally.failures
    verdict = "crashed: " + crash if crash else "outside tolerance: " + "; ".join(tally.failures[:3]) if tally.failures else "within tolerance"
    agrees = within == entry.right
    line = (f"{entry.kind:5} {entry.exercise} / {entry.label} | {tally.summary()} | {verdict}{note} | "
            f"expected {'within' if entry.right else 'outside'}: {'yes' if agrees else 'NO'} | {time.perf_counter() - start:.1f}s")
    if crash and entry.right and error is not None:  # an unexpected crash: where it happened
        line += "\n      " + "      ".join(traceback.format_exception(type(error), error, error.__traceback__)[-4:])
    lost = ctx.device == "cuda" and crash is not None and bool(re.search(r"CUDA error|illegal|unspecified launch failure", crash))
    return line, agrees, lost


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda: compiled natively (the check); cpu: Triton's interpreter (a smoke test of this script)")
    parser.add_argument("--only", default="", help="run only the entries whose exercise or label contains this text")
    parser.add_argument("--skip", action="append", default=[], help="leave out the entries whose label contains this text")
    args = parser.parse_args(argv)
    ref, zoo = load(args.device)
    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow in the interpreter: the controls' NaN and inf, counted below
    import triton
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU, Triton's interpreter"
    print(f"gpu_check15: torch {torch.__version__}, triton {triton.__version__}, {where}, "
          f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', 'unset')}", flush=True)
    cases = tuple(c._replace(shape=SMALL.get(c.shape, c.shape)) for c in FORWARD_CASES) if args.device == "cpu" else FORWARD_CASES
    ctx = Context(ref, args.device, cases)
    entries = [e for e in collect(ref, zoo) if args.only in f"{e.exercise} / {e.label}" and not any(s in e.label for s in args.skip)]
    start, agreeing = time.perf_counter(), 0
    for i, entry in enumerate(entries):
        line, agrees, lost = judge(entry, ctx)
        agreeing += agrees
        print(line, flush=True)
        if lost:  # every later launch would fail too: say so instead of blaming the entries
            print(f"gpu_check15: the CUDA context is lost; {len(entries) - i - 1} entries not run (rerun with --skip '{entry.label}')")
            break
    print(f"gpu_check15: {time.perf_counter() - start:.0f}s in all")
    print(f"gpu_check15: {agreeing} of {len(entries)} entries as expected", flush=True)
    return 0 if agreeing == len(entries) else 1


if __name__ == "__main__":
    sys.exit(main())
