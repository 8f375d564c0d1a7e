"""Runs inside the learner's kernel while a notebook is graded, so that the tests judge the
learner's answers with the course's own checks, not with whatever the notebook left behind.

This file is never imported by the kernel: `autograder.preprocessors.GradingExecute` reads it,
followed by autograder/kernel_guard_modules.py (the course's modules run afresh), and sends the
two as one text with every call (as a user expression, which IPython evaluates without its
input transformers), so the learner's code cannot replace these functions.

    start()          before the first cell: record builtins, math, torch and the IPython
                     machinery that the checks and the test cells rely on
    refresh(root, wanted)
                     before every test cell: put the recorded objects back, and run a module of
                     the course's checks (autograder.*) or reference kernels (utils.*) afresh
                     from its file whenever it differs from what that file defined (first time:
                     always, since the notebook may have changed it before grading saw it)

What this cannot stop (a notebook has full use of Python): code that runs while a check calls
the learner's function, threads that keep patching, the interpreter's import machinery, this
guard's own record, native code and files on disk. README "What grading guarantees" says so.
"""
import builtins
import copy
import importlib
import importlib.util
import math
import operator
import os
import sys
import sysconfig
import types

_KEY = "_autograder_grading_guard"
_MISSING = object()


def _state() -> dict:
    global _MISSING
    state = getattr(sys, _KEY, None)
    if not isinstance(state, dict) or "dicts" not in state:
        raise RuntimeError("the grading guard was not started")
    _MISSING = state["missing"]  # this text runs afresh each time: one marker for an empty cell
    return state


def _shell():
    from IPython.core.interactiveshell import InteractiveShell
    return InteractiveShell._instance if InteractiveShell.initialized() else None


def _functions_of(value):
    """Python functions reachable from a module or class attribute."""
    if isinstance(value, types.FunctionType):
        return [value]
    if isinstance(value, (staticmethod, classmethod)):
        return _functions_of(value.__func__)
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
    wrapped = getattr(value, "__wrapped__", None) if not isinstance(value, (type, types.ModuleType)) else None
    return [wrapped] if isinstance(wrapped, types.FunctionType) else []


def _internals(fn):
    cells = tuple(c.cell_contents if _filled(c) else _MISSING for c in (fn.__closure__ or ()))
    return (fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, cells)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _record(owners) -> tuple[list, list]:
    dicts, functions = [], []
    for owner in owners:
        saved = dict(vars(owner))
        dicts.append((owner, saved, isinstance(owner, type)))
        for value in saved.values():
            functions += [_internals(f) for f in _functions_of(value)]
    return dicts, functions


def _restore_functions(functions):
    for fn, code, defaults, kwdefaults, cells in functions:
        if fn.__code__ is not code:
            fn.__code__ = code
        if fn.__defaults__ is not defaults:
            fn.__defaults__ = defaults
        if fn.__kwdefaults__ is not kwdefaults:
            fn.__kwdefaults__ = kwdefaults
        for cell, value in zip(fn.__closure__ or (), cells):
            if value is not _MISSING and (not _filled(cell) or cell.cell_contents is not value):
                cell.cell_contents = value


def _restore(dicts, functions):
    for owner, saved, is_class in dicts:
        current = vars(owner)
        for key, value in saved.items():
            if current.get(key, _MISSING) is not value:
                try:
                    setattr(owner, key, value)
                except (AttributeError, TypeError):
                    pass
        if is_class:  # an attribute added to a class shadows what its bases define
            for key in [k for k in current if k not in saved]:
                try:
                    delattr(owner, key)
                except (AttributeError, TypeError):
                    pass
    _restore_functions(functions)


