"""Watching Triton kernels run: which kernels were launched, on how many programs, and that every
load and store of an interpreted kernel stays inside the tensors it was given.

Notebook 15's exercises are kernels and their launchers. Values show what a kernel computed; they
cannot show whether a launcher ran the learner's kernel at all (rather than PyTorch), nor whether
an edge without a mask read memory that happened to be harmless. `KernelWatch` wraps the launch
of every Triton kernel (the `run` of its class) and, in Triton's interpreter, the two operations
that every load and store reaches (`InterpreterBuilder.create_masked_load` and
`create_masked_store`: tl.load, tl.store and tensor descriptors all end there). An address outside
the storage of the launch's tensor arguments raises `OutOfBounds` before it is read or written,
so a missing mask is named, instead of reading garbage or corrupting the process (the interpreter
reads and writes raw addresses).

    with KernelWatch() as watch:
        triton_softmax(x)
    watch.launches   # [Launch(fn=<the kernel's Python function>, programs=6)]
    watch.launched(softmax_rows_kernel)   # 1
    watch.stored(0)   # float64 numpy array: every value the launches from the first on stored

A masked load without `other=` reads values that Triton's documentation calls undefined (the
interpreter alone gives 0; a GPU gives whatever the registers held): inside the watch they are
NaN, so a kernel that relies on them shows it (`KernelWatch(undefined=0.0)` gives the interpreter's
zeros, to tell that cause from another).

What a launch stores is kept (`Launch.stored`), so that a check can tell whether a launcher's
result is what its kernel computed or was finished in PyTorch after the launch (`triton_runs`).

While a kernel runs, the shortcut rule's frame watch (`executes.watching`, a trace call per
Python frame) is paused: the interpreter runs a rewritten copy of each @jit function, never a
reference's code object, and the watch made each launch 2.7x slower (its ~10^5 frames); the
course's functions and kernels stay blocked by name meanwhile (`shortcuts.forbid`).

The wrapping is put back when the block ends, also when it ends with an exception.
"""
import sys

import numpy as np
import torch

from autograder.checks import message


class OutOfBounds(AssertionError):
    """A kernel's load or store at an address outside every tensor of its launch."""


class Launch:
    def __init__(self, fn, programs=None):
        self.fn, self.programs = fn, programs
        self.stored = []  # float64 arrays: the values each tl.store wrote

    def __repr__(self):
        return f"Launch({getattr(self.fn, '__name__', self.fn)}, programs={self.programs})"


def _programs(grid):
    return int(np.prod(grid)) if isinstance(grid, (tuple, list)) else None


class KernelWatch:
    def __init__(self, undefined=float("nan")):
        self.launches, self.undefined = [], undefined
        self._ranges, self._current, self._restore = None, None, []

    def __enter__(self):
        from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder
        from triton.runtime.jit import JITFunction
        watch = self
        for cls in (InterpretedFunction, JITFunction):
            original = cls.__dict__["run"]

            def run(kernel, *args, _original=original, **kwargs):
                return watch._launch(kernel, _original, args, kwargs)

            self._patch(cls, "run", run)
        load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

        def create_masked_load(builder, ptrs, mask, other=None, *rest, **kwargs):
            watch._check(builder, ptrs, mask, "read")
            if other is None and watch._ranges is not None:
                other = watch._undefined(ptrs)
            return load(builder, ptrs, mask, other, *rest, **kwargs)

        def create_masked_store(builder, ptrs, value, mask, *rest, **kwargs):
            watch._check(builder, ptrs, mask, "wrote")
            watch._record(value, mask)
            return store(builder, ptrs, value, mask, *rest, **kwargs)

        self._patch(InterpreterBuilder, "create_masked_load", create_masked_load)
        self._patch(InterpreterBuilder, "create_masked_store", create_masked_store)
        return self

    def stored(self, first: int = 0):
        """Every value stored by the launches from `first` on, as float64 (bfloat16 decoded)."""
        parts = [part for launch in self.launches[first:] for part in launch.stored]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _undefined(self, ptrs):
        """What a masked-off lane of a load without other= reads here: NaN of the loaded type."""
        from triton.runtime.interpreter import TensorHandle
        kind = ptrs.get_element_ty()
        if not kind.is_floating():
            return None
        values = np.full(np.shape(ptrs.data), self.undefined, dtype=np.float32)
        if kind.name == "bf16":
            values = (values.view(np.uint32) >> 16).astype(np.uint16)
        elif kind.name in ("fp16", "fp64"):
            values = values.astype(np.float16 if kind.name == "fp16" else np.float64)
        elif kind.name != "fp32":
            return None
        return TensorHandle(values, kind)

    def _record(self, value, mask):
        if self._current is None:
            return
        data = np.broadcast_to(value.data, np.shape(mask.data))[np.asarray(mask.data, dtype=bool)]
        if value.dtype.scalar.name == "bf16":  # kept as its 16-bit patterns
            data = (data.astype(np.uint32) << 16).view(np.float32)
        self._current.stored.append(np.asarray(data, dtype=np.float64))

    def launched(self, kernel) -> int:
        """How many times `kernel` (a @triton.jit function) was launched inside the block."""
        from autograder.checks.core.shortcuts import unwrap
        return sum(launch.fn is unwrap(kernel) for launch in self.launches)

    def __exit__(self, *exc):
        while self._restore:
            cls, name, original = self._restore.pop()
            setattr(cls, name, original)
        return False

    def _patch(self, cls, name, value):
        self._restore.append((cls, name, cls.__dict__[name]))
        setattr(cls, name, value)

    def _launch(self, kernel, original, args, kwargs):
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        launch = Launch(kernel.fn, _programs(kwargs.get("grid")))
        self.launches.append(launch)
        outer = self._ranges, self._current
        self._ranges = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors]
        self._current = launch
        trace = sys.gettrace()
        sys.settrace(None)
        try:
            return original(kernel, *args, **kwargs)
        finally:
            sys.settrace(trace)
            self._ranges, self._current = outer

    def _check(self, builder, ptrs, mask, verb):
        if self._ranges is None:
            return
        if self._current.programs is None and getattr(builder, "grid_dim", None) is not None:
            self._current.programs = int(np.prod(builder.grid_dim))
        addresses = np.broadcast_to(ptrs.data, np.shape(mask.data))[np.asarray(mask.data, dtype=bool)].astype(np.uint64)
        size = ptrs.get_element_ty().primitive_bitwidth // 8
        inside = np.zeros(addresses.shape, dtype=bool)
        for start, nbytes in self._ranges:
            inside |= (addresses >= start) & (addresses + size <= start + nbytes)
        if not inside.all():
            name = getattr(self._current.fn, "__name__", "the kernel")
            where = tuple(int(i) for i in builder.grid_idx) if getattr(builder, "grid_idx", None) is not None else "?"
            raise OutOfBounds(message(
                f"{name} {verb} memory outside the tensors it was given: every tl.load and tl.store at the edge of a "
                "tensor needs a mask (mask=offsets < n, with other= for a load), in the last tile of every dimension.",
                f"{name} 访问（{'读取' if verb == 'read' else '写入'}）了传给它的张量之外的内存：在张量边缘的每个 tl.load 和 "
                "tl.store 都需要掩码（mask=offsets < n，加载时再给 other=），每一维的最后一个分块都是如此。",
                f"{int((~inside).sum())} of {inside.size} addresses out of bounds in program {where}"))


def cause(error: BaseException, kinds) -> BaseException | None:
    """The first exception of `kinds` in error's chain (the interpreter wraps a kernel's errors)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