def _installed(fn) -> bool:
    """A callback defined by an installed package (matplotlib's inline backend), not by a cell."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None:
        return False
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    return any(code.co_filename.startswith(r + os.sep) for r in roots)


def _targets():
    import torch
    import torch.nn.functional
    import torch.nn.init
    import torch.linalg
    import torch.special
    import torch.testing
    from torch import nn

    modules = [builtins, math, operator, copy, importlib, importlib.util, torch, torch.nn.functional,
               torch.linalg, torch.special, torch.testing, torch.nn.init, torch.random]
    classes = [torch.Tensor, nn.Parameter, nn.Module, nn.Linear, nn.Embedding, nn.Dropout, nn.ModuleList,
               nn.Sequential, nn.LayerNorm, torch.Generator]
    shell = _shell()
    if shell is not None:
        classes += [k for k in type(shell).__mro__ if k.__module__.split(".")[0] in ("IPython", "ipykernel")]
        kernel = getattr(shell, "kernel", None)
        if kernel is not None:
            classes += [k for k in type(kernel).__mro__ if k.__module__.split(".")[0] in ("ipykernel",)]
    return modules, [k for k in classes if isinstance(k, type)]


def _shell_lists(shell):
    """(owner, attribute) of the lists through which IPython transforms or follows a cell."""
    manager = shell.input_transformer_manager
    return [(manager, "cleanup_transforms"), (manager, "line_transforms"), (manager, "token_transformers"),
            (shell, "input_transformers_post"), (shell, "ast_transformers")]


def start(root: str) -> str:
    modules, classes = _targets()
    dicts, functions = _record(modules + classes)
    state = {"dicts": dicts, "functions": functions, "meta_path": list(sys.meta_path),
             "path_hooks": list(sys.path_hooks), "trace": sys.gettrace(), "profile": sys.getprofile(),
             "own": {}, "code": {}, "torch": _torch_state(), "missing": _MISSING,
             "pyc": (importlib.util.MAGIC_NUMBER, sys.implementation.cache_tag),
             "path_finders": [f for f in sys.path_importer_cache.values() if f is not None]}
    shell = _shell()
    if shell is not None:
        state["shell"] = shell
        state["shell_methods"] = {k: v for k, v in vars(shell).items() if callable(v)}
        state["lists"] = [(o, a, getattr(o, a), list(getattr(o, a))) for o, a in _shell_lists(shell)]
        state["events"] = {k: list(v) for k, v in shell.events.callbacks.items()}
        state["custom_exceptions"] = shell.custom_exceptions
        state["custom_tb"] = shell.CustomTB
    setattr(sys, _KEY, state)
    # Course modules that the notebook imports are loaded by this finder and fingerprinted at
    # once, so refresh() reloads them only if something changes them afterwards.
    sys.meta_path.insert(0, _Finder(state, root, {}))
    return "started"


def _torch_state() -> dict:
    """torch's global switches and hooks: a hook or mode could rewrite every result."""
    import torch
    import torch.nn.modules.module as module

    hooks = {k: (v, dict(v)) for k, v in vars(module).items() if k.startswith("_global") and isinstance(v, dict)}
    return {"dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(), "hooks": hooks}


def _restore_torch(saved):
    import torch

    while torch._C._len_torch_function_stack() > 0:  # TorchFunctionMode: intercepts every call
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > 0:
        torch._C._pop_torch_dispatch_stack()
    torch.set_default_dtype(saved["dtype"])
    torch.set_grad_enabled(saved["grad"])
    for hooks, items in saved["hooks"].values():
        if hooks.keys() != items.keys() or any(hooks[k] is not v for k, v in items.items()):
            hooks.clear()
            hooks.update(items)


def _restore_kernel(state):
    _restore(state["dicts"], state["functions"])
    _restore_torch(state["torch"])
    sys.meta_path[:] = state["meta_path"]
    sys.path_hooks[:] = state["path_hooks"]
    standard = {type(f) for f in state["path_finders"]}
    for path, finder in list(sys.path_importer_cache.items()):
        if finder is not None and type(finder) not in standard:
            del sys.path_importer_cache[path]
    if sys.gettrace() is not state["trace"]:
        sys.settrace(state["trace"])
    if sys.getprofile() is not state["profile"]:
        sys.setprofile(state["profile"])
    shell = state.get("shell")
    if shell is None:
        return
    for key in [k for k, v in vars(shell).items() if callable(v) and state["shell_methods"].get(k) is not v]:
        if key in state["shell_methods"]:
            setattr(shell, key, state["shell_methods"][key])
        elif hasattr(type(shell), key):
            delattr(shell, key)
    for owner, attr, original, items in state["lists"]:
        if getattr(owner, attr) is not original:
            setattr(owner, attr, original)
        original[:] = items
    for event, callbacks in shell.events.callbacks.items():
        before = state["events"].get(event, [])
        callbacks[:] = [c for c in callbacks if any(c is b for b in before) or _installed(c)]
    shell.custom_exceptions = state["custom_exceptions"]
    shell.CustomTB = state["custom_tb"]


def refresh(root: str, wanted=()) -> str:
    """Before a test cell: restore what start() recorded, then load the course's modules afresh."""
    state = _state()
    _restore_kernel(state)
    own = state["own"]
    loaded = [n for n, m in list(sys.modules.items()) if _own(n)]
    stale = [n for n in loaded if not _own_intact(own, n)]
    stale += [n for n in ("autograder", "autograder.checks", *wanted)
              if n not in stale and n not in sys.modules and _file_of(root, n)[0]]
    old = {n: sys.modules.pop(n) for n in stale if n in sys.modules}
    previous = {}  # id -> (object, module name, attribute) of what the stale modules defined
    for name, module in old.items():
        for key, value in list(vars(module).items()):
            if getattr(value, "__module__", None) == name:
                previous[id(value)] = (value, name, key)
    finder = _Finder(state, root, old)
    sys.meta_path.insert(0, finder)
    failed = []
    for name in stale:
        try:
            importlib.import_module(name)
        except Exception:  # a file that no longer loads: keep what the kernel had
            failed.append(name)
            if name in old:
                sys.modules.setdefault(name, old[name])
    finder.old = {}  # from now on it loads (and fingerprints) course modules the notebook imports
    for name, module in list(sys.modules.items()):  # a package knows its loaded submodules
        parent, _, child = name.rpartition(".")
        if parent and _own(name) and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
    # The learner's names for what a stale module defined (`from utils.x import f as g`) now
    # name its fresh twin, so a shortcut guard that looks for the reference finds them.
    main = vars(sys.modules["__main__"])
    for key, value in list(main.items()):
        hit = previous.get(id(value))
        if hit is not None and hit[0] is value:
            fresh = getattr(sys.modules.get(hit[1]), hit[2], None)
            if fresh is not None:
                main[key] = fresh
    return "reloaded " + " ".join(stale) + (" failed " + " ".join(failed) if failed else "")
